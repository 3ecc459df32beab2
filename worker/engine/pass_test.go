package engine

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/location"
)

// An in-dialog request that came over UDP for a TCP or TLS peer this
// worker holds no connection to is handed, as received, to the worker
// that reads that peer's connection, and not relayed here; when none does,
// the worker connects as before.
func TestRequestPassedToConnectionHolder(t *testing.T) {
	t.Parallel()
	type passed struct {
		sock     int
		to, from netip.AddrPort
		msg      string
	}
	got := make(chan passed, 4)
	holder := true
	// A TCP peer that takes connections, for the case no worker holds one.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		if c, err := ln.Accept(); err == nil {
			accepted <- c
		}
	}()
	p := startProxy(t, `
socket = udp:127.0.0.1:5060
route {
	if (has_totag()) { t_relay(); exit; }
}
`, func(o *Options) {
		o.PassToHolder = func(sock int, to, from netip.AddrPort, msg []byte) bool {
			got <- passed{sock, to, from, string(msg)}
			return holder
		}
	})
	ua := newUA(t)
	peer := ln.Addr().String()
	bye := inDialog("BYE", "sip:caller@"+peer+";transport=tls", ua.addr(), "z9hG4bK-pass1", "pass@test", 1, "t1", nil)
	ua.send(p.addr(), bye)
	select {
	case g := <-got:
		if g.sock != 0 || g.to.String() != peer || g.from != ua.addr() || !strings.HasPrefix(g.msg, "BYE sip:caller@") {
			t.Errorf("want the BYE as received, from %v on socket 0, for %s; have %+v", ua.addr(), peer, g)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("the BYE was not passed on")
	}
	ua.quiet(200 * time.Millisecond)
	if s := p.stats(); s.Passed != 1 || s.SendErrors != 0 {
		t.Errorf("want 1 passed and no send error, have %+v", s)
	}

	// No worker holds it: this one connects.
	p.do(func() { holder = false })
	ua.send(p.addr(), inDialog("BYE", "sip:caller@"+peer+";transport=tcp", ua.addr(), "z9hG4bK-pass2", "pass2@test", 1, "t1", nil))
	<-got
	select {
	case c := <-accepted:
		c.Close()
	case <-time.After(5 * time.Second):
		t.Fatal("with no holder, want the worker to connect to the peer")
	}
}

// A request that came over UDP for a phone's flow stays with the worker
// that ran the script for it, and the worker reading the connection
// writes it (WriteVia): passed to that worker, it would run the script
// again there, credentials and all, and a nonce-count already used would
// make it a replay.
func TestFlowRequestWrittenNotPassed(t *testing.T) {
	t.Parallel()
	store := location.NewMemory()
	flow := netip.MustParseAddrPort("192.0.2.9:40001")
	passed := make(chan string, 4)
	written := make(chan netip.AddrPort, 4)
	p := startProxy(t, outboundScript, func(o *Options) {
		o.Store = store
		o.PassToHolder = func(_ int, _, _ netip.AddrPort, msg []byte) bool {
			passed <- string(msg)
			return true
		}
		o.WriteVia = func(_ byte, to netip.AddrPort, _ []byte) bool {
			written <- to
			return true
		}
	})
	aor := "sip:alice@127.0.0.1" // an AOR is user@domain, the port dropped
	if err := store.Save(aor, location.Binding{AOR: aor, Contact: "sip:alice@phone.invalid;transport=tcp",
		Expires: time.Now().Add(time.Hour), Proto: "tcp", Received: "sip:" + flow.String() + ";transport=tcp"}); err != nil {
		t.Fatal(err)
	}
	caller := newUA(t)
	caller.send(p.addr(), invite(p.addr(), caller.addr(), "sip:alice@"+p.addr().String(), "flow1@x", "z9hG4bK-flow1", 70))
	select {
	case to := <-written:
		if to != flow {
			t.Errorf("want the INVITE written on the flow %v, have %v", flow, to)
		}
	case msg := <-passed:
		t.Fatalf("the INVITE for a flow was passed to the holder to run again:\n%s", msg)
	case <-time.After(5 * time.Second):
		_, raw := caller.recv()
		t.Fatalf("the INVITE for a flow went nowhere; the caller got:\n%s", raw)
	}
	caller.recvResponse(100)
	if s := p.stats(); s.Passed != 0 || s.WrittenVia != 1 {
		t.Errorf("want 1 written via the holder and none passed, have %+v", s)
	}
}
