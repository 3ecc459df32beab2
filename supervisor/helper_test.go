package supervisor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/pool"
	"github.com/sipvisor/sipvisor/worker"
)

// The test binary doubles as a worker with a synthetic per-message cost, so
// that the scaling tests control load exactly; the SIP engine is tested with
// the real binary elsewhere.
func TestMain(m *testing.M) {
	if worker.IsWorker() && os.Getenv("SUPERVISOR_TEST_WORKER") != "" {
		if err := worker.Run(context.Background(), nil, newCostHandler); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// costHandler spends a fixed time on each message, then sends it back to its
// source: every reply proves a message was handled.
type costHandler struct {
	env  *worker.Env
	cost time.Duration
}

func newCostHandler(env *worker.Env) (worker.Handler, error) {
	h := &costHandler{env: env}
	h.cost, _ = time.ParseDuration(os.Getenv("SUPERVISOR_TEST_COST"))
	return h, nil
}

func (h *costHandler) HandleMessage(m *worker.Message) {
	time.Sleep(h.cost)
	if m.Socket >= len(h.env.Sockets) {
		return // a group started without sockets (BenchmarkDoorHandle)
	}
	h.env.Sockets[m.Socket].WriteTo(m.Data, net.UDPAddrFromAddrPort(m.From))
}
func (h *costHandler) HandleJob(string)      {}
func (h *costHandler) HandleConn(c net.Conn) { c.Close() }
func (h *costHandler) Tick(time.Time)        {}
func (h *costHandler) Held() int             { return 0 }

func costWorker(cost time.Duration) pool.Command {
	return pool.Command{Path: os.Args[0], Args: []string{"-test.run=^$"},
		Env: []string{"SUPERVISOR_TEST_WORKER=1", "SUPERVISOR_TEST_COST=" + cost.String()}}
}

// started is a running supervisor made from inline config text.
type started struct {
	s    *Supervisor
	done chan error
	path string
}

func startSupervisor(t *testing.T, cfgText string, worker pool.Command, logw io.Writer) *started {
	t.Helper()
	path := t.TempDir() + "/sipvisor.cfg"
	if err := os.WriteFile(path, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if logw == nil {
		logw = io.Discard
		if testing.Verbose() {
			logw = os.Stderr
		}
	}
	s, err := New(Options{Config: cfg, ConfigPath: path, Worker: worker,
		Logger: slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := &started{s: s, done: make(chan error, 1), path: path}
	go func() { st.done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-st.done:
			if err != nil {
				t.Errorf("supervisor: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("supervisor did not stop")
		}
	})
	return st
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func cfgf(format string, args ...any) string {
	return strings.TrimSpace(fmt.Sprintf(format, args...)) + "\n"
}
