package security

import (
	"fmt"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/icholy/digest"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// invite is an INVITE from p to ruri, From from, with the Call-ID and an
// optional Proxy-Authorization.
func invite(p *harness.Peer, ruri, from, callID string, cseq int, auth string) string {
	msg := fmt.Sprintf("INVITE %s SIP/2.0\r\n"+
		"Via: SIP/2.0/UDP 127.0.0.1:%d;branch=z9hG4bK-%s-%d\r\n"+
		"Max-Forwards: 70\r\n"+
		"From: <%s>;tag=caller\r\n"+
		"To: <%s>\r\n"+
		"Call-ID: %s\r\n"+
		"CSeq: %d INVITE\r\n"+
		"Contact: <sip:caller@127.0.0.1:%d>\r\n", ruri, p.Port(), callID, cseq, from, ruri, callID, cseq, p.Port())
	if auth != "" {
		msg += "Proxy-Authorization: " + auth + "\r\n"
	}
	return msg + "Content-Length: 0\r\n\r\n"
}

// ack is the ACK of a final failure m to the INVITE invite, as its
// caller sends it: same branch, the To of the answer.
func ack(invite string, m harness.Msg) string {
	var b strings.Builder
	for i, l := range strings.Split(strings.TrimSuffix(invite, "\r\n\r\n"), "\r\n") {
		name, _, _ := strings.Cut(l, ":")
		switch {
		case i == 0:
			b.WriteString("ACK" + strings.TrimPrefix(l, "INVITE") + "\r\n")
		case strings.EqualFold(name, "To"):
			b.WriteString("To: " + m.Header("To") + "\r\n")
		case strings.EqualFold(name, "CSeq"):
			n, _, _ := strings.Cut(strings.TrimSpace(l[len(name)+1:]), " ")
			b.WriteString("CSeq: " + n + " ACK\r\n")
		case strings.EqualFold(name, "Via"), strings.EqualFold(name, "From"), strings.EqualFold(name, "Call-ID"), strings.EqualFold(name, "Max-Forwards"):
			b.WriteString(l + "\r\n")
		}
	}
	return b.String() + "Content-Length: 0\r\n\r\n"
}

// The built-in config is no open relay: an INVITE from a stranger to a
// target that is not ours gets 403 and nothing leaves sipvisor, while the
// same INVITE from one of our users, once authenticated, is relayed. The
// target listens on 127.0.0.2, the test's own socket: the first INVITE it
// receives must be the authenticated one.
func TestNoOpenRelay(t *testing.T) {
	t.Parallel()
	s := harness.Start(t, harness.DefaultCfg0(t))
	home := s.SIPAddr("udp")
	// The realm of the server's own address: its IP, without the port.
	if out, err := s.Ctl("user", "add", "bob@127.0.0.1", "s3cret"); err != nil {
		t.Fatalf("ctl user add: %v: %s", err, out)
	}
	victim, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		t.Skipf("no 127.0.0.2 to listen on: %v", err)
	}
	defer victim.Close()
	target := fmt.Sprintf("sip:victim@%s", victim.LocalAddr())
	to, _ := net.ResolveUDPAddr("udp", home)
	caller := harness.NewPeer(t)

	stranger := "relay-" + harness.NewID()
	inv := invite(caller, target, "sip:attacker@evil.example", stranger, 1, "")
	caller.Send(to, inv)
	m, _ := caller.Expect(5*time.Second, "a final answer to the stranger's INVITE", func(m harness.Msg) bool { return m.Status() >= 200 })
	if m.First != "SIP/2.0 403 Relay Forbidden" {
		t.Fatalf("a stranger's INVITE to another domain: want 403 Relay Forbidden, have %q", m.First)
	}
	caller.Send(to, ack(inv, m))

	// One of our users: challenged, then relayed with its credentials.
	ours := "relay-" + harness.NewID()
	from := "sip:bob@" + home
	inv = invite(caller, target, from, ours, 1, "")
	caller.Send(to, inv)
	m, _ = caller.Expect(5*time.Second, "a 407 to our user's INVITE", func(m harness.Msg) bool { return m.Status() >= 200 })
	if m.Status() != 407 {
		t.Fatalf("our user's INVITE without credentials: want 407, have %q", m.First)
	}
	caller.Send(to, ack(inv, m))
	var cred string
	for _, l := range m.Lines() {
		name, v, _ := strings.Cut(l, ":")
		if !strings.EqualFold(name, "Proxy-Authenticate") {
			continue
		}
		ch, err := digest.ParseChallenge(strings.TrimSpace(v))
		if err != nil || ch.Algorithm != "MD5" {
			continue
		}
		cr, err := digest.Digest(ch, digest.Options{Method: "INVITE", URI: target, Username: "bob", Password: "s3cret", Count: 1})
		if err != nil {
			t.Fatal(err)
		}
		cred = cr.String()
	}
	if cred == "" {
		t.Fatalf("no MD5 challenge in %s", m.Raw)
	}
	inv = invite(caller, target, from, ours, 2, cred)
	caller.Send(to, inv)

	buf := make([]byte, 65536)
	victim.SetReadDeadline(time.Now().Add(10 * time.Second))
	n, proxy, err := victim.ReadFromUDP(buf)
	if err != nil {
		t.Fatalf("the authenticated INVITE did not arrive at %s: %v", target, err)
	}
	got := string(buf[:n])
	if !strings.HasPrefix(got, "INVITE "+target) || !strings.Contains(got, ours) {
		t.Fatalf("want the authenticated INVITE first at the target, have\n%s", got)
	}
	if strings.Contains(got, "Proxy-Authorization") {
		t.Errorf("the relayed INVITE still carries the caller's credentials:\n%s", got)
	}
	// The callee is busy: the call ends, and with it every transaction
	// the server holds, so that it stops at once.
	first, _, _ := strings.Cut(got, "\r\n")
	if _, err := victim.WriteToUDP([]byte(harness.ReplyTo(harness.Msg{Raw: got, First: first}, 486, "Busy Here", "callee")), proxy); err != nil {
		t.Fatal(err)
	}
	m, _ = caller.Expect(10*time.Second, "the callee's 486", harness.IsStatus(486))
	caller.Send(to, ack(inv, m))
}
