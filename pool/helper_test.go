package pool

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/worker"
)

// The test binary doubles as the worker, as go-plugin's helper processes do:
// the supervisor side under test re-executes it, and TestMain sends it here.
func TestMain(m *testing.M) {
	if worker.IsWorker() {
		err := worker.Run(context.Background(), nil, newTestHandler)
		if err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if os.Getenv("POOL_TEST_SUPERVISOR") != "" {
		runTestSupervisor()
		return
	}
	os.Exit(m.Run())
}

const envMode, envCost = "POOL_TEST_MODE", "POOL_TEST_COST"

// testHandler acts out a mode: echo (send each message back to its source
// after a cost), never-ready, crash-after-ready, slow-drain (holds a session
// forever), gc (echo after a garbage collection).
type testHandler struct {
	env  *worker.Env
	mode string
	cost time.Duration
	n    int
}

func newTestHandler(env *worker.Env) (worker.Handler, error) {
	h := &testHandler{env: env, mode: os.Getenv(envMode)}
	h.cost, _ = time.ParseDuration(os.Getenv(envCost))
	switch h.mode {
	case "never-ready":
		select {}
	case "crash-after-ready":
		go func() {
			time.Sleep(50 * time.Millisecond)
			os.Exit(7)
		}()
	}
	return h, nil
}

func (h *testHandler) HandleMessage(m *worker.Message) {
	if h.cost > 0 {
		time.Sleep(h.cost)
	}
	h.n++
	if h.mode == "gc" {
		runtime.GC()
	}
	data := m.Data
	if h.mode == "note" {
		if err := h.env.Note(data); err != nil {
			data = []byte(err.Error())
		}
	}
	if h.mode == "call" {
		ans, err := h.env.Call(data)
		if err != nil {
			ans = []byte(err.Error())
		}
		data = ans
	}
	h.env.Sockets[m.Socket].WriteTo(data, net.UDPAddrFromAddrPort(m.From))
}
func (h *testHandler) HandleJob(name string) {}
func (h *testHandler) HandleConn(c net.Conn) { c.Close() }
func (h *testHandler) Tick(time.Time)        {}
func (h *testHandler) Held() int {
	if h.mode == "slow-drain" {
		return 1
	}
	return 0
}

// runTestSupervisor starts a group and prints its workers' pids, then waits
// to be killed.
func runTestSupervisor() {
	g := NewGroup(GroupOptions{Name: "udp0", Kind: KindUDP, Initial: 2, Command: testCommand("echo", 0)})
	if err := g.Start(); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && len(g.Routable()) < 2 {
		time.Sleep(10 * time.Millisecond)
	}
	for _, w := range g.Workers() {
		fmt.Println("pid", w.Pid)
	}
	fmt.Println("ready")
	select {}
}

func testCommand(mode string, cost time.Duration) Command {
	return Command{
		Path: os.Args[0],
		Args: []string{"-test.run=^$"},
		Env:  []string{envMode + "=" + mode, envCost + "=" + cost.String()},
	}
}

// fixture is a group of real worker processes sharing one UDP socket, and a
// client socket that receives what the workers send back.
type fixture struct {
	t      *testing.T
	g      *Group
	sock   *net.UDPConn
	client *net.UDPConn
	buf    []byte
}

func newFixture(t *testing.T, o GroupOptions) *fixture {
	t.Helper()
	sock, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	client, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	client.SetReadBuffer(8 << 20)
	f, err := sock.File()
	if err != nil {
		t.Fatal(err)
	}
	o.Sockets = []*os.File{f}
	o.SocketNames = []string{"udp:" + sock.LocalAddr().String()}
	if o.Name == "" {
		o.Name = "udp0"
	}
	g := NewGroup(o)
	fx := &fixture{t: t, g: g, sock: sock, client: client, buf: make([]byte, 2048)}
	t.Cleanup(func() {
		g.Stop(time.Now().Add(5 * time.Second))
		f.Close()
		sock.Close()
		client.Close()
	})
	if err := g.Start(); err != nil {
		t.Fatal(err)
	}
	return fx
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// send hands one numbered message to w, as the front door would.
func (fx *fixture) send(w *Worker, seq int) error {
	frame := make([]byte, wire.MsgHeaderLen, wire.MsgHeaderLen+16)
	wire.PutMsgHeader(frame, 0, fx.client.LocalAddr().(*net.UDPAddr).AddrPort(), time.Now().UnixNano())
	frame = strconv.AppendInt(frame, int64(seq), 10)
	return w.Send(frame)
}

// receive collects numbered replies until n distinct ones arrived or d passed.
func (fx *fixture) receive(n int, d time.Duration) map[int]bool {
	got := map[int]bool{}
	fx.client.SetReadDeadline(time.Now().Add(d))
	for len(got) < n {
		k, _, err := fx.client.ReadFrom(fx.buf)
		if err != nil {
			break
		}
		seq, err := strconv.Atoi(string(fx.buf[:k]))
		if err == nil {
			got[seq] = true
		}
	}
	return got
}

var _ = netip.AddrPort{}
