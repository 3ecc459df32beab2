package supervisor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"

	"github.com/sipvisor/sipvisor/pool"
)

// envLogFormat passes the supervisor's log format to its workers, so that
// the one stream they share has one format whatever file a renewed worker
// loads.
const envLogFormat = "SIPVISOR_LOG_FORMAT"

// RunWorker is the "sipvisor worker" command: the life of one worker process.
func RunWorker(ctx context.Context, stderr io.Writer) int {
	logger := workerLogger(stderr, os.Getenv(envLogFormat))
	err := pool.RunWorker(ctx, logger, newWorkerHandler)
	switch {
	case err == nil:
		return 0
	case err == pool.ErrNotChild:
		// Someone ran it by hand: a sentence for them, not a log line.
		fmt.Fprintln(stderr, "sipvisor worker:", err)
		return 2
	}
	// pool.RunWorker names the worker in the lines it logs; this one comes
	// after it, so it names it itself.
	id, _ := strconv.Atoi(os.Getenv(pool.EnvWorkerID))
	logger.Error("worker failed", "group", os.Getenv(pool.EnvGroup), "worker", id, "pid", os.Getpid(), "error", err)
	return 1
}

// workerLogger logs in format, text unless it is json.
func workerLogger(w io.Writer, format string) *slog.Logger {
	if format == "json" {
		return slog.New(slog.NewJSONHandler(w, nil))
	}
	return slog.New(slog.NewTextHandler(w, nil))
}
