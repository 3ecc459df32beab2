// Package testworker makes a test binary double as the worker process that
// the supervisor side under test starts, as go-plugin's helper processes
// do: TestMain calls Serve first, and Command says how to start the binary
// as a worker acting out a Mode. The worker is real (package worker's
// runtime, its frames, stats page and sockets); only its handler is a
// stand-in whose cost and misbehaviour the test chooses.
//
// Imported only by _test.go files of packages that start workers (pool,
// supervisor); it imports package worker, so worker's own tests cannot use
// it.
package testworker

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"strconv"
	"syscall"
	"time"

	"github.com/sipvisor/sipvisor/worker"
)

// Mode is what the worker's handler acts out.
type Mode string

const (
	// Echo sends each message back to its source after the cost: every
	// reply proves a message was handled.
	Echo Mode = "echo"
	// NeverReady never finishes starting.
	NeverReady Mode = "never-ready"
	// CrashAfterReady exits with status 7 once it has said ready.
	CrashAfterReady Mode = "crash-after-ready"
	// SlowDrain echoes and holds a session forever, so it never drains.
	SlowDrain Mode = "slow-drain"
	// GC echoes after a garbage collection, so that the GC's CPU time moves.
	GC Mode = "gc"
	// Note tells the supervisor each message with Env.Note, then echoes it.
	Note Mode = "note"
	// Call asks the supervisor about each message with Env.Call and sends
	// the answer to the message's source.
	Call Mode = "call"
	// Hold keeps every message in the handler until the worker receives
	// SIGUSR1 (see Release), then echoes it: a worker busy for exactly as
	// long as the test wants.
	Hold Mode = "hold"
	// Procs answers each message with the runtime's GOMAXPROCS, as
	// "procs=N".
	Procs Mode = "procs"
)

// ReleaseSignal lets a Hold worker's messages go, those held and those to
// come.
const ReleaseSignal = syscall.SIGUSR1

const envMode, envCost = "SIPVISOR_TESTWORKER_MODE", "SIPVISOR_TESTWORKER_COST"

// Command is how to start the running test binary as a worker acting out
// mode, spending cost on each message: the fields of pool.Command.
func Command(mode Mode, cost time.Duration) (path string, args, env []string) {
	env = []string{envMode + "=" + string(mode), envCost + "=" + cost.String()}
	// Built with -race, a process sleeps a second as it exits, for the late
	// reports of its other threads: every worker a test drains, scales down
	// or stops would add that second to it. GORACE set by hand wins.
	if os.Getenv("GORACE") == "" {
		env = append(env, "GORACE=atexit_sleep_ms=0")
	}
	return os.Args[0], []string{"-test.run=^$"}, env
}

// Serve runs the worker and exits when this process is a worker that
// Command started; otherwise it returns at once. TestMain calls it first.
func Serve() {
	if !worker.IsWorker() || os.Getenv(envMode) == "" {
		return
	}
	if err := worker.Run(context.Background(), nil, newHandler); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
	os.Exit(0)
}

type handler struct {
	env     *worker.Env
	mode    Mode
	cost    time.Duration
	release chan struct{}
}

func newHandler(env *worker.Env) (worker.Handler, error) {
	h := &handler{env: env, mode: Mode(os.Getenv(envMode))}
	h.cost, _ = time.ParseDuration(os.Getenv(envCost))
	switch h.mode {
	case NeverReady:
		select {}
	case CrashAfterReady:
		// Submitted work runs on the worker's loop, which starts only
		// after the ready frame was written.
		env.Submit(func() { os.Exit(7) })
	case Hold:
		h.release = make(chan struct{})
		sig := make(chan os.Signal, 1)
		signal.Notify(sig, ReleaseSignal)
		go func() {
			<-sig
			close(h.release)
		}()
	}
	return h, nil
}

func (h *handler) HandleMessage(m *worker.Message) {
	if h.cost > 0 {
		time.Sleep(h.cost) // the message's synthetic cost: the workload the test chose
	}
	switch h.mode {
	case GC:
		runtime.GC()
	case Hold:
		<-h.release
	}
	data := m.Data
	switch h.mode {
	case Note:
		if err := h.env.Note(data); err != nil {
			data = []byte(err.Error())
		}
	case Call:
		ans, err := h.env.Call(data)
		if err != nil {
			ans = []byte(err.Error())
		}
		data = ans
	case Procs:
		data = []byte("procs=" + strconv.Itoa(runtime.GOMAXPROCS(0)))
	}
	h.env.Sockets[m.Socket].WriteTo(data, net.UDPAddrFromAddrPort(m.From))
}

func (h *handler) HandleJob(string)      {}
func (h *handler) HandleConn(c net.Conn) { c.Close() }
func (h *handler) Tick(time.Time)        {}

func (h *handler) Held() int {
	if h.mode == SlowDrain {
		return 1
	}
	return 0
}
