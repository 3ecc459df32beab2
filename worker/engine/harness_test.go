package engine

import (
	"bufio"
	"log/slog"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/worker"
)

// wait is the deadline of every wait in these tests: long enough for a
// loaded machine, and a failure still ends the test.
const wait = 5 * time.Second

// proxy drives a Worker the way pool's worker loop does: one goroutine owns
// it, taking datagrams from a real UDP socket on 127.0.0.1, submitted
// functions and timer ticks.
type proxy struct {
	t    *testing.T
	w    *Worker
	sock *net.UDPConn
	fns  chan func()
	stop chan struct{}
	done sync.WaitGroup
	logs *testkit.SyncBuffer
}

// startProxy runs cfg's script (with %s replaced by the proxy's own
// host:port where the cfg asks for it) on a worker behind a fresh socket.
func startProxy(t *testing.T, cfg string, tune func(*Options)) *proxy {
	t.Helper()
	sock, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Load("test.cfg", []byte(cfg))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	p := &proxy{t: t, sock: sock, fns: make(chan func(), 64), stop: make(chan struct{}), logs: &testkit.SyncBuffer{}}
	opt := Options{
		Script:  c.Script,
		Sockets: []net.PacketConn{sock},
		Logger:  slog.New(slog.NewJSONHandler(p.logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		Submit:  func(fn func()) { p.fns <- fn },
		T1:      20 * time.Millisecond,
		Linger:  100 * time.Millisecond,
	}
	if tune != nil {
		tune(&opt)
	}
	p.w, err = NewWorker(opt)
	if err != nil {
		t.Fatal(err)
	}
	msgs := make(chan worker.Message, 64)
	p.done.Add(2)
	go func() {
		defer p.done.Done()
		buf := make([]byte, 65535)
		for {
			n, from, err := sock.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			select {
			case msgs <- worker.Message{Socket: 0, From: from, Data: append([]byte(nil), buf[:n]...)}:
			case <-p.stop:
				return
			}
		}
	}()
	go func() {
		defer p.done.Done()
		tick := time.NewTicker(5 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-p.stop:
				return
			case m := <-msgs:
				p.w.HandleMessage(&m)
			case fn := <-p.fns:
				fn()
			case now := <-tick.C:
				p.w.Tick(now)
			}
		}
	}()
	t.Cleanup(func() {
		close(p.stop)
		sock.Close()
		p.done.Wait()
		if t.Failed() {
			t.Logf("proxy log:\n%s", p.logs.String())
		}
	})
	return p
}

func (p *proxy) addr() netip.AddrPort { return p.sock.LocalAddr().(*net.UDPAddr).AddrPort() }

// do runs fn on the proxy's loop and waits for it.
func (p *proxy) do(fn func()) {
	p.t.Helper()
	ch := make(chan struct{})
	select {
	case p.fns <- func() { fn(); close(ch) }:
	case <-time.After(wait):
		p.t.Fatal("proxy loop stuck")
	}
	select {
	case <-ch:
	case <-time.After(wait):
		p.t.Fatal("proxy loop stuck")
	}
}

func (p *proxy) held() int {
	var n int
	p.do(func() { n = p.w.Held() })
	return n
}

func (p *proxy) stats() Stats {
	var s Stats
	p.do(func() { s = p.w.Stats })
	return s
}

// waitHeld0 waits until the proxy holds no transaction, then checks that
// nothing of them is left: no index entry and no timer, which would keep a
// finished call's memory alive.
func (p *proxy) waitHeld0() {
	p.t.Helper()
	testkit.WaitFor(p.t, wait, "no transaction held", func() bool { return p.held() == 0 })
	var acks, timers int
	p.do(func() { acks, timers = p.w.txns.Dialogs(), p.w.txns.Pending() })
	if acks != 0 || timers != 0 {
		p.t.Fatalf("with no transaction held: want no ACK index entry and no timer, have %d and %d", acks, timers)
	}
}

// ua is a SIP endpoint on its own UDP socket that the test scripts by hand.
//
// The proxy's timers are short (T1 20 ms), so a request it relayed may come
// again before the test's UA has answered it on a loaded machine: recv
// passes over such retransmissions, unless the test wants to see them
// (retrans).
type ua struct {
	t       *testing.T
	c       *net.UDPConn
	retrans bool
	seen    map[string]bool
}

func newUA(t *testing.T) *ua {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &ua{t: t, c: c}
}

func (u *ua) addr() netip.AddrPort { return u.c.LocalAddr().(*net.UDPAddr).AddrPort() }

func (u *ua) send(to netip.AddrPort, msg string) {
	u.t.Helper()
	if _, err := u.c.WriteToUDPAddrPort(crlf(msg), to); err != nil {
		u.t.Fatal(err)
	}
}

func (u *ua) sendMsg(to netip.AddrPort, m sip.Message) {
	u.t.Helper()
	if _, err := u.c.WriteToUDPAddrPort([]byte(m.String()), to); err != nil {
		u.t.Fatal(err)
	}
}

// recv returns the next message, parsed by sipgo, and its raw bytes.
func (u *ua) recv() (sip.Message, string) {
	u.t.Helper()
	buf := make([]byte, 65535)
	u.c.SetReadDeadline(time.Now().Add(wait))
	n, _, err := u.c.ReadFromUDPAddrPort(buf)
	if err != nil {
		u.t.Fatalf("%s: waiting for a message: %v", u.addr(), err)
	}
	m, err := sip.ParseMessage(buf[:n])
	if err != nil {
		u.t.Fatalf("unparsable message %v:\n%s", err, buf[:n])
	}
	if u.again(m) {
		return u.recv()
	}
	return m, string(buf[:n])
}

// again reports whether m is a request that came before, which the UA
// passes over unless retrans is set; it notes the requests it sees.
func (u *ua) again(m sip.Message) bool {
	r, ok := m.(*sip.Request)
	if !ok || u.retrans || r.Via() == nil || r.CSeq() == nil {
		return false
	}
	key := string(r.Method) + " " + branchOf(r.Via()) + " " + strconv.Itoa(int(r.CSeq().SeqNo))
	if u.seen[key] {
		return true
	}
	if u.seen == nil {
		u.seen = map[string]bool{}
	}
	u.seen[key] = true
	return false
}

func (u *ua) recvRequest(method sip.RequestMethod) (*sip.Request, string) {
	u.t.Helper()
	m, raw := u.recv()
	r, ok := m.(*sip.Request)
	if !ok || r.Method != method {
		u.t.Fatalf("want a %s request, have:\n%s", method, raw)
	}
	return r, raw
}

// recvResponse returns the next response, skipping retransmitted requests
// and responses with another code when skip allows it.
func (u *ua) recvResponse(code int) (*sip.Response, string) {
	u.t.Helper()
	m, raw := u.recv()
	r, ok := m.(*sip.Response)
	if !ok || r.StatusCode != code {
		u.t.Fatalf("want a %d response, have:\n%s", code, raw)
	}
	return r, raw
}

// quiet fails if a message arrives within d, other than a request again
// (see again): what "absorbed" looks like from outside. A slow machine can
// only make it pass, never fail wrongly.
func (u *ua) quiet(d time.Duration) {
	u.t.Helper()
	buf := make([]byte, 65535)
	u.c.SetReadDeadline(time.Now().Add(d))
	for {
		n, _, err := u.c.ReadFromUDPAddrPort(buf)
		if err != nil {
			return
		}
		if m, err := sip.ParseMessage(buf[:n]); err == nil && u.again(m) {
			continue
		}
		u.t.Fatalf("want nothing, have:\n%s", buf[:n])
	}
}

// respond answers req as a UAS does (sipgo builds it), with a fixed To-tag.
func (u *ua) respond(to netip.AddrPort, req *sip.Request, code int, reason string) *sip.Response {
	u.t.Helper()
	if code > 100 && !req.To().Params.Has("tag") {
		req.To().Params.Add("tag", "uas-tag")
	}
	res := sip.NewResponseFromRequest(req, code, reason, nil)
	if code >= 200 && code < 300 && req.Method == sip.INVITE {
		res.AppendHeader(sip.NewHeader("Contact", "<sip:bob@"+u.addr().String()+">"))
	}
	u.sendMsg(to, res)
	return res
}

// invite is alice's INVITE from her address from to ruri.
func invite(to, from netip.AddrPort, ruri, callID, branch string, maxFwd int) string {
	r := testkit.Invite(ruri, from.String(), callID)
	r.Branch, r.Rport, r.MaxForwards = branch, true, strconv.Itoa(maxFwd)
	return r.String()
}

// inDialog builds an ACK, BYE or CANCEL from the UAC for the call: route is
// the Record-Route set the UAC learnt, reversed as RFC 3261 12.1.2 says.
func inDialog(method, ruri string, from netip.AddrPort, branch, callID string, cseq int, toTag string, route []string) string {
	r := testkit.Request{Method: method, URI: ruri, Via: from.String(), Branch: branch, Rport: true,
		CallID: callID, CSeq: cseq, ToTag: toTag}
	for i := len(route) - 1; i >= 0; i-- {
		r.Headers = append(r.Headers, "Route: "+route[i])
	}
	return r.String()
}

// crlf ends every line of s with CRLF, whether it was written with LF, as
// the tests' message literals are, or already with CRLF.
func crlf(s string) []byte {
	return []byte(strings.ReplaceAll(strings.ReplaceAll(s, "\r\n", "\n"), "\n", "\r\n"))
}

func recordRoutes(m sip.Message) []string {
	var out []string
	for _, h := range m.GetHeaders("Record-Route") {
		out = append(out, h.Value())
	}
	return out
}

type streamReader struct {
	c   net.Conn
	buf *bufioReader
}

type bufioReader = bufio.Reader

func newStreamReader(c net.Conn) *streamReader {
	return &streamReader{c: c, buf: bufio.NewReader(c)}
}

func (s *streamReader) next(t *testing.T) sip.Message {
	t.Helper()
	s.c.SetReadDeadline(time.Now().Add(wait))
	b, err := readStreamMessage(s.buf)
	if err != nil {
		t.Fatalf("read tcp: %v", err)
	}
	m, err := sip.ParseMessage(b)
	if err != nil {
		t.Fatalf("parse %v:\n%s", err, b)
	}
	return m
}

// relayCheck is the built-in script's refusal to relay for strangers.
const relayCheck = `
	if (!is_myself($fu) && !is_myself($ru)) {
		sl_send_reply(403, "Relay Forbidden");
		exit;
	}
`

// openProxyCfg is the built-in config without relayCheck, for the tests of
// proxying: their caller is no user of the proxy and their callee listens
// at another address, which is just what the built-in config refuses.
func openProxyCfg(t *testing.T) string {
	t.Helper()
	if !strings.Contains(config.DefaultText, relayCheck) {
		t.Fatalf("the built-in config's relay check changed; update relayCheck:\n%s", relayCheck)
	}
	return strings.Replace(config.DefaultText, relayCheck, "\n", 1)
}
