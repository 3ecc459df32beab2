package engine

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/rawio"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/location"
	"github.com/sipvisor/sipvisor/overload"
)

// streamDriver is callDriver over TCP: the caller's connection accepted by
// the proxy's listener and the callee's opened to the UAS, both the
// worker's. The test hands the worker what each peer sends, as the
// connection's reader would, so that no goroutine of the worker's runs
// beside the test; the peers' ends are read by the test (uacR, uasR), or
// drained.
type streamDriver struct {
	w                *Worker
	store            *location.Memory
	lnAddr, uas, uac netip.AddrPort // the proxy's listener, the UAS's, the UAC's end
	uacTC, uasTC     *tcpConn       // the worker's connections
	uacPeer, uasPeer net.Conn       // the peers' ends
	uacR, uasR       *bufio.Reader
	ruri             string // bob's contact, over TCP
	close            func()
}

func newStreamDriver(tb testing.TB, routes string) *streamDriver {
	tb.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	lnUAS, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		tb.Fatal(err)
	}
	accept := func(l net.Listener, dial string) (near, far net.Conn) {
		ch := make(chan net.Conn, 1)
		go func() {
			c, err := l.Accept()
			if err != nil {
				ch <- nil
				return
			}
			ch <- c
		}()
		near, err := net.Dial("tcp", dial)
		if err != nil {
			tb.Fatal(err)
		}
		far = <-ch
		if far == nil {
			tb.Fatal("accept failed")
		}
		return near, far
	}
	uacPeer, srv := accept(ln, ln.Addr().String())
	toUAS, uasPeer := accept(lnUAS, lnUAS.Addr().String())
	d := &streamDriver{lnAddr: addrPortOf(ln.Addr()), uas: addrPortOf(lnUAS.Addr()), uac: addrPortOf(uacPeer.LocalAddr()),
		uacPeer: uacPeer, uasPeer: uasPeer}
	d.uacR, d.uasR = bufio.NewReader(uacPeer), bufio.NewReader(uasPeer)
	d.close = func() {
		for _, c := range []net.Conn{uacPeer, srv, toUAS, uasPeer} {
			c.Close()
		}
		ln.Close()
		lnUAS.Close()
	}
	c, err := config.Load("call.cfg", []byte(strings.ReplaceAll(routes, "@UAS@", d.uas.String()+";transport=tcp")))
	if err != nil {
		tb.Fatal(err)
	}
	d.store = location.NewMemory()
	d.store.PutUser(location.NewUser("alice", "example.com", "alices"))
	d.w, err = NewWorker(Options{Script: c.Script, Store: d.store, Domains: []string{"example.com"},
		Listen: []config.Socket{{Proto: "tcp", Host: "127.0.0.1", Port: int(d.lnAddr.Port())}}})
	if err != nil {
		tb.Fatal(err)
	}
	// As adopt takes them, without the reader.
	adopt := func(c net.Conn, inbound bool) *tcpConn {
		tc := &tcpConn{c: c, remote: addrPortOf(c.RemoteAddr()), local: addrPortOf(c.LocalAddr()), inbound: inbound, limits: d.w.opt.Conn}
		if inbound {
			d.w.self = appendUnique(d.w.self, selfAddr{tc.local, tc.proto()})
		}
		d.w.conns[tc.remote] = tc
		return tc
	}
	d.uacTC, d.uasTC = adopt(rawStream(srv), true), adopt(rawStream(toUAS), false)
	d.ruri = "sip:bob@" + d.uas.String() + ";transport=tcp"
	if _, err := d.store.Register("sip:bob@example.com", location.Binding{AOR: "sip:bob@example.com", Contact: d.ruri,
		Expires: time.Now().Add(24 * time.Hour), CallID: "bob-reg", CSeq: 1}); err != nil {
		tb.Fatal(err)
	}
	return d
}

// fromUAC and fromUAS hand the worker a message read from the caller's or
// the callee's connection.
func (d *streamDriver) fromUAC(b []byte) {
	d.w.handle(b, source{proto: "tcp", addr: d.uacTC.remote, sock: -1, conn: d.uacTC, readAt: time.Now().UnixNano()})
}

func (d *streamDriver) fromUAS(b []byte) {
	d.w.handle(b, source{proto: "tcp", addr: d.uasTC.remote, sock: -1, conn: d.uasTC, readAt: time.Now().UnixNano()})
}

// drain reads and drops what the peers are sent, for tests that do not
// read it, until close.
func (d *streamDriver) drain() {
	for _, c := range []net.Conn{d.uacPeer, d.uasPeer} {
		go func() {
			var buf [64 << 10]byte
			for {
				if _, err := c.Read(buf[:]); err != nil {
					return
				}
			}
		}()
	}
}

// routes is the route set the caller learns from the proxy's Record-Route
// over TCP: the side of its own connection, with its flow token, then the
// callee's.
func (d *streamDriver) routes() []string {
	tok := d.w.flowToken(d.uac, flowTokenCaller)
	return []string{"<sip:" + tok + "@" + d.lnAddr.String() + ";lr;transport=tcp>", "<sip:" + d.lnAddr.String() + ";lr;transport=tcp>"}
}

// calls is callDriver.calls over TCP.
func (d *streamDriver) calls(n int) []callMsgs {
	calls := make([]callMsgs, n)
	seq := d.w.branchSeq
	branch := func(n uint64) string { return d.w.branchPrefix + strconv.FormatUint(n, 36) }
	rs := d.routes()
	rr := "Record-Route: " + rs[1] + "\r\nRecord-Route: " + rs[0]
	req := func(method, callID, branch string, cseq int, toTag string) []byte {
		r := testkit.Request{Method: method, URI: d.ruri, Transport: "TCP", Via: d.uac.String(), Branch: branch, Rport: true,
			CallID: callID, CSeq: cseq, ToTag: toTag, Headers: []string{"Route: " + rs[0], "Route: " + rs[1]}}
		return r.Bytes()
	}
	reply := func(code int, reason, branch, callID string, cseq int, method string) []byte {
		return crlf(fmt.Sprintf(`SIP/2.0 %d %s
Via: SIP/2.0/TCP %s;branch=%s
Via: SIP/2.0/TCP %s;branch=z9hG4bK-%s;rport=%d;received=127.0.0.1
%s
From: <sip:alice@example.com>;tag=alice-tag
To: <sip:bob@example.com>;tag=bob-tag
Call-ID: %s
CSeq: %d %s
Contact: <%s>
Content-Length: 0

`, code, reason, d.lnAddr, branch, d.uac, callID, d.uac.Port(), rr, callID, cseq, method, d.ruri))
	}
	for i := range calls {
		callID := "tcp-" + strconv.Itoa(i) + "-" + strconv.FormatUint(seq, 36)
		inv := branch(seq + 1)
		bye := branch(seq + 3)
		seq += 3
		r := testkit.Invite("sip:bob@example.com", d.uac.String(), callID)
		r.Transport, r.Rport, r.Branch = "TCP", true, "z9hG4bK-"+callID
		r.Contact = "<sip:alice@" + d.uac.String() + ";transport=tcp>"
		calls[i] = callMsgs{
			inv:     r.Bytes(),
			ringing: reply(180, "Ringing", inv, callID, 1, "INVITE"),
			ok:      reply(200, "OK", inv, callID, 1, "INVITE"),
			ack:     req("ACK", callID, "z9hG4bK-a"+callID, 1, "bob-tag"),
			bye:     req("BYE", callID, "z9hG4bK-"+callID, 2, "bob-tag"),
			byeOK:   reply(200, "OK", bye, callID, 2, "BYE"),
		}
	}
	return calls
}

func (d *streamDriver) call(c *callMsgs, later time.Time) {
	d.fromUAC(c.inv)
	d.fromUAS(c.ringing)
	d.fromUAS(c.ok)
	d.fromUAC(c.ack)
	d.fromUAC(c.bye)
	d.fromUAS(c.byeOK)
	d.w.Tick(later)
}

// read reads n messages from a peer's end.
func (d *streamDriver) read(tb testing.TB, c net.Conn, r *bufio.Reader, n int) [][]byte {
	tb.Helper()
	var out [][]byte
	for range n {
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		b, err := readStreamMessage(r)
		if err != nil {
			tb.Fatalf("want %d messages, have %d: %v", n, len(out), err)
		}
		out = append(out, b)
	}
	return out
}

// testBytesPathOverTCP is TestBytesPathSendsWhatDecodedSends over TCP: a
// call from a caller's connection, relayed over the proxy's connection to
// the callee, sends the same on the bytes as decoded, with the Record-Route
// of the caller's flow, the Content-Length a stream needs, and every reply
// back on the caller's connection.
func testBytesPathOverTCP(t *testing.T) {
	run := func(routes string, onBytes bool) (uas, uac []string) {
		d := newStreamDriver(t, routes)
		defer d.close()
		defer func() {
			if kept := d.w.fastCtx != nil; kept != onBytes {
				t.Fatalf("requests handled on the bytes: want %v, have %v", onBytes, kept)
			}
		}()
		c := d.calls(1)[0]
		// Each of the caller's requests is handled on the bytes, or not.
		fromUAC := func(name string, b []byte) {
			d.w.fastCtx = nil
			d.fromUAC(b)
			if kept := d.w.fastCtx != nil; kept != onBytes {
				t.Errorf("%s handled on the bytes: want %v, have %v", name, onBytes, kept)
			}
		}
		fromUAC("INVITE", c.inv)
		d.fromUAS(c.ringing)
		d.fromUAS(c.ok)
		fromUAC("ACK", c.ack)
		fromUAC("BYE", c.bye)
		d.fromUAS(c.byeOK)
		if s := d.w.Stats; s.Malformed != 0 || s.SendErrors != 0 || s.Requests != 3 {
			t.Fatalf("stats: %+v", s)
		}
		// A connection may still hold what it was given: nothing over one
		// is traded for a settled record (txpool.go, compact).
		if n := d.w.txns.Settled(); n != 0 {
			t.Fatalf("over TCP: want no transactions settled, have %d", n)
		}
		tok := regexp.MustCompile(`sip:ft[A-Za-z0-9_-]+@`)
		branch := regexp.MustCompile(regexp.QuoteMeta(d.w.branchPrefix) + `[0-9a-z]+`)
		norm := func(msgs [][]byte) []string {
			var out []string
			for _, b := range msgs {
				b = branch.ReplaceAll(b, []byte("z9hG4bK-proxy"))
				b = tok.ReplaceAll(b, []byte("sip:ftTOKEN@"))
				for i, p := range []uint16{d.lnAddr.Port(), d.uac.Port(), d.uas.Port()} {
					b = bytes.ReplaceAll(b, []byte(strconv.Itoa(int(p))), []byte(strconv.Itoa(1111*(i+1))))
				}
				m, err := sip.ParseMessage(b)
				if err != nil {
					t.Fatalf("%v in %q", err, b)
				}
				out = append(out, m.String())
			}
			return out
		}
		// INVITE, ACK, BYE to the callee; 100, 180, 200, 200 to the caller.
		return norm(d.read(t, d.uasPeer, d.uasR, 3)), norm(d.read(t, d.uacPeer, d.uacR, 4))
	}
	// The bench's routing (bench/sipvisor.cfg): $du to the UAS.
	const du = "route {\n\tif (has_totag()) {\n\t\tif (!loose_route())\n\t\t\t$du = \"sip:@UAS@\";\n\t\tt_relay();\n\t\texit;\n\t}\n" +
		"\tt_check_trans();\n\tif (is_method(\"INVITE\"))\n\t\trecord_route();\n\t$du = \"sip:@UAS@\";\n\tif (!t_relay())\n\t\tsl_send_reply(500, \"Internal Server Error\");\n}\n"
	for _, sc := range []struct{ name, routes string }{{"built-in", callScript}, {"$du", du}} {
		uasB, uacB := run(sc.routes, true)
		uasD, uacD := run(strings.Replace(sc.routes, "route {", "route {\n\t$var(decoded) = $ci;", 1), false)
		for i := range uasB {
			if uasB[i] != uasD[i] {
				t.Errorf("%s, to the callee, message %d:\non the bytes %q\ndecoded     %q", sc.name, i, uasB[i], uasD[i])
			}
		}
		for i := range uacB {
			if uacB[i] != uacD[i] {
				t.Errorf("%s, to the caller, message %d:\non the bytes %q\ndecoded     %q", sc.name, i, uacB[i], uacD[i])
			}
		}
	}
}

// What a proxied call over TCP may allocate, held by TestAllocsTCP (INVITE,
// 100, 180, 200, ACK, BYE, 200, each request from the caller's connection
// and each response from the callee's, record-routed with the caller's
// flow, admission asked and the session noted): what the same call over
// UDP allocates (callAllocs, callBytes), on the same path. The reader that
// frames each message copies it out of its buffer, outside the count.
const (
	callTCPAllocs = 4
	callTCPBytes  = 672
)

// TestAllocsTCP holds a proxied call over TCP to its allocation budget.
// Not parallel: it counts the process's allocations.
func TestAllocsTCP(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own account")
	}
	const runs = 200
	later := time.Now().Add(time.Hour)
	d := newStreamDriver(t, callScript)
	defer d.close()
	d.drain()
	var asked, noted int
	d.w.opt.Admit = func(overload.Class, sipscan.Kind, sipscan.Method, []byte, int64) (bool, int) {
		asked++
		return false, 0
	}
	d.w.opt.NoteSession = func(sipscan.Method, bool, int32, []byte, []byte) { noted++ }
	calls := d.calls(2*runs + 2)
	i := 0
	call := func() {
		d.call(&calls[i], later)
		i++
	}
	have := testing.AllocsPerRun(runs, call)
	b := bytesPerRun(runs, call)
	if d.w.Held() != 0 || d.w.Stats.Malformed != 0 || d.w.Stats.SendErrors != 0 || d.w.Stats.Requests != 3*uint64(i) {
		t.Fatalf("calls: want %d requests handled and nothing held, have %d held, %+v", 3*i, d.w.Held(), d.w.Stats)
	}
	if asked != i || noted != 3*i {
		t.Fatalf("admission asked %d times and sessions noted %d times for %d calls: want once and 3 times a call", asked, noted, i)
	}
	t.Logf("allocations per proxied call over TCP: %.1f (budget %d), bytes %.0f (budget %d)", have, callTCPAllocs, b, callTCPBytes)
	if have > callTCPAllocs {
		t.Errorf("allocations per proxied call over TCP: want at most %d, have %.1f", callTCPAllocs, have)
	}
	if b > callTCPBytes+bytesNoise {
		t.Errorf("bytes per proxied call over TCP: want at most %d, have %.0f", callTCPBytes, b)
	}
}

// A connection read and written with rawio's calls behaves as net.Conn
// does where the reader and the loop look: a read deadline times out as
// a net.Error, a write larger than the socket's buffers waits for room
// and completes, the peer's close reads as io.EOF.
func TestRawStream(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	a, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	c := rawStream(a)
	defer c.Close()
	if _, ok := c.(*rawio.Stream); !ok {
		t.Fatalf("a TCP connection: want a rawio.Stream, have %T", c)
	}
	buf := make([]byte, 64)
	c.SetReadDeadline(time.Now().Add(20 * time.Millisecond))
	if _, err := c.Read(buf); !isTimeout(err) {
		t.Fatalf("a read past its deadline: want a timeout, have %v", err)
	}
	c.SetReadDeadline(time.Time{})
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<18) // 4 MiB
	got := make(chan int, 1)
	go func() {
		n := 0
		b := make([]byte, 64<<10)
		for n < len(big) {
			k, err := peer.Read(b)
			if err != nil {
				break
			}
			n += k
		}
		got <- n
	}()
	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	if n, err := c.Write(big); n != len(big) || err != nil {
		t.Fatalf("a large write: want %d bytes, have %d (%v)", len(big), n, err)
	}
	if n := <-got; n != len(big) {
		t.Fatalf("the peer read %d bytes of %d", n, len(big))
	}
	if _, err := peer.Write([]byte("INVITE")); err != nil {
		t.Fatal(err)
	}
	peer.Close()
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, err := c.Read(buf); n != 6 || err != nil || string(buf[:n]) != "INVITE" {
		t.Fatalf("want INVITE, have %q (%v)", buf[:n], err)
	}
	if _, err := c.Read(buf); err != io.EOF {
		t.Fatalf("after the peer's close: want io.EOF, have %v", err)
	}
}
