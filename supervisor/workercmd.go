package supervisor

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/sipvisor/sipvisor/worker"
	"github.com/sipvisor/sipvisor/worker/engine"
)

// RunWorker is the "sipvisor worker" command: the life of one worker process.
func RunWorker(ctx context.Context, stderr io.Writer) int {
	logger := slog.New(slog.NewJSONHandler(stderr, nil))
	if err := worker.Run(ctx, logger, newWorkerHandler); err != nil {
		fmt.Fprintln(stderr, "sipvisor worker:", err)
		if err == worker.ErrNotChild {
			return 2
		}
		return 1
	}
	return 0
}

// newWorkerHandler makes the SIP engine of a worker process.
func newWorkerHandler(env *worker.Env) (worker.Handler, error) { return engine.New(env) }
