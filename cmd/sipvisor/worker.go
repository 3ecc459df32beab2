package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"

	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/supervisor"
	"github.com/sipvisor/sipvisor/worker"
	"github.com/sipvisor/sipvisor/worker/engine"
)

// runWorker is the "sipvisor worker" command: the life of one worker
// process, which its supervisor started with the cookie (wire.EnvCookie);
// without it, worker.Run refuses and the person who typed it reads why.
func runWorker(ctx context.Context, stderr io.Writer) int {
	logger := workerLogger(stderr, os.Getenv(wire.EnvLogFormat), os.Getenv(wire.EnvGeneration))
	err := worker.Run(ctx, logger, newWorkerHandler)
	switch {
	case err == nil:
		return 0
	case errors.Is(err, worker.ErrNotChild):
		// Someone ran it by hand: a sentence for them, not a log line.
		fmt.Fprintln(stderr, "sipvisor worker:", err)
		return 2
	}
	// worker.Run names the worker in the lines it logs; this one comes
	// after it, so it names it itself.
	id, _ := strconv.Atoi(os.Getenv(wire.EnvWorkerID))
	logger.Error("worker failed", "group", os.Getenv(wire.EnvGroup), "worker", id, "pid", os.Getpid(), "error", err)
	return 1
}

// workerLogger logs in format, text unless it is json, each line ended by
// the supervisor's generation when it passed one.
func workerLogger(w io.Writer, format, generation string) *slog.Logger {
	l := slog.New(slog.NewTextHandler(w, nil))
	if format == "json" {
		l = slog.New(slog.NewJSONHandler(w, nil))
	}
	if gen, err := strconv.Atoi(generation); err == nil && gen > 0 {
		l = supervisor.WithGeneration(l, gen)
	}
	return l
}

// newWorkerHandler makes the SIP engine of a worker process.
func newWorkerHandler(env *worker.Env) (worker.Handler, error) { return engine.New(env) }
