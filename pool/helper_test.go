package pool

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/internal/testkit/testworker"
	"github.com/sipvisor/sipvisor/internal/wire"
)

// patience bounds every wait of these tests: far above what anything takes
// even on a loaded machine, where a worker of the race-enabled test binary
// may take seconds to start. Waits end as soon as what they wait for
// happens; only a failure takes this long.
const patience = time.Minute

// The test binary doubles as the worker: the supervisor side under test
// re-executes it, and TestMain sends it to testworker.
func TestMain(m *testing.M) {
	testworker.Serve()
	if os.Getenv("POOL_TEST_SUPERVISOR") != "" {
		runTestSupervisor()
		return
	}
	os.Exit(m.Run())
}

// runTestSupervisor starts a group and prints its workers' pids, then waits
// to be killed.
func runTestSupervisor() {
	g := NewGroup(GroupOptions{Name: "udp0", Kind: KindUDP, Initial: 2, Command: testCommand(testworker.Echo, 0), ReadyTimeout: patience})
	if err := g.Start(); err != nil {
		fmt.Println("error", err)
		os.Exit(1)
	}
	if !testkit.Until(patience, func() bool { return len(g.Routable()) == 2 }) {
		fmt.Println("error: workers not ready")
		os.Exit(1)
	}
	for _, w := range g.Workers() {
		fmt.Println("pid", w.Pid)
	}
	fmt.Println("ready")
	select {}
}

func testCommand(mode testworker.Mode, cost time.Duration) Command {
	path, args, env := testworker.Command(mode, cost)
	return Command{Path: path, Args: args, Env: env}
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
	if o.ReadyTimeout == 0 {
		o.ReadyTimeout = patience
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
