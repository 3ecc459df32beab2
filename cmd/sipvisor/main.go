// Command sipvisor is an auto-scaling, overload-safe SIP server front end.
// See README.md, or run sipvisor -h.
package main

import (
	"context"
	"os"
	"os/signal"
	"runtime"
	"syscall"

	"github.com/sipvisor/sipvisor/supervisor"
)

func main() {
	// Signals are the supervisor's to handle (drain on SIGTERM, reload on
	// SIGHUP); the context only ends for a worker when its loop is done.
	ctx := context.Background()
	// GOMAXPROCS stays what the runtime chose at start (the cgroup's CPU
	// limit, or the CPUs): set, even to the same value, it is no longer
	// looked up again, which the runtime's monitor thread otherwise does
	// every second that the process wakes (sched_getaffinity and a read
	// of cpu.max), in every process of the tree. A limit changed while
	// sipvisor runs takes a restart, or an upgrade, to be seen.
	runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	// The same binary, re-executed by its supervisor, is a worker: that
	// comes first, before the supervisor's flags (runWorker checks the
	// cookie).
	if len(os.Args) > 1 && os.Args[1] == "worker" {
		// A worker ignores the signals a terminal or a service manager sends
		// the whole process group (systemd sends SIGTERM to every process of
		// the unit): its supervisor decides when it drains.
		signal.Ignore(syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP)
		os.Exit(runWorker(ctx, os.Stderr))
	}
	os.Exit(supervisor.Main(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
