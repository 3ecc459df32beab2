package engine

import (
	"fmt"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"
	"github.com/icholy/digest"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/location"
)

// The built-in config: bob registers with digest authentication (the
// realm is the server's address without its port, which stands for its
// domain, as the AOR does), then a call to him reaches his contact.
func TestRegisterThenInvite(t *testing.T) {
	t.Parallel()
	store := location.NewMemory()
	p := startProxy(t, config.DefaultText, func(o *Options) { o.Store = store })
	store.PutUser(location.NewUser("bob", p.addr().Addr().String(), "bobs-password"))
	bob, alice := newUA(t), newUA(t)

	register := func(branch string, cseq int, contact, expires, auth string) {
		r := testkit.Register("sip:bob@"+p.addr().String(), "sip:bob@"+bob.addr().String(), bob.addr().String(), "reg1@test", 0)
		r.Branch, r.CSeq, r.FromTag = branch, cseq, "bob-tag"
		r.Contact += contact
		r.Headers = nil
		for _, h := range strings.Split(expires+auth, "\n") {
			if h != "" {
				r.Headers = append(r.Headers, h)
			}
		}
		bob.send(p.addr(), r.String())
	}
	register("z9hG4bK-reg0", 1, ";expires=120", "", "")
	res, raw := bob.recvResponse(401)
	ch, err := digest.ParseChallenge(res.GetHeader("WWW-Authenticate").Value())
	if err != nil {
		t.Fatalf("challenge: %v\n%s", err, raw)
	}
	creds := func(nc int) string {
		cr, err := digest.Digest(ch, digest.Options{Method: "REGISTER", URI: "sip:" + p.addr().String(), Username: "bob", Password: "bobs-password", Count: nc})
		if err != nil {
			t.Fatal(err)
		}
		return "Authorization: " + cr.String() + "\n"
	}
	register("z9hG4bK-reg1", 2, ";expires=120", "", creds(1))
	res, raw = bob.recvResponse(200)
	if c := res.GetHeaders("Contact"); len(c) != 1 || !strings.Contains(c[0].Value(), bob.addr().String()) {
		t.Fatalf("200 to REGISTER: want the registered contact, have:\n%s", raw)
	}

	alice.send(p.addr(), invite(p.addr(), alice.addr(), "sip:bob@"+p.addr().String(), "call-reg@test", "z9hG4bK-inv1", 70))
	alice.recvResponse(100)
	req, raw := bob.recvRequest(sip.INVITE)
	if want := "sip:bob@" + bob.addr().String(); req.Recipient.String() != want {
		t.Fatalf("request uri: want %v, have %v", want, req.Recipient.String())
	}
	vias := req.GetHeaders("Via")
	if len(vias) != 2 || !strings.Contains(vias[0].Value(), p.addr().String()) || !strings.Contains(vias[0].Value(), "branch=z9hG4bK") {
		t.Fatalf("want the proxy's Via with a z9hG4bK branch on top of the UAC's, have:\n%s", raw)
	}
	if rr := recordRoutes(req); len(rr) != 1 || rr[0] != "<sip:"+p.addr().String()+";lr>" {
		t.Fatalf("record-route: want %v, have %v", "<sip:"+p.addr().String()+";lr>", rr)
	}
	if mf := req.MaxForwards(); mf == nil || mf.Val() != 69 {
		t.Fatalf("max-forwards: want %v, have %v", 69, mf)
	}

	// Expires: 0 removes it; the next INVITE finds no one.
	register("z9hG4bK-reg2", 3, "", "Expires: 0\n", creds(2))
	if res, raw := bob.recvResponse(200); len(res.GetHeaders("Contact")) != 0 {
		t.Fatalf("after expires 0: want no contact, have:\n%s", raw)
	}
	alice.send(p.addr(), invite(p.addr(), alice.addr(), "sip:bob@"+p.addr().String(), "call-reg2@test", "z9hG4bK-inv2", 70))
	alice.recvResponse(404)
}

func TestUnknownUser404(t *testing.T) {
	t.Parallel()
	p := startProxy(t, config.DefaultText, nil)
	alice := newUA(t)
	alice.send(p.addr(), invite(p.addr(), alice.addr(), "sip:nobody@"+p.addr().String(), "c404@test", "z9hG4bK-404", 70))
	res, raw := alice.recvResponse(404)
	if !res.To().Params.Has("tag") || !strings.Contains(raw, "branch=z9hG4bK-404") {
		t.Fatalf("404 wants a To-tag and the UAC's Via, have:\n%s", raw)
	}
	if p.held() != 0 {
		t.Fatalf("a stateless reply holds nothing: want %v, have %v", 0, p.held())
	}
}

func TestMaxForwardsZero483(t *testing.T) {
	t.Parallel()
	p := startProxy(t, config.DefaultText, nil)
	alice, bob := newUA(t), newUA(t)
	alice.send(p.addr(), invite(p.addr(), alice.addr(), "sip:bob@"+bob.addr().String(), "c483@test", "z9hG4bK-483", 0))
	alice.recvResponse(483)
	bob.quiet(100 * time.Millisecond)
}

// TestCall runs a whole call through the proxy: INVITE, 100, 180, 200, ACK,
// BYE, 200, with record-routing, and checks the proxy lets go of it.
func TestCall(t *testing.T) {
	t.Parallel()
	p := startProxy(t, openProxyCfg(t), nil)
	alice, bob := newUA(t), newUA(t)
	ruri := "sip:bob@" + bob.addr().String()

	alice.send(p.addr(), invite(p.addr(), alice.addr(), ruri, "call1@test", "z9hG4bK-c1", 70))
	alice.recvResponse(100)
	inv, _ := bob.recvRequest(sip.INVITE)
	bob.respond(p.addr(), inv, 180, "Ringing")
	r180, raw := alice.recvResponse(180)
	if len(r180.GetHeaders("Via")) != 1 {
		t.Fatalf("180 upstream: want only the UAC's Via, have:\n%s", raw)
	}
	bob.respond(p.addr(), inv, 200, "OK")
	ok, raw := alice.recvResponse(200)
	rr := recordRoutes(ok)
	if len(rr) != 1 || !strings.Contains(rr[0], p.addr().String()) {
		t.Fatalf("200 wants the proxy's Record-Route, have:\n%s", raw)
	}
	toTag, _ := ok.To().Params.Get("tag")

	// ACK and BYE follow the route set through the proxy.
	contact := "sip:bob@" + bob.addr().String()
	alice.send(p.addr(), inDialog("ACK", contact, alice.addr(), "z9hG4bK-c1ack", "call1@test", 1, toTag, rr))
	ack, raw := bob.recvRequest(sip.ACK)
	if len(ack.GetHeaders("Route")) != 0 || len(ack.GetHeaders("Via")) != 2 {
		t.Fatalf("ACK at the UAS: want its Route consumed and two Vias, have:\n%s", raw)
	}
	alice.send(p.addr(), inDialog("BYE", contact, alice.addr(), "z9hG4bK-c1bye", "call1@test", 2, toTag, rr))
	bye, _ := bob.recvRequest(sip.BYE)
	bob.respond(p.addr(), bye, 200, "OK")
	alice.recvResponse(200)
	p.waitHeld0()
}

func TestRetransmittedInviteAbsorbed(t *testing.T) {
	t.Parallel()
	p := startProxy(t, openProxyCfg(t), func(o *Options) { o.T1 = time.Hour }) // no timer A firing during the test
	alice, bob := newUA(t), newUA(t)
	bob.retrans = true // T1 out of reach: anything again is the proxy's doing
	msg := invite(p.addr(), alice.addr(), "sip:bob@"+bob.addr().String(), "retr@test", "z9hG4bK-retr", 70)

	alice.send(p.addr(), msg)
	alice.recvResponse(100)
	inv, _ := bob.recvRequest(sip.INVITE)
	bob.respond(p.addr(), inv, 180, "Ringing")
	alice.recvResponse(180)

	alice.send(p.addr(), msg)
	alice.recvResponse(180) // the last provisional again
	bob.quiet(200 * time.Millisecond)
	if s := p.stats(); s.Retransmissions != 1 {
		t.Fatalf("retransmissions: want %v, have %v", 1, s.Retransmissions)
	}
}

func TestCancel(t *testing.T) {
	t.Parallel()
	p := startProxy(t, openProxyCfg(t), func(o *Options) { o.T1 = time.Hour }) // no timer A or G firing during the test
	alice, bob := newUA(t), newUA(t)
	bob.retrans = true // T1 out of reach: anything again is the proxy's doing
	ruri := "sip:bob@" + bob.addr().String()
	alice.send(p.addr(), invite(p.addr(), alice.addr(), ruri, "cancel@test", "z9hG4bK-can", 70))
	alice.recvResponse(100)
	inv, _ := bob.recvRequest(sip.INVITE)
	bob.respond(p.addr(), inv, 180, "Ringing")
	alice.recvResponse(180)

	alice.send(p.addr(), inDialog("CANCEL", ruri, alice.addr(), "z9hG4bK-can", "cancel@test", 1, "", nil))
	alice.recvResponse(200)
	cancel, raw := bob.recvRequest(sip.CANCEL)
	if branchOf(cancel.Via()) != branchOf(inv.Via()) {
		t.Fatalf("CANCEL downstream wants the INVITE's branch %s, have:\n%s", branchOf(inv.Via()), raw)
	}
	bob.respond(p.addr(), cancel, 200, "OK")
	bob.respond(p.addr(), inv, 487, "Request Terminated")
	ack, raw := bob.recvRequest(sip.ACK) // hop by hop, from the proxy
	if branchOf(ack.Via()) != branchOf(inv.Via()) || ack.CSeq().SeqNo != 1 {
		t.Fatalf("ACK of the 487 wants the INVITE's branch and CSeq, have:\n%s", raw)
	}
	r487, _ := alice.recvResponse(487)
	tag, _ := r487.To().Params.Get("tag")
	alice.send(p.addr(), inDialog("ACK", ruri, alice.addr(), "z9hG4bK-can", "cancel@test", 1, tag, nil))
	bob.quiet(200 * time.Millisecond) // the UAC's ACK ends at the proxy
}

const failoverCfg = `
route {
	if (has_totag()) { if (loose_route()) { t_relay(); } exit; }
	t_check_trans();
	t_on_failure("next");
	$var(tries) = "1";
	if (!t_relay()) sl_send_reply(500, "Relay Failed");
}

failure_route[next] {
	xlog("L_INFO", "branch failed with $rs $rr for $ru");
	if ($rs == 408 && $hdr(X-Backup) != "") {
		$du = $hdr(X-Backup);
		t_relay();
	}
}
`

// TestTimeoutFailureRoute: a next hop that never answers is retransmitted to
// (timer A), the branch times out (timer B) into a 408, and failure_route
// sends the call elsewhere.
func TestTimeoutFailureRoute(t *testing.T) {
	t.Parallel()
	p := startProxy(t, failoverCfg, nil)
	alice, dead, backup := newUA(t), newUA(t), newUA(t)
	dead.retrans = true
	msg := invite(p.addr(), alice.addr(), "sip:bob@"+dead.addr().String(), "fail@test", "z9hG4bK-fail", 70)
	msg = strings.Replace(msg, "Content-Length: 0", "X-Backup: sip:"+backup.addr().String()+"\nContent-Length: 0", 1)
	alice.send(p.addr(), msg)
	alice.recvResponse(100)
	first, _ := dead.recvRequest(sip.INVITE)
	again, _ := dead.recvRequest(sip.INVITE)
	if branchOf(first.Via()) != branchOf(again.Via()) {
		t.Fatalf("a retransmission keeps the branch: want %v, have %v", branchOf(first.Via()), branchOf(again.Via()))
	}
	inv, _ := backup.recvRequest(sip.INVITE)
	backup.respond(p.addr(), inv, 200, "OK")
	alice.recvResponse(200)
	if !strings.Contains(p.logs.String(), "branch failed with 408 Request Timeout") {
		t.Fatalf("failure_route log line missing:\n%s", p.logs.String())
	}
	p.waitHeld0()
}

func TestTimeout408(t *testing.T) {
	t.Parallel()
	p := startProxy(t, failoverCfg, nil)
	alice, dead := newUA(t), newUA(t)
	alice.send(p.addr(), invite(p.addr(), alice.addr(), "sip:bob@"+dead.addr().String(), "t408@test", "z9hG4bK-408", 70))
	alice.recvResponse(100)
	res, raw := alice.recvResponse(408)
	if !res.To().Params.Has("tag") {
		t.Fatalf("408 wants a To-tag, have:\n%s", raw)
	}
	if s := p.stats(); s.Timeouts != 1 {
		t.Fatalf("timeouts: want %v, have %v", 1, s.Timeouts)
	}
	alice.send(p.addr(), inDialog("ACK", "sip:bob@"+dead.addr().String(), alice.addr(), "z9hG4bK-408", "t408@test", 1, "x", nil))
	p.waitHeld0()
}

// handConn connects a client to the worker over TCP, handing the worker
// its end as the supervisor does, and returns the client's end.
func (p *proxy) handConn() net.Conn {
	p.t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		p.t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		p.t.Fatal(err)
	}
	p.t.Cleanup(func() { client.Close() })
	server, err := ln.Accept()
	if err != nil {
		p.t.Fatal(err)
	}
	p.do(func() { p.w.HandleConn(server) })
	return client
}

// TestTCPUpstream takes the caller's leg over a TCP connection handed to
// the worker, as the supervisor does, and relays to a UDP callee.
func TestTCPUpstream(t *testing.T) {
	t.Parallel()
	p := startProxy(t, openProxyCfg(t), nil)
	bob := newUA(t)
	client := p.handConn()

	la := client.LocalAddr().String()
	msg := strings.ReplaceAll(invite(p.addr(), p.addr(), "sip:bob@"+bob.addr().String(), "tcp@test", "z9hG4bK-tcp", 70), "SIP/2.0/UDP "+p.addr().String(), "SIP/2.0/TCP "+la)
	client.Write(crlf(msg))
	inv, raw := bob.recvRequest(sip.INVITE)
	rr := recordRoutes(inv)
	if len(rr) != 2 || !strings.Contains(rr[1], "transport=tcp") || strings.Contains(rr[0], "transport=tcp") {
		t.Fatalf("UDP out, TCP in: want two Record-Routes, the TCP one below, have:\n%s", raw)
	}
	bob.respond(p.addr(), inv, 200, "OK")

	r := newStreamReader(client)
	for _, want := range []int{100, 200} {
		m := r.next(t)
		res, ok := m.(*sip.Response)
		if !ok || res.StatusCode != want {
			t.Fatalf("over tcp: want %v, have %v", want, m)
		}
	}
}

// TestResponsesRelayedAsTheyCame: a provisional and a 2xx response go
// upstream byte for byte as the UAS sent them, less the proxy's Via, however
// the UAS wrote its headers; the transaction moves on as with any relay.
func TestResponsesRelayedAsTheyCame(t *testing.T) {
	t.Parallel()
	p := startProxy(t, openProxyCfg(t), nil)
	alice, bob := newUA(t), newUA(t)
	ruri := "sip:bob@" + bob.addr().String()
	alice.send(p.addr(), invite(p.addr(), alice.addr(), ruri, "asis@test", "z9hG4bK-asis", 70))
	alice.recvResponse(100)
	inv, _ := bob.recvRequest(sip.INVITE)
	vias := inv.GetHeaders("Via")
	if len(vias) != 2 {
		t.Fatalf("want the proxy's Via over the UAC's, have %d", len(vias))
	}
	for _, code := range []int{180, 200} {
		upstream := "v: " + vias[1].Value() + "\n" +
			"From:   " + inv.From().Value() + "\n" +
			"t: " + inv.To().Value() + ";tag=uas-tag\n" +
			"i: " + inv.CallID().Value() + "\n" +
			"CSeq: 1 INVITE\n" +
			"X-Odd:  kept   as\t sent\n" +
			"Contact: <sip:bob@" + bob.addr().String() + ">\n" +
			"l: 0\n\n"
		start := fmt.Sprintf("SIP/2.0 %d Whatever Reason\n", code)
		bob.send(p.addr(), start+"Via: "+vias[0].Value()+"\n"+upstream)
		_, raw := alice.recvResponse(code)
		// ua.send writes line ends as CRLF.
		if want := strings.ReplaceAll(start+upstream, "\n", "\r\n"); raw != want {
			t.Fatalf("%d upstream: want\n%q\nhave\n%q", code, want, raw)
		}
	}
	if s := p.stats(); s.Responses != 2 {
		t.Fatalf("want 2 responses counted, have %+v", s)
	}
	p.waitHeld0()
}

// TestTCPLateRequests: a request read from a connection that waited longer
// than max_queue_wait is refused with 503 and Retry-After when it starts
// something (a stream's client will not retransmit it, so it cannot be
// dropped), and handled late when it belongs to a call that is up.
func TestTCPLateRequests(t *testing.T) {
	t.Parallel()
	var late atomic.Bool
	var refused atomic.Int64
	var sawReadAt atomic.Int64
	p := startProxy(t, openProxyCfg(t), func(o *Options) {
		o.Late = func(readAt int64) bool {
			sawReadAt.Store(readAt)
			return late.Load()
		}
		o.RefusedLate = func() { refused.Add(1) }
		o.RetryAfter = config.RetryAfter{Min: 7 * time.Second, Max: 7 * time.Second}
	})
	bob := newUA(t)
	client := p.handConn()
	r := newStreamReader(client)
	la := client.LocalAddr().String()
	overTCP := func(msg string) {
		msg = strings.ReplaceAll(msg, "SIP/2.0/UDP "+p.addr().String(), "SIP/2.0/TCP "+la)
		if _, err := client.Write(crlf(msg)); err != nil {
			t.Fatal(err)
		}
	}
	ruri := "sip:bob@" + bob.addr().String()

	// A call set up while the worker keeps up.
	before := time.Now().UnixNano()
	overTCP(invite(p.addr(), p.addr(), ruri, "late-up@test", "z9hG4bK-up", 70))
	inv, _ := bob.recvRequest(sip.INVITE)
	if at := sawReadAt.Load(); at < before || at > time.Now().UnixNano() {
		t.Fatalf("Late wants the time the message was read, have %d (sent at %d)", at, before)
	}
	ok := bob.respond(p.addr(), inv, 200, "OK")
	for _, want := range []int{100, 200} {
		if m, isRes := r.next(t).(*sip.Response); !isRes || m.StatusCode != want {
			t.Fatalf("want %d, have %v", want, m)
		}
	}
	toTag, _ := ok.To().Params.Get("tag")

	late.Store(true)
	// A new call that waited too long: 503 with Retry-After, nothing relayed.
	overTCP(invite(p.addr(), p.addr(), ruri, "late-new@test", "z9hG4bK-new", 70))
	m, isRes := r.next(t).(*sip.Response)
	if !isRes || m.StatusCode != 503 {
		t.Fatalf("late new INVITE: want 503, have %v", m)
	}
	if h := m.GetHeader("Retry-After"); h == nil || h.Value() != "7" {
		t.Fatalf("late new INVITE: want Retry-After 7, have %v", h)
	}
	// An OPTIONS outside a dialog is refused the same way.
	overTCP(strings.Replace(strings.Replace(invite(p.addr(), p.addr(), ruri, "late-opt@test", "z9hG4bK-opt", 70), "INVITE", "OPTIONS", 1), "1 INVITE", "1 OPTIONS", 1))
	if m, isRes := r.next(t).(*sip.Response); !isRes || m.StatusCode != 503 {
		t.Fatalf("late OPTIONS: want 503, have %v", m)
	}
	// The call that is up completes: its ACK and BYE go through late.
	routes := recordRoutes(inv)
	overTCP(inDialog("ACK", ruri, p.addr(), "z9hG4bK-up-ack", "late-up@test", 1, toTag, routes))
	bob.recvRequest(sip.ACK)
	overTCP(inDialog("BYE", ruri, p.addr(), "z9hG4bK-up-bye", "late-up@test", 2, toTag, routes))
	bye, _ := bob.recvRequest(sip.BYE)
	bob.respond(p.addr(), bye, 200, "OK")
	if m, isRes := r.next(t).(*sip.Response); !isRes || m.StatusCode != 200 {
		t.Fatalf("late BYE of a call that is up: want its 200 relayed, have %v", m)
	}
	if n := refused.Load(); n != 2 {
		t.Fatalf("refused late: want 2 counted, have %d", n)
	}
	if s := p.stats(); s.Late != 2 {
		t.Fatalf("Stats.Late: want 2, have %d", s.Late)
	}
	bob.quiet(200 * time.Millisecond)
}
