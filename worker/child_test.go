package worker

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/listeners/steer"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/overload/sessions"
)

// The tests below run this test binary as a real worker process, its
// descriptors set up as the supervisor sets them, the test playing the
// supervisor. (Package testkit/testworker does this for the supervisor's
// tests, but imports this package.)
const envChild = "SIPVISOR_WORKER_TEST_CHILD"

func TestMain(m *testing.M) {
	if IsWorker() && os.Getenv(envChild) != "" {
		newHandler := func(env *Env) (Handler, error) { return echo{env}, nil }
		switch os.Getenv(envChild) {
		case "batch":
			newHandler = func(env *Env) (Handler, error) { return &batcher{echo: echo{env}}, nil }
		case "notes":
			newHandler = func(env *Env) (Handler, error) { return noter{echo{env}}, nil }
		case "timer":
			newHandler = func(env *Env) (Handler, error) { return &timer{echo: echo{env}}, nil }
		}
		if err := Run(context.Background(), nil, newHandler); err != nil {
			fmt.Fprintln(os.Stderr, "worker:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// echo sends each message back to its source from the socket it names,
// marked: every echo proves a message was handled, and by which socket.
type echo struct{ env *Env }

func (e echo) HandleMessage(m *Message) {
	e.env.Sockets[m.Socket].WriteTo(append([]byte("handled "), m.Data...), net.UDPAddrFromAddrPort(m.From))
}
func (echo) HandleJob(string)      {}
func (echo) HandleConn(c net.Conn) { c.Close() }
func (echo) Tick(time.Time)        {}
func (echo) Held() int             { return 0 }

// batcher holds messages as the registrar holds REGISTERs (TurnEnder),
// with a gap long enough that a test's messages sent together fall in it
// on any machine: a message after a quiet gap is answered at once; those
// that follow within batchGap of that answer wait for its end, and are
// answered together in one datagram when the loop wakes for it.
type batcher struct {
	echo
	held  [][]byte
	from  netip.AddrPort
	since time.Time
	last  time.Time
}

const batchGap = 2 * time.Second

func (b *batcher) HandleMessage(m *Message) {
	if len(b.held) == 0 {
		b.since = time.Now()
	}
	b.held = append(b.held, append([]byte(nil), m.Data...))
	b.from = m.From
}

func (b *batcher) Batched() (held bool, due, idle time.Time) {
	if len(b.held) == 0 {
		return false, time.Time{}, time.Time{}
	}
	return true, b.since.Add(time.Hour), b.last.Add(batchGap)
}

func (b *batcher) EndTurn() {
	out := fmt.Appendf(nil, "batch of %d:", len(b.held))
	for _, m := range b.held {
		out = append(append(out, ' '), m...)
	}
	b.env.Sockets[0].WriteTo(out, net.UDPAddrFromAddrPort(b.from))
	b.held, b.last = nil, time.Now()
}

// noter sends notes as a message says: "soon a b" each word with
// NoteSoon, "now a" with Note, "call a" as a call, answered with an echo.
type noter struct{ echo }

func (n noter) HandleMessage(m *Message) {
	verb, rest, _ := strings.Cut(string(m.Data), " ")
	switch verb {
	case "soon":
		for _, f := range strings.Fields(rest) {
			n.env.NoteSoon([]byte(f))
		}
	case "now":
		n.env.Note([]byte(rest))
	case "call":
		ans, _ := n.env.Call([]byte(rest))
		n.echo.HandleMessage(&Message{Socket: m.Socket, From: m.From, Data: ans})
	}
}

// timer echoes, and its first message starts a timer due timerAfter
// later, which sends "tick" from the socket that message came from.
type timer struct {
	echo
	due  time.Time
	from Message
}

const timerAfter = 100 * time.Millisecond

func (t *timer) HandleMessage(m *Message) {
	t.echo.HandleMessage(m)
	if t.from.Data == nil {
		t.due, t.from = time.Now().Add(timerAfter), Message{Socket: m.Socket, From: m.From, Data: []byte{}}
	}
}

func (t *timer) NextTimer() (time.Time, bool) { return t.due, !t.due.IsZero() }

func (t *timer) Tick(now time.Time) {
	if !t.due.IsZero() && !now.Before(t.due) {
		t.due = time.Time{}
		t.env.Sockets[t.from.Socket].WriteTo([]byte("tick"), net.UDPAddrFromAddrPort(t.from.From))
	}
}

// child is a worker process and the supervisor's ends of its channels.
type child struct {
	cmd    *exec.Cmd
	stderr *testkit.SyncBuffer
	ctl    *wire.ControlConn
	ctlIn  chan []byte // frames read from the control channel
	data   *net.UnixConn
	stats  *wire.StatsPage
	sup    []netip.AddrPort // the supervisor's UDP sockets
	direct netip.AddrPort   // the socket the worker reads, if any
}

func udpFile(t *testing.T) (*os.File, netip.AddrPort) {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	f, err := c.File()
	if err != nil {
		t.Fatal(err)
	}
	return f, c.LocalAddr().(*net.UDPAddr).AddrPort()
}

func pair(t *testing.T) (ours, theirs *os.File) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	return os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs")
}

// startChild starts a worker with two supervisor UDP sockets and, when
// direct is not empty, a socket to read directly (SIPVISOR_DIRECT=direct).
// It returns once the worker said ready, or, with ready false, at once.
func startChild(t *testing.T, direct string, ready bool) *child {
	t.Helper()
	return startChildAs(t, "1", direct, ready)
}

// startChildAs is startChild with the handler named by mode: "1" echoes,
// "batch" is a batcher.
func startChildAs(t *testing.T, mode, direct string, ready bool) *child {
	t.Helper()
	ctlOurs, ctlTheirs := pair(t)
	dataOurs, dataTheirs := pair(t)
	statsFile, stats, err := wire.NewStatsFile("worker-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stats.Unmap)
	c := &child{stats: stats, stderr: &testkit.SyncBuffer{}, ctlIn: make(chan []byte, 64)}
	files := []*os.File{ctlTheirs, dataTheirs, statsFile}
	for range 2 {
		f, ap := udpFile(t)
		files = append(files, f)
		c.sup = append(c.sup, ap)
	}
	env := append(os.Environ(), envChild+"="+mode, wire.EnvCookie+"="+wire.Cookie, wire.EnvGroup+"=udp",
		wire.EnvKind+"="+string(wire.KindUDP), wire.EnvWorkerID+"=1", wire.EnvSockets+"=udp:a,udp:b",
		"GORACE=atexit_sleep_ms=0")
	if direct != "" {
		f, ap := udpFile(t)
		files = append(files, f)
		c.direct = ap
		env = append(env, wire.EnvDirect+"="+direct)
	}
	c.cmd = exec.Command(os.Args[0], "-test.run=^$")
	c.cmd.Env = env
	c.cmd.ExtraFiles = files
	c.cmd.Stderr = c.stderr
	c.cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// The worker holds its own copies now.
	for _, f := range files {
		f.Close()
	}
	t.Cleanup(func() {
		if c.cmd.ProcessState == nil {
			c.cmd.Process.Kill()
			c.cmd.Wait()
		}
	})
	if !ready {
		ctlOurs.Close()
		dataOurs.Close()
		return c
	}
	fc, err := net.FileConn(ctlOurs)
	ctlOurs.Close()
	if err != nil {
		t.Fatal(err)
	}
	if c.ctl, err = wire.NewControlConn(fc.(*net.UnixConn)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.ctl.Close() })
	dc, err := net.FileConn(dataOurs)
	dataOurs.Close()
	if err != nil {
		t.Fatal(err)
	}
	c.data = dc.(*net.UnixConn)
	t.Cleanup(func() { c.data.Close() })
	go func() {
		defer close(c.ctlIn)
		for {
			b := make([]byte, wire.MaxCall+16)
			n, err := c.ctl.Read(b)
			if err != nil {
				return
			}
			c.ctlIn <- b[:n]
		}
	}()
	if b := c.expectCtl(t, wire.CtlReady); b == nil {
		t.Fatalf("no ready: %s", c.stderr)
	}
	return c
}

// childWait bounds every wait on the worker: generous, for a race-built
// process on a busy machine; a pass takes milliseconds.
const childWait = 20 * time.Second

// expectCtl is the next control frame, which must be of kind.
func (c *child) expectCtl(t *testing.T, kind byte) []byte {
	t.Helper()
	select {
	case b, ok := <-c.ctlIn:
		if !ok {
			t.Fatalf("control channel closed waiting for %q; worker's log: %s", kind, c.stderr)
		}
		if len(b) == 0 || b[0] != kind {
			t.Fatalf("want a control frame %q, have %q", kind, b)
		}
		return b
	case <-time.After(childWait):
		t.Fatalf("no control frame %q in %v; worker's log: %s", kind, childWait, c.stderr)
	}
	return nil
}

func (c *child) send(t *testing.T, frame []byte) {
	t.Helper()
	if _, err := c.data.Write(frame); err != nil {
		t.Fatal(err)
	}
}

// handled returns once the worker has handled the frames sent so far: an
// echo frame is answered in its turn.
func (c *child) handled(t *testing.T) {
	t.Helper()
	c.send(t, wire.PutEcho(nil, wire.FrameEcho, 1, 0))
	c.expectCtl(t, wire.CtlEcho)
}

func (c *child) end(t *testing.T) {
	t.Helper()
	c.send(t, []byte{wire.FrameEnd})
	if err := c.cmd.Wait(); err != nil {
		t.Fatalf("worker: %v; its log: %s", err, c.stderr)
	}
}

// client is a UDP peer of the worker.
type client struct {
	*net.UDPConn
	addr netip.AddrPort
}

func newClient(t *testing.T) *client {
	t.Helper()
	c, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &client{c, c.LocalAddr().(*net.UDPAddr).AddrPort()}
}

func (c *client) sendTo(t *testing.T, to netip.AddrPort, b []byte) {
	t.Helper()
	if _, err := c.WriteToUDPAddrPort(b, to); err != nil {
		t.Fatal(err)
	}
}

// expect reads the next datagram: it must come from from and start with
// prefix.
func (c *client) expect(t *testing.T, from netip.AddrPort, prefix string) string {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(childWait))
	b := make([]byte, 65536)
	n, src, err := c.ReadFromUDPAddrPort(b)
	if err != nil {
		t.Fatalf("want %q from %v: %v", prefix, from, err)
	}
	if src != from || !strings.HasPrefix(string(b[:n]), prefix) {
		t.Fatalf("want %q from %v, have %q from %v", prefix, from, b[:n], src)
	}
	return string(b[:n])
}

func messageFrame(sock int, from netip.AddrPort, at int64, dgram []byte) []byte {
	f := make([]byte, wire.MsgHeaderLen, wire.MsgHeaderLen+len(dgram))
	wire.PutMsgHeader(f, sock, from, at)
	return append(f, dgram...)
}

func TestDirectReads(t *testing.T) {
	t.Parallel()
	const slot = 3
	w := startChild(t, fmt.Sprintf("0:%d", slot), true)
	cl := newClient(t)
	via := cl.addr.String()
	stat := func(off int) uint64 { return w.stats.Load(off) }
	calls := wire.OffKindSessions + 8*int(sipscan.KindCall)

	// A table that has long given every bucket to this worker, and room in
	// its quota of every kind.
	settled := time.Now().UnixNano() - int64(sessions.PendingInvite) - int64(time.Minute)
	w.send(t, wholeTable(slot, settled))
	w.handled(t)
	for k := range 4 {
		w.stats.Store(wire.OffQuota+8*k, 1000)
	}
	// An open gate: a new call is admitted and handled here, its replies
	// leaving from the worker's own socket of the port it read (in a real
	// group, the same address and port as the supervisor's).
	w.stats.Store(wire.OffGate, wire.Gate(true, false, 0))
	cl.sendTo(t, w.direct, testkit.Invite("sip:bob@example.com", via, "open-1").Bytes())
	cl.expect(t, w.direct, "handled INVITE")
	testkit.WaitFor(t, childWait, "one call counted", func() bool { return stat(calls) == 1 })
	if r, h := stat(wire.OffDirectRead), stat(wire.OffHandled); r != 1 || h != 2 {
		t.Errorf("want 1 datagram read and no frame handled but the table and the echo, have %d and %d", r, h)
	}

	// The server refusing all: the worker answers a probe itself.
	w.stats.Store(wire.OffGate, wire.Gate(false, true, 9)|wire.GateRefuseAll)
	cl.sendTo(t, w.direct, testkit.Options("sip:127.0.0.1", via, "probe-1").Bytes())
	if r := cl.expect(t, w.direct, "SIP/2.0 503"); !strings.Contains(r, "Retry-After: 9") {
		t.Errorf("want Retry-After 9, have %q", r)
	}

	// A closed gate: the worker asks the supervisor, and refuses as told.
	w.stats.Store(wire.OffGate, wire.Gate(false, false, 0))
	cl.sendTo(t, w.direct, testkit.Invite("sip:bob@example.com", via, "ask-1").Bytes())
	req := w.expectCtl(t, wire.CtlCall)
	method, callID, ok := wire.ParseAdmitRequest(req[9:])
	if !ok || string(callID) != "ask-1" || sipscan.Method(method) != sipscan.Invite {
		t.Fatalf("want an admission request for ask-1, have %q", req)
	}
	ans := append([]byte{wire.CtlAnswer}, req[1:9]...)
	if _, err := w.ctl.Write(append(ans, wire.AdmitAnswer(byte(overload.RefuseLimit), 7)...)); err != nil {
		t.Fatal(err)
	}
	if r := cl.expect(t, w.direct, "SIP/2.0 503"); !strings.Contains(r, "Retry-After: 7") {
		t.Errorf("want Retry-After 7, have %q", r)
	}

	// Any wait in the socket is past a limit of 1 ns: with another datagram
	// waiting behind it, refused without asking, with the gate's
	// Retry-After; the last one, alone in the socket, waited for the worker
	// to be scheduled, not behind a backlog (nothing would wait behind it):
	// handled. The worker is stopped
	// while both arrive, so that they queue. That the first is refused
	// proves the kernel's timestamp came with the datagram.
	w.stats.Store(wire.OffQueueDelayLimit, 1)
	w.stats.Store(wire.OffGate, wire.Gate(true, false, 4))
	if err := w.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// The signal is sent, not yet taken: wait until the worker is stopped.
	procStat := fmt.Sprintf("/proc/%d/stat", w.cmd.Process.Pid)
	testkit.WaitFor(t, childWait, "the worker stopped", func() bool {
		b, err := os.ReadFile(procStat)
		i := bytes.LastIndexByte(b, ')')
		return err == nil && i > 0 && i+2 < len(b) && b[i+2] == 'T'
	})
	cl.sendTo(t, w.direct, testkit.Invite("sip:bob@example.com", via, "late-1").Bytes())
	cl.sendTo(t, w.direct, testkit.Invite("sip:bob@example.com", via, "late-2").Bytes())
	time.Sleep(30 * time.Millisecond) // the wait under test: past the 10 ms from which a wait is weighed against the backlog
	if err := w.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if r := cl.expect(t, w.direct, "SIP/2.0 503"); !strings.Contains(r, "Retry-After: 4") || !strings.Contains(r, "late-1") {
		t.Errorf("want late-1 refused with Retry-After 4, have %q", r)
	}
	if r := cl.expect(t, w.direct, "handled INVITE"); !strings.Contains(r, "late-2") {
		t.Errorf("want late-2 handled, have %q", r)
	}
	w.stats.Store(wire.OffQueueDelayLimit, 0)
	w.stats.Store(wire.OffGate, wire.Gate(false, false, 4))

	// A bucket newly this worker's: a BYE of a call it does not know goes
	// to the supervisor's door, as read.
	now := time.Now().UnixNano()
	w.send(t, wholeTable(slot, now))
	w.handled(t)
	bye := testkit.Request{Method: "BYE", Via: via, CallID: "old-1", ToTag: "b"}.Bytes()
	cl.sendTo(t, w.direct, bye)
	note := w.expectCtl(t, wire.CtlNote)
	f, ok := wire.ParseDoorNote(note[1:])
	if !ok {
		t.Fatalf("want a door note, have %q", note)
	}
	if sock, from, _ := wire.ParseMsgHeader(f); sock != 0 || from != cl.addr || !bytes.Equal(f[wire.MsgHeaderLen:], bye) {
		t.Errorf("want the BYE from %v on socket 0, have %q from %v on %d", cl.addr, f[wire.MsgHeaderLen:], from, sock)
	}
	// The supervisor's door hands it back: this worker holds its call now,
	// whatever its door remembered.
	w.send(t, messageFrame(0, cl.addr, time.Now().UnixNano(), bye))
	cl.expect(t, w.direct, "handled BYE")
	// Long its own: the worker handles it.
	old := now - int64(sessions.PendingInvite) - int64(time.Minute)
	w.send(t, wholeTable(slot, old))
	// Read before the frame, the BYE would go by the table before it.
	w.handled(t)
	cl.sendTo(t, w.direct, testkit.Request{Method: "BYE", Via: via, CallID: "old-2", ToTag: "b"}.Bytes())
	cl.expect(t, w.direct, "handled BYE")

	// A call the supervisor's door admitted and handed over: handled with
	// no question at a closed gate, from the socket it came to, and
	// followed by this worker's door.
	w.send(t, messageFrame(1, cl.addr, time.Now().UnixNano(), testkit.Invite("sip:bob@example.com", via, "handed-1").Bytes()))
	cl.expect(t, w.sup[1], "handled INVITE")
	testkit.WaitFor(t, childWait, "three calls counted (open-1, late-2, handed-1)", func() bool { return stat(calls) == 3 })
	testkit.WaitFor(t, childWait, "eight frames handled (three tables, three echoes, two messages)", func() bool { return stat(wire.OffHandled) == 8 })

	// Draining: a new session goes to the supervisor's door, without a
	// question at a closed gate (that door decides); the worker says it
	// drained once its socket is quiet.
	w.stats.Store(wire.OffGate, wire.Gate(false, false, 0))
	w.send(t, []byte{wire.FrameDrain})
	w.send(t, wire.PutEcho(nil, wire.FrameEcho, 1, 0))
	inv := testkit.Invite("sip:bob@example.com", via, "drain-1").Bytes()
	var echoed, noted, drained, sent bool
	for !echoed || !noted || !drained {
		select {
		case b := <-w.ctlIn:
			switch {
			case len(b) > 0 && b[0] == wire.CtlEcho:
				echoed = true
			case len(b) > 0 && b[0] == wire.CtlDrained:
				drained = true
			case len(b) > 0 && b[0] == wire.CtlNote:
				f, ok := wire.ParseDoorNote(b[1:])
				if !ok || !bytes.Equal(f[wire.MsgHeaderLen:], inv) {
					t.Fatalf("want the INVITE passed on, have %q", b)
				}
				noted = true
			default:
				t.Fatalf("unexpected control frame %q", b)
			}
			// Either answer says the drain frame was handled (the quiet
			// spell may have passed before the echo was answered).
			if !sent && (echoed || drained) {
				cl.sendTo(t, w.direct, inv)
				sent = true
			}
		case <-time.After(childWait):
			t.Fatalf("echoed %v, noted %v, drained %v after %v; worker's log: %s", echoed, noted, drained, childWait, w.stderr)
		}
	}
	if n := stat(calls); n != 3 {
		t.Errorf("want the call passed on left to the worker it goes to, have %d calls here", n)
	}
	w.end(t)
}

// A handler's held work is done when the loop finds nothing to read and
// its idle time has come: at once after a quiet gap, else when the loop
// wakes for it with nothing more arriving.
func TestTurnEnderIdleTime(t *testing.T) {
	t.Parallel()
	w := startChildAs(t, "batch", "", true)
	cl := newClient(t)
	w.send(t, messageFrame(0, cl.addr, time.Now().UnixNano(), []byte("a")))
	cl.expect(t, w.sup[0], "batch of 1: a")
	// b and c come well within the gap after a's answer, c once b has
	// been handled, in a read of its own: they wait for the gap's end,
	// which no message marks, and leave together.
	w.send(t, messageFrame(0, cl.addr, time.Now().UnixNano(), []byte("b")))
	testkit.WaitFor(t, childWait, "b handled", func() bool { return w.stats.Load(wire.OffHandled) == 2 })
	w.send(t, messageFrame(0, cl.addr, time.Now().UnixNano(), []byte("c")))
	cl.expect(t, w.sup[0], "batch of 2: b c")
	w.end(t)
}

// Without SIPVISOR_DIRECT a worker is as it was: message frames handled as
// they come, a steering frame ignored.
func TestWithoutDirectReads(t *testing.T) {
	t.Parallel()
	w := startChild(t, "", true)
	cl := newClient(t)
	w.send(t, wire.SteerFrame([]uint8{0}, []int64{time.Now().UnixNano()}, []int64{0}))
	w.send(t, messageFrame(1, cl.addr, time.Now().UnixNano(), testkit.Request{Method: "BYE", CallID: "x", ToTag: "b"}.Bytes()))
	cl.expect(t, w.sup[1], "handled BYE")
	testkit.WaitFor(t, childWait, "two frames handled", func() bool { return w.stats.Load(wire.OffHandled) == 2 })
	if n := w.stats.Load(wire.OffKindSessions); n != 0 {
		t.Errorf("want no sessions counted, have %d", n)
	}
	w.end(t)
}

func TestDirectReadsBadSetting(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ direct, want string }{
		{"2:0", `SIPVISOR_DIRECT="2:0": socket "2"`},
		{"0", `SIPVISOR_DIRECT="0": want SOCKET:SLOT`},
	} {
		w := startChild(t, c.direct, false)
		err := w.cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || !strings.Contains(w.stderr.String(), c.want) {
			t.Errorf("%s: want an exit with %q, have %v: %s", c.direct, c.want, err, w.stderr)
		}
	}
}

// wholeTable is a steering frame that gives every bucket to slot since at.
func wholeTable(slot uint8, at int64) []byte {
	slots, since := make([]uint8, steer.Buckets), make([]int64, steer.Buckets)
	for b := range slots {
		slots[b], since[b] = slot, at
	}
	return wire.SteerFrame(slots, since, make([]int64, steer.Buckets))
}

// Notes sent with NoteSoon leave together, in one CtlNotes message, before
// the worker's next note or call, and by themselves within noteDelay.
func TestNotesSoon(t *testing.T) {
	t.Parallel()
	w := startChildAs(t, "notes", "", true)
	cl := newClient(t)
	notes := func(b []byte) []string {
		var out []string
		if !wire.EachNote(b[1:], func(n []byte) { out = append(out, string(n)) }) {
			t.Fatalf("a CtlNotes message cut short: %q", b)
		}
		return out
	}
	w.send(t, messageFrame(0, cl.addr, time.Now().UnixNano(), []byte("soon a b c")))
	w.send(t, messageFrame(0, cl.addr, time.Now().UnixNano(), []byte("now d")))
	if have := notes(w.expectCtl(t, wire.CtlNotes)); strings.Join(have, " ") != "a b c" {
		t.Errorf("want notes a b c in one message, have %q", have)
	}
	if b := w.expectCtl(t, wire.CtlNote); string(b[1:]) != "d" {
		t.Errorf("want note d after them, have %q", b)
	}
	// Nothing follows: the note leaves once it has waited its time.
	w.send(t, messageFrame(0, cl.addr, time.Now().UnixNano(), []byte("soon e")))
	if have := notes(w.expectCtl(t, wire.CtlNotes)); strings.Join(have, " ") != "e" {
		t.Errorf("want note e, have %q", have)
	}
	// A call: the notes before it go first.
	w.send(t, messageFrame(0, cl.addr, time.Now().UnixNano(), []byte("soon f")))
	w.send(t, messageFrame(0, cl.addr, time.Now().UnixNano(), []byte("call g")))
	if have := notes(w.expectCtl(t, wire.CtlNotes)); strings.Join(have, " ") != "f" {
		t.Errorf("want note f before the call, have %q", have)
	}
	call := w.expectCtl(t, wire.CtlCall)
	if _, err := w.ctl.Write(append(append([]byte{wire.CtlAnswer}, call[1:9]...), "answer"...)); err != nil {
		t.Fatal(err)
	}
	cl.expect(t, w.sup[0], "handled answer")
	w.end(t)
}

// A worker stopped past its timer's expiry (as a starved machine stalls
// it) reads what came meanwhile before it runs the timer: the message
// answered first, then the tick. Run first, a transaction's timer acts
// as though its queued answer had never come.
func TestStalledLoopReadsBeforeTimers(t *testing.T) {
	t.Parallel()
	for _, direct := range []string{"", "0:3"} {
		t.Run("direct="+direct, func(t *testing.T) {
			t.Parallel()
			w := startChildAs(t, "timer", direct, true)
			cl := newClient(t)
			to, from := w.sup[0], w.sup[0]
			send := func(callID string) {
				b := testkit.Request{Method: "BYE", CallID: callID, ToTag: "b"}.Bytes()
				if direct == "" {
					w.send(t, messageFrame(0, cl.addr, time.Now().UnixNano(), b))
				} else {
					cl.sendTo(t, to, b)
				}
			}
			if direct != "" {
				settled := time.Now().UnixNano() - int64(sessions.PendingInvite) - int64(time.Minute)
				w.send(t, wholeTable(3, settled))
				w.handled(t)
				w.stats.Store(wire.OffGate, wire.Gate(true, false, 0))
				to, from = w.direct, w.direct
			}
			armed := time.Now()
			send("arm")
			cl.expect(t, from, "handled BYE")
			resume := testkit.StopProcess(t, w.cmd.Process.Pid)
			send("late")
			// Stopped until its timer is overdue by more than the loop's
			// grain, which is what tells a stalled loop.
			time.Sleep(time.Until(armed.Add(timerAfter + 3*tickEvery)))
			resume()
			if r := cl.expect(t, from, ""); !strings.HasPrefix(r, "handled BYE") || !strings.Contains(r, "late") {
				t.Fatalf("want the late BYE handled first, have %q, then %q", r, cl.expect(t, from, ""))
			}
			cl.expect(t, from, "tick")
			w.end(t)
		})
	}
}
