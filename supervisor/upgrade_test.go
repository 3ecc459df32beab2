package supervisor

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload"
)

// sdNotify speaks systemd's notification protocol: one datagram to
// $NOTIFY_SOCKET, a path or, with a leading @, an abstract name; without
// the variable, nothing.
func TestSdNotify(t *testing.T) {
	for _, abstract := range []bool{false, true} {
		name := filepath.Join(t.TempDir(), "notify")
		env := name
		if abstract {
			name = "\x00sipvisor-test-" + strings.ReplaceAll(t.Name(), "/", "-") + time.Now().Format("150405.000000000")
			env = "@" + name[1:]
		}
		c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("NOTIFY_SOCKET", env)
		if err := sdNotify("MAINPID=42\nREADY=1"); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 256)
		n, err := c.Read(buf)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := string(buf[:n]); got != "MAINPID=42\nREADY=1" {
			t.Errorf("abstract %v: want the state as sent, have %q", abstract, got)
		}
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if err := sdNotify("READY=1"); err != nil {
		t.Errorf("without NOTIFY_SOCKET: want nothing done, have %v", err)
	}
}

// The link carries a datagram with the socket it came in on and its
// source; a cut message is refused, not misread.
func TestLinkedDatagram(t *testing.T) {
	a, b, err := seqpacketPair()
	if err != nil {
		t.Fatal(err)
	}
	fds := [2]*upLink{{c: a}, {c: b}}
	defer fds[0].close()
	defer fds[1].close()
	from := mustAddrPort(t, "[::1]:5071")
	if err := fds[0].sendDatagram(linkForward, "udp:127.0.0.1:5060", from, []byte("OPTIONS sip:x SIP/2.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	m, err := fds[1].recv()
	if err != nil {
		t.Fatal(err)
	}
	if m[0] != linkForward {
		t.Fatalf("want a forward, have %q", m[0])
	}
	sock, got, dgram, ok := parseLinked(m[1:])
	if !ok || sock != "udp:127.0.0.1:5060" || got != from || string(dgram) != "OPTIONS sip:x SIP/2.0\r\n\r\n" {
		t.Fatalf("have %q %v %q %v", sock, got, dgram, ok)
	}
	// A message cut inside its header is refused (the link keeps message
	// boundaries, so this is a damaged one).
	for i := range 1 + len(sock) + 1 + len(from.String()) {
		if _, _, _, ok := parseLinked(m[1 : 1+i]); ok {
			t.Errorf("a message cut at %d of its header read as whole", i)
		}
	}
	fds[0].close()
	if err := fds[0].send([]byte{linkGo}); err != errLinkDown {
		t.Errorf("send on a closed link: want errLinkDown, have %v", err)
	}
}

func mustAddrPort(t *testing.T, s string) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return ap
}

// unstarted is a supervisor bound to a UDP port of its own that never ran
// a worker: the old side of an upgrade once its last worker has exited.
func unstarted(t *testing.T) (*Supervisor, *udpDoor) {
	t.Helper()
	path := t.TempDir() + "/sipvisor.cfg"
	text := cfgf(`
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 1
udp_direct_reads = no
route { exit; }
`)
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	s, err := New(Options{Config: cfg, ConfigPath: path, Worker: costWorker(0)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.sockets.close() })
	return s, s.sockets.doors[0]
}

// handedOver makes s the old side of an upgrade after the hand-over, as
// Run leaves it: admission stopping, the link up. The other end is the new
// side's.
func handedOver(t *testing.T, s *Supervisor) (old *upLink, other *upLink) {
	t.Helper()
	a, b, err := seqpacketPair()
	if err != nil {
		t.Fatal(err)
	}
	old, other = &upLink{c: a, old: true, done: make(chan struct{})}, &upLink{c: b}
	t.Cleanup(old.close)
	t.Cleanup(other.close)
	s.ov.Stop()
	s.up.old.Store(true)
	s.up.link.Store(old)
	return old, other
}

func register(callID string) []byte {
	return []byte("REGISTER sip:example.com SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5999;branch=z9hG4bK-" + callID + "\r\n" +
		"From: <sip:phone@example.com>;tag=1\r\nTo: <sip:phone@example.com>\r\n" +
		"Call-ID: " + callID + "\r\nCSeq: 10 REGISTER\r\nContact: <sip:phone@127.0.0.1:5999>\r\n" +
		"Max-Forwards: 70\r\nExpires: 3600\r\nContent-Length: 0\r\n\r\n")
}

// expectBounce reads the next link message: dgram sent back to the new side.
func expectBounce(t *testing.T, l *upLink, dgram []byte) {
	t.Helper()
	l.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	m, err := l.recv()
	if err != nil {
		t.Fatalf("want the datagram sent back, have %v", err)
	}
	if m[0] != linkBounce {
		t.Fatalf("want it sent back, have message %q", m[0])
	}
	if _, _, got, ok := parseLinked(m[1:]); !ok || string(got) != string(dgram) {
		t.Fatalf("want the datagram sent back as is, have %q", got)
	}
}

func noRefusal(t *testing.T, u *udpDoor) {
	t.Helper()
	for r := range overload.NumRefusals {
		if n := u.door.Stats.Refused[r].Load(); n != 0 {
			t.Errorf("want no new session refused by the old side, have %d refused %v", n, overload.Refusal(r))
		}
	}
	if n := u.door.Stats.Replied.Load(); n != 0 {
		t.Errorf("want no reply from the old side's door, have %d", n)
	}
}

// After the hand-over the old side's door refuses no new session: with no
// worker left, what the new side forwards, what an old worker passes back
// or left in its socket, goes back to the new side; once the link has
// closed under it (the moment the old side exits), it is dropped for its
// sender to send again, never answered 503.
func TestOldSideSendsBackWhatItCannotPlace(t *testing.T) {
	s, u := unstarted(t)
	_, other := handedOver(t, s)
	from := mustAddrPort(t, "127.0.0.1:5999")

	forwarded := register("forwarded")
	u.handleLinked(forwarded, from, true)
	expectBounce(t, other, forwarded)

	// A datagram an old worker passed to the door (direct reads), or one
	// left in an exited worker's socket: stopping admission must not
	// refuse it here; the new side admits it.
	passed := register("passed")
	frame := make([]byte, wire.MsgHeaderLen+len(passed))
	copy(frame[wire.MsgHeaderLen:], passed)
	wire.PutMsgHeader(frame, u.door.Socket(), from, 0)
	u.handleFrame(frame)
	expectBounce(t, other, passed)
	u.handleFrameAs(append([]byte(nil), frame...), false)
	expectBounce(t, other, passed)
	noRefusal(t, u)

	// The link closes as a forwarded datagram is being handled.
	s.up.link.Load().close()
	u.handleLinked(register("at-exit"), from, true)
	noRefusal(t, u)
	if n := s.up.lost.Load(); n != 1 {
		t.Errorf("want the datagram counted as dropped, have %d", n)
	}
}

// The old side leaves an overlap in order: it tells the new side to forward
// no more and closes the link only once the new side has answered, so that
// nothing forwarded before is left unread in it; the new side's door then
// places everything itself.
func TestOldSideLeavesOnlyOnceNothingIsForwarded(t *testing.T) {
	olds, _ := unstarted(t)
	news, nu := unstarted(t)
	a, b, err := seqpacketPair()
	if err != nil {
		t.Fatal(err)
	}
	oldEnd, newEnd := &upLink{c: a, old: true, done: make(chan struct{})}, &upLink{c: b}
	t.Cleanup(oldEnd.close)
	t.Cleanup(newEnd.close)
	olds.up.old.Store(true)
	olds.up.link.Store(oldEnd)
	news.up.link.Store(newEnd)
	go olds.linkLoop(oldEnd)
	go news.linkLoop(newEnd)
	if news.upgradePick(nu, &sipscan.Msg{IsRequest: true}) == nil {
		t.Fatal("want the new side to forward before the old side leaves")
	}
	start := time.Now()
	olds.leaveOverlap()
	select {
	case <-oldEnd.done:
	default:
		t.Fatalf("want the old side to close the link on the new side's answer, have it closed after %v without one", time.Since(start))
	}
	if !newEnd.noForward.Load() || news.upgradePick(nu, &sipscan.Msg{IsRequest: true}) != nil {
		t.Error("want the new side to forward no more once it answered")
	}
	if err := newEnd.sendDatagram(linkForward, nu.sock.Name(), mustAddrPort(t, "127.0.0.1:5999"), register("late")); err != errLinkDown {
		t.Errorf("a forward after the answer: want errLinkDown for the door to place it, have %v", err)
	}
}

// On the new side of an upgrade, a response whose branch one of its own
// workers made is placed there, never sent over the old side first. The
// door holds no affinity for the responses to what a TCP worker relays
// over UDP (the request did not go through it), and sent over an old side
// slow to read the link they reached the worker after it had sent its
// INVITE again. A response of a branch the new side did not make still
// goes to the old side, which may hold its transaction.
func TestNewSideKeepsResponsesOfItsOwnBranches(t *testing.T) {
	t.Parallel()
	st := startSupervisor(t, cfgf(`
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 1
udp_direct_reads = no
route { exit; }
`), costWorker(0), nil)
	g := st.s.Groups()[0]
	testkit.WaitFor(t, patience, "a ready worker", func() bool { return len(g.Routable()) == 1 })
	own := g.Routable()[0].Pid

	// The old side's end of the link: nothing reads it but the test.
	a, b, err := seqpacketPair()
	if err != nil {
		t.Fatal(err)
	}
	oldEnd, newEnd := &upLink{c: a, old: true, done: make(chan struct{})}, &upLink{c: b}
	t.Cleanup(oldEnd.close)
	t.Cleanup(newEnd.close)
	st.s.up.link.Store(newEnd)
	t.Cleanup(func() { st.s.up.link.Store(nil) })

	ringing := func(callID string, pid int) []byte {
		return []byte("SIP/2.0 180 Ringing\r\n" +
			"Via: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bK0123abcd-" + strconv.FormatInt(int64(pid), 36) + ".1\r\n" +
			"Via: SIP/2.0/TCP 127.0.0.1:5999;branch=z9hG4bK-caller\r\n" +
			"From: <sip:caller@example.com>;tag=1\r\nTo: <sip:callee@example.com>;tag=2\r\n" +
			"Call-ID: " + callID + "\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n")
	}
	target := st.s.SIPAddrs()[0]
	c, err := net.Dial("udp", net.JoinHostPort(target.Host, strconv.Itoa(target.Port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	// The door handles datagrams in order: the first one on the link is
	// the first the door did not keep.
	if _, err := c.Write(ringing("own-branch", own)); err != nil {
		t.Fatal(err)
	}
	foreign := ringing("other-branch", os.Getpid())
	if _, err := c.Write(foreign); err != nil {
		t.Fatal(err)
	}
	oldEnd.c.SetReadDeadline(time.Now().Add(patience))
	m, err := oldEnd.recv()
	if err != nil {
		t.Fatalf("want the response of a branch the new side did not make sent to the old side, have %v", err)
	}
	if m[0] != linkForward {
		t.Fatalf("want a forward, have message %q", m[0])
	}
	if _, _, got, ok := parseLinked(m[1:]); !ok || string(got) != string(foreign) {
		t.Fatalf("want only the response of another's branch forwarded, have %q first", got)
	}
}
