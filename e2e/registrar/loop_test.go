package registrar

import (
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// A REGISTER whose contact is sipvisor itself is refused with the reason,
// and nothing is bound; a request whose next hop is sipvisor itself is
// answered 482 at once: one message in, one out, no 100 Trying first and
// no copy sent round until Max-Forwards runs out.
func TestLoopsAnsweredAtOnce(t *testing.T) {
	t.Parallel()
	s := harness.Start(t, `
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 1
tcp_workers = 1

route {
	if (!mf_process_maxfwd_header(70)) {
		sl_send_reply(483, "Too Many Hops");
		exit;
	}
	if (is_method("REGISTER")) {
		save("location");
		exit;
	}
	# A next hop set by mistake to this server itself: the test's
	# requests name it in their Request-URI.
	$du = $ru;
	if (!t_relay())
		sl_send_reply(500, "Relay Failed");
}
`)
	sip := s.SIPPort("udp")
	p := harness.NewPeer(t)
	m := harness.Register(t, p, sip, "carol", "sip:carol@127.0.0.1:"+strconv.Itoa(sip))
	if m.Status() != 403 || !strings.Contains(m.First, "Loop") {
		t.Fatalf("REGISTER with sipvisor as its contact: want 403 naming the loop, have %q", m.First)
	}
	if bs := s.Bindings("carol"); len(bs) != 0 {
		t.Fatalf("want nothing bound for carol, have %+v", bs)
	}

	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sip}
	for _, method := range []string{"INVITE", "OPTIONS"} {
		branch := "z9hG4bK-loop-" + method
		p.Send(to, method+" sip:dave@"+s.SIPAddr("udp")+" SIP/2.0\r\n"+
			"Via: SIP/2.0/UDP 127.0.0.1:"+strconv.Itoa(p.Port())+";branch="+branch+"\r\n"+
			"Max-Forwards: 70\r\n"+
			"From: <sip:alice@example.test>;tag=a1\r\n"+
			"To: <sip:dave@"+s.SIPAddr("udp")+">\r\n"+
			"Call-ID: "+branch+"@test\r\n"+
			"CSeq: 1 "+method+"\r\n"+
			"Contact: <sip:alice@127.0.0.1:"+strconv.Itoa(p.Port())+">\r\n"+
			"Content-Length: 0\r\n\r\n")
		m, ok := p.Recv(5 * time.Second)
		if !ok || m.Status() != 482 {
			t.Fatalf("%s relayed to sipvisor itself: want 482 as the first and only answer, have %q", method, m.First)
		}
		// Nothing else follows: no 500 from the script, no looped copy.
		if extra, ok := p.Recv(500 * time.Millisecond); ok {
			t.Fatalf("%s: want one answer, have a second: %q", method, extra.First)
		}
	}
	if !strings.Contains(s.Log.String(), "its next hop is this server") {
		t.Errorf("want the loop in the log, have\n%s", harness.Tail(s.Log.String(), 20))
	}
}
