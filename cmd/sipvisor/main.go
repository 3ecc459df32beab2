// Command sipvisor is an auto-scaling, overload-safe SIP server front end.
// See README.md, or run sipvisor -h.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/sipvisor/sipvisor/supervisor"
)

func main() {
	// Signals are the supervisor's to handle (drain on SIGTERM, reload on
	// SIGHUP); the context only ends for a worker when its loop is done.
	ctx := context.Background()
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		// A worker ignores SIGINT from a terminal's process group: its
		// supervisor decides when it drains.
		signal.Ignore(syscall.SIGINT, syscall.SIGHUP)
	}
	os.Exit(supervisor.Main(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
