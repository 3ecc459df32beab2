package transport

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// TestRetransmissionsAbsorbed sends an INVITE through the proxy from a Go
// socket, then sends it again: the proxy answers the retransmission with
// its last reply (100, then the 180 the callee sent) and the callee never
// sees the INVITE twice. After the callee's 486, a retransmitted INVITE gets
// the 486 again, and the caller's ACK ends at the proxy, which has ACKed the
// 486 to the callee itself.
// retransmissionProxy is a caller and a callee as raw UDP peers and the
// proxy between them, with two UDP workers (a retransmission must reach the
// worker that holds its transaction, by Call-ID), relaying through the
// supervisor or, with replySockets, from the workers' reply sockets.
func retransmissionProxy(t *testing.T, replySockets bool) (caller, callee *harness.Peer, s *harness.Server) {
	t.Helper()
	caller, callee = harness.NewPeer(t), harness.NewPeer(t)
	extra := "udp_workers = 2\ntcp_workers = 1"
	if replySockets {
		extra += "\nworker_reply_sockets = yes"
	}
	return caller, callee, harness.Start(t, harness.ProxyCfg(callee.Port(), extra))
}

func TestRetransmissionsAbsorbed(t *testing.T) {
	t.Parallel()
	t.Run("through the supervisor", func(t *testing.T) { testRetransmissionsAbsorbed(t, false) })
	// The callee answers the INVITE's source, which is the worker's reply
	// socket: the replies reach the transaction without the front door.
	t.Run("reply sockets", func(t *testing.T) { testRetransmissionsAbsorbed(t, true) })
}

func testRetransmissionsAbsorbed(t *testing.T, replySockets bool) {
	caller, callee, s := retransmissionProxy(t, replySockets)
	defer s.StopDrained()
	sip := s.SIPPort("udp")
	proxy := harness.Local(sip)

	invite := harness.Invite(caller, callee, fmt.Sprintf("retrans-%d", time.Now().UnixNano()), "", 70)

	caller.Send(proxy, invite)
	caller.Expect(5*time.Second, "100 Trying", harness.IsStatus(100))
	inv, _ := callee.Expect(5*time.Second, "the INVITE at the callee", harness.IsMethod("INVITE"))
	if viaPort := inv.From.Port; (viaPort != sip) != replySockets || !strings.Contains(inv.Header("Via"), ":"+strconv.Itoa(viaPort)+";") {
		t.Fatalf("reply sockets %v: want the INVITE from and naming in its Via %s, have it from port %d with Via %q",
			replySockets, map[bool]string{false: "the SIP port", true: "a port of the worker's"}[replySockets], viaPort, inv.Header("Via"))
	}
	callee.Send(inv.From, harness.ReplyTo(inv, 180, "Ringing", "callee1"))
	caller.Expect(5*time.Second, "180 Ringing", harness.IsStatus(180))

	caller.Send(proxy, invite)
	caller.Expect(5*time.Second, "180 Ringing again for the retransmitted INVITE", harness.IsStatus(180))
	// The proxy's own INVITE retransmissions (timer A) stopped at the 180, so
	// anything the callee gets now came from the caller's retransmission.
	if m, ok := callee.Recv(time.Second); ok {
		t.Fatalf("want nothing at the callee after the retransmission, have %s:\n%s", m, m.Raw)
	}

	callee.Send(inv.From, harness.ReplyTo(inv, 486, "Busy Here", "callee1"))
	ack, _ := callee.Expect(5*time.Second, "the proxy's ACK of the 486", harness.IsMethod("ACK"))
	if have := ack.Header("CSeq"); have != "1 ACK" {
		t.Errorf("want CSeq 1 ACK on the hop-by-hop ACK, have %q", have)
	}
	caller.Expect(5*time.Second, "486 Busy Here", harness.IsStatus(486))
	caller.Send(proxy, invite)
	caller.Expect(5*time.Second, "486 again for the retransmitted INVITE", harness.IsStatus(486))

	ackUp := fmt.Sprintf("ACK sip:bob@127.0.0.1:%[2]d SIP/2.0\r\n"+
		"%[3]s\r\n"+
		"Max-Forwards: 70\r\n"+
		"From: %[4]s\r\n"+
		"To: <sip:bob@127.0.0.1:%[2]d>;tag=callee1\r\n"+
		"Call-ID: %[5]s\r\n"+
		"CSeq: 1 ACK\r\n"+
		"Content-Length: 0\r\n\r\n", caller.Port(), callee.Port(),
		strings.Split(invite, "\r\n")[1], harness.HeaderOf(invite, "From"), harness.HeaderOf(invite, "Call-ID"))
	caller.Send(proxy, ackUp)
	if m, ok := callee.Recv(time.Second); ok {
		t.Fatalf("want the caller's ACK of the 486 to end at the proxy, have %s at the callee:\n%s", m, m.Raw)
	}
}

// malformedCfg answers OPTIONS itself and relays everything else to a UAS.
func malformedCfg(uasPort int) string {
	return harness.Sockets0 + `udp_workers = 2
tcp_workers = 1

route {
	if (is_method("OPTIONS")) {
		sl_send_reply(200, "OK");
		exit;
	}
	if (has_totag()) {
		if (!loose_route())
			$du = "sip:127.0.0.1:` + strconv.Itoa(uasPort) + `";
		t_relay();
		exit;
	}
	t_check_trans();
	$du = "sip:127.0.0.1:` + strconv.Itoa(uasPort) + `";
	if (!t_relay()) sl_send_reply(500, "Internal Server Error");
}
`
}

// TestMalformedDatagrams sends datagrams no SIP stack should accept to the
// real server: each is counted by reason at the front door, none stops it,
// and OPTIONS and SIPp calls are served afterwards.
func TestMalformedDatagrams(t *testing.T) {
	t.Parallel()
	s := harness.Start(t, malformedCfg(harness.SIPpUAS(t).Port))
	c := harness.NewPeer(t)
	proxy := harness.Local(s.SIPPort("udp"))

	good := harness.Options(c.Port(), "ok-1", "")
	truncated := good[:strings.Index(good, "Call-ID")]
	noCallID := strings.Replace(good, "Call-ID: ok-1\r\n", "", 1)
	longLine := harness.Options(c.Port(), "long-1", "X-Long: "+strings.Repeat("a", 65000)+"\r\n")
	garbage := make([]byte, 1500)
	for i := range garbage {
		garbage[i] = byte(i*7 + 3)
	}
	cases := []struct {
		name   string
		msg    string
		reason string
	}{
		{"garbage bytes", string(garbage), "bad_start_line"},
		{"truncated headers", truncated, "truncated"},
		{"no Call-ID", noCallID, "no_call_id"},
		{"a 65000-byte header line", longLine, "too_long"},
		{"a NUL in the headers", strings.Replace(good, "probe", "pro\x00be", 1), "nul"},
		{"CSeq method not the method", strings.Replace(good, "1 OPTIONS", "1 INVITE", 1), "cseq_method"},
	}
	for _, tc := range cases {
		// Each reason's series appears with its first datagram.
		before := s.MetricAbsentAs0("sipvisor_frontdoor_malformed_total", `reason="`+tc.reason+`"`)
		c.Send(proxy, tc.msg)
		s.AwaitMetric(before+1, "sipvisor_frontdoor_malformed_total", `reason="`+tc.reason+`"`)
	}

	// The largest datagram UDP carries over IPv4, made of short header lines:
	// the front door accepts it and a worker parses it.
	var pad strings.Builder
	for pad.Len() < 65507-600 {
		pad.WriteString("X-Pad: " + strings.Repeat("p", 90) + "\r\n")
	}
	big := harness.Options(c.Port(), "big-1", pad.String())
	if len(big) > 65507 {
		big = harness.Options(c.Port(), "big-1", pad.String()[:strings.LastIndex(pad.String()[:pad.Len()-(len(big)-65507)], "\r\n")+2])
	}
	c.Send(proxy, big)
	m, _ := c.Expect(10*time.Second, "a reply to a 64 KB OPTIONS", func(m harness.Msg) bool { return m.Status() != 0 })
	if m.Status() != 200 && m.Status() != 400 && m.Status() != 513 {
		t.Errorf("want 200, 400 or 513 for a 64 KB OPTIONS, have %d", m.Status())
	}

	c.Send(proxy, harness.Options(c.Port(), "ok-2", ""))
	c.Expect(10*time.Second, "200 for OPTIONS after the malformed datagrams", harness.IsStatus(200))
	r := harness.RunSIPp(t, 60*time.Second, "-sn", "uac", s.SIPAddr("udp"), "-i", "127.0.0.1",
		"-r", "20", "-m", "20", "-d", "100", "-timeout", "40", "-timeout_error")
	if r.Exit != 0 || r.Successful != 20 || r.Failed != 0 {
		t.Fatalf("want 20 successful calls after the malformed datagrams, have %d/%d (exit %d)\n%s", r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 40))
	}
	for _, g := range s.PS() {
		for _, w := range g.Workers {
			if w.State != "ready" {
				t.Errorf("want every worker ready, have %s worker %d (pid %d) %s", g.Name, w.ID, w.Pid, w.State)
			}
		}
	}
	if v := s.Metric("sipvisor_pool_worker_exits_total"); v != 0 { // every series is there from the start, at 0
		t.Errorf("want no worker exits, have %v\n%s", v, harness.Tail(s.Log.String(), 20))
	}
}

// tcpExchange sends msg on a new TCP connection and returns what the server
// wrote back before it closed the connection or went quiet for a second.
func tcpExchange(t *testing.T, sipPort int, msg string) (reply string, closed bool) {
	t.Helper()
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(sipPort), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	// A server that gives up on the message may close while it is still
	// being written; that is an answer too.
	if _, err := c.Write([]byte(msg)); err != nil {
		return "", true
	}
	var got []byte
	buf := make([]byte, 4096)
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		c.SetReadDeadline(time.Now().Add(time.Second))
		n, err := c.Read(buf)
		got = append(got, buf[:n]...)
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) {
				if strings.Contains(string(got), "\r\n\r\n") {
					return string(got), false
				}
				continue
			}
			return string(got), true
		}
	}
	return string(got), false
}

// A header line of 64 KiB, possible only over TCP, gets no further than the
// TCP worker that reads it: the connection is refused or closed, the worker
// lives on, and the next connection is served.
func TestTCPHeaderLine64KiB(t *testing.T) {
	t.Parallel()
	// Only OPTIONS, which the script answers itself: the callee is never
	// called.
	s := harness.Start(t, malformedCfg(harness.NewPeer(t).Port()))
	sip := s.SIPPort("tcp")
	long := strings.Replace(harness.Options(40000, "tcp-long-1", "X-Long: "+strings.Repeat("a", 64<<10)+"\r\n"), "SIP/2.0/UDP", "SIP/2.0/TCP", 1)
	reply, closed := tcpExchange(t, sip, long)
	if strings.HasPrefix(reply, "SIP/2.0 200") {
		t.Errorf("want a 64 KiB header line refused, have %q", harness.Tail(reply, 1))
	}
	if !closed && !strings.HasPrefix(reply, "SIP/2.0 4") && !strings.HasPrefix(reply, "SIP/2.0 5") {
		t.Errorf("want the connection closed or a 4xx/5xx, have %q and the connection open", reply)
	}
	good := strings.Replace(harness.Options(40000, "tcp-ok-1", ""), "SIP/2.0/UDP", "SIP/2.0/TCP", 1)
	if reply, _ := tcpExchange(t, sip, good); !strings.HasPrefix(reply, "SIP/2.0 200") {
		t.Errorf("want 200 for OPTIONS on a new connection after the long line, have %q\n%s", reply, harness.Tail(s.Log.String(), 20))
	}
	if v := s.Metric("sipvisor_pool_worker_exits_total"); v != 0 { // every series is there from the start, at 0
		t.Errorf("want no worker exits, have %v\n%s", v, harness.Tail(s.Log.String(), 20))
	}
}

// A worker's reply socket is named in the Via of what it relays, so a peer
// learns its address. A new session sent there would skip the front door,
// and with it a suspension: the worker refuses it with a 403 instead. An
// in-dialog request sent there starts nothing and is relayed as usual.
func TestReplySocketTakesNoNewSession(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("its stop waits out a BYE's timer J, 32 s")
	}
	caller, callee := harness.NewPeer(t), harness.NewPeer(t)
	s := harness.Start(t, harness.ProxyCfg(callee.Port(), "udp_workers = 1\ntcp_workers = 1\nworker_reply_sockets = yes"))
	defer s.StopDrained()
	sip := s.SIPPort("udp")
	proxy := harness.Local(sip)
	invite := func(id, to string) string { return harness.Invite(caller, callee, id, to, 70) }

	caller.Send(proxy, invite("direct-first", ""))
	inv, _ := callee.Expect(5*time.Second, "the INVITE at the callee", harness.IsMethod("INVITE"))
	direct := inv.From
	if direct.Port == sip {
		t.Fatalf("want the INVITE relayed from the worker's reply socket, have it from the SIP port")
	}
	callee.Send(direct, harness.ReplyTo(inv, 486, "Busy Here", "callee1"))
	callee.Expect(5*time.Second, "the proxy's ACK of the 486", harness.IsMethod("ACK"))
	caller.Expect(5*time.Second, "486 Busy Here", harness.IsStatus(486))

	if out, err := s.Ctl("suspend"); err != nil {
		t.Fatalf("ctl suspend: %v\n%s", err, out)
	}
	caller.Send(proxy, invite("direct-door", ""))
	caller.Expect(5*time.Second, "503 from the suspended door", harness.IsStatus(503))

	caller.Send(direct, invite("direct-new", ""))
	m, ok := caller.Recv(5 * time.Second)
	if !ok || m.Status() != 403 {
		t.Fatalf("want a 403 for a new INVITE sent to the reply socket %v, have %q", direct, m.First)
	}
	// Its ACK, which carries the 403's tag, ends at the worker too.
	caller.Send(direct, ackFor(invite("direct-new", ""), m))
	if m, ok := callee.Recv(time.Second); ok {
		t.Fatalf("want nothing relayed for the INVITE sent to the reply socket or its ACK, have %s at the callee", m)
	}

	// The drain at the end waits out the BYE's timer J (32 s), as it must:
	// a retransmitted BYE would otherwise be relayed again by another worker.
	bye := strings.Replace(strings.Replace(invite("direct-bye", ";tag=callee1"), "INVITE sip:", "BYE sip:", 1),
		"CSeq: 1 INVITE", "CSeq: 2 BYE", 1)
	caller.Send(direct, bye)
	b, _ := callee.Expect(5*time.Second, "the in-dialog BYE sent to the reply socket, relayed", harness.IsMethod("BYE"))
	callee.Send(b.From, harness.ReplyTo(b, 200, "OK", ""))
	caller.Expect(5*time.Second, "200 OK to the BYE", harness.IsStatus(200))
}

// ackFor is the ACK of a non-2xx final response to invite: same branch and
// From, the response's To (with its tag), CSeq method ACK.
func ackFor(invite string, resp harness.Msg) string {
	first, _, _ := strings.Cut(invite, "\r\n")
	ruri := strings.Fields(first)[1]
	cseq := strings.Fields(harness.HeaderOf(invite, "CSeq"))[0]
	return "ACK " + ruri + " SIP/2.0\r\n" +
		"Via: " + harness.HeaderOf(invite, "Via") + "\r\n" +
		"Max-Forwards: 70\r\n" +
		"From: " + harness.HeaderOf(invite, "From") + "\r\n" +
		"To: " + resp.Header("To") + "\r\n" +
		"Call-ID: " + harness.HeaderOf(invite, "Call-ID") + "\r\n" +
		"CSeq: " + cseq + " ACK\r\n" +
		"Content-Length: 0\r\n\r\n"
}

// The ACK of a reply the script sent statelessly (sl_send_reply) ends at
// the worker, as Kamailio's sl module filters it: the script would
// otherwise take it, with its To tag, for an in-dialog request and relay it
// to a callee that never saw the INVITE.
func TestAckOfStatelessReplyEndsAtWorker(t *testing.T) {
	t.Parallel()
	caller, callee := harness.NewPeer(t), harness.NewPeer(t)
	s := harness.Start(t, harness.ProxyCfg(callee.Port(), "udp_workers = 1\ntcp_workers = 1"))
	defer s.Stop()
	proxy := harness.Local(s.SIPPort("udp"))
	// Max-Forwards 0: the script answers 483 with sl_send_reply.
	inv483 := harness.Invite(caller, callee, "sl-483", "", 0)
	caller.Send(proxy, inv483)
	r, _ := caller.Expect(5*time.Second, "483 Too Many Hops", harness.IsStatus(483))
	// An ACK with someone else's tag is in-dialog for the script, which
	// relays it: the callee is reachable. (Nothing here leaves a
	// transaction, so the server stops at once.)
	ack := ackFor(inv483, r)
	caller.Send(proxy, strings.Replace(ack, r.Header("To"), "<sip:bob@127.0.0.1>;tag=callee1", 1))
	callee.Expect(5*time.Second, "the ACK with the callee's tag, relayed", harness.IsMethod("ACK"))
	caller.Send(proxy, ack)
	if m, ok := callee.Recv(time.Second); ok {
		t.Fatalf("want the ACK of the 483 to end at the worker, have %s at the callee:\n%s", m, m.Raw)
	}
}

// TestAnsweredCallAbsorbsRetransmissions runs a call answered 200 through
// the real server and repeats what a lossy network repeats while its
// transactions linger: the caller's INVITE after the 200 goes nowhere
// (RFC 6026), the callee's 200 again reaches the caller, the ACK of the
// 200 reaches the callee, the caller's BYE again gets the same 200 and
// does not reach the callee, and the callee's 200 to the BYE again reaches
// the caller.
func TestAnsweredCallAbsorbsRetransmissions(t *testing.T) {
	t.Parallel()
	t.Run("through the supervisor", func(t *testing.T) { testAnsweredCallAbsorbs(t, false) })
	t.Run("reply sockets", func(t *testing.T) { testAnsweredCallAbsorbs(t, true) })
}

func testAnsweredCallAbsorbs(t *testing.T, replySockets bool) {
	caller, callee, s := retransmissionProxy(t, replySockets)
	defer s.StopDrained()
	proxy := harness.Local(s.SIPPort("udp"))
	nothing := func(p *harness.Peer, what string) {
		t.Helper()
		if m, ok := p.Recv(time.Second); ok {
			t.Fatalf("%s: want nothing more, have %s:\n%s", what, m, m.Raw)
		}
	}

	id := fmt.Sprintf("settled-%d", time.Now().UnixNano())
	invite := harness.Invite(caller, callee, id, "", 70)
	caller.Send(proxy, invite)
	caller.Expect(5*time.Second, "100 Trying", harness.IsStatus(100))
	inv, _ := callee.Expect(5*time.Second, "the INVITE at the callee", harness.IsMethod("INVITE"))
	ok := harness.ReplyTo(inv, 200, "OK", "callee1")
	callee.Send(inv.From, ok)
	caller.Expect(5*time.Second, "200 OK", harness.IsStatus(200))

	caller.Send(proxy, invite)
	nothing(callee, "the INVITE again after its 200")
	nothing(caller, "the INVITE again after its 200")
	callee.Send(inv.From, ok)
	caller.Expect(5*time.Second, "the callee's 200 again", harness.IsStatus(200))

	// In the dialog, as the caller's Via names it; the proxy's script
	// relays what has a To tag and no Route to the callee.
	inDialog := func(method string, cseq int) string {
		return strings.NewReplacer("INVITE sip:", method+" sip:", "CSeq: 1 INVITE", fmt.Sprintf("CSeq: %d %s", cseq, method),
			"branch=z9hG4bK-"+id, "branch=z9hG4bK-"+method+id).Replace(harness.Invite(caller, callee, id, ";tag=callee1", 70))
	}
	caller.Send(proxy, inDialog("ACK", 1))
	callee.Expect(5*time.Second, "the ACK of the 200", harness.IsMethod("ACK"))

	bye := inDialog("BYE", 2)
	caller.Send(proxy, bye)
	b, _ := callee.Expect(5*time.Second, "the BYE at the callee", harness.IsMethod("BYE"))
	byeOK := harness.ReplyTo(b, 200, "OK", "")
	callee.Send(b.From, byeOK)
	first, _ := caller.Expect(5*time.Second, "200 OK to the BYE", harness.IsStatus(200))
	caller.Send(proxy, bye)
	again, _ := caller.Expect(5*time.Second, "the same 200 for the BYE again", harness.IsStatus(200))
	if again.Raw != first.Raw {
		t.Fatalf("want the BYE again answered with the same 200, have\n%s\nthen\n%s", first.Raw, again.Raw)
	}
	nothing(callee, "the BYE again")
	callee.Send(b.From, byeOK)
	caller.Expect(5*time.Second, "the callee's 200 to the BYE again", harness.IsStatus(200))
}
