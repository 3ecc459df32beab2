package e2e

import (
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
)

// registrarCfg is the built-in registrar and stateful proxy script on the
// given port, with one change: SIPp's UAS does not echo Record-Route, so its
// caller sends ACK and BYE back here with this server's address as the
// Request-URI and no Route header. Such a request is looked up in the
// location table again, as the INVITE was, instead of being refused with
// 404 as config/default.cfg does.
func registrarCfg(sipPort int) string {
	return `
socket = udp:127.0.0.1:` + strconv.Itoa(sipPort) + `
socket = tcp:127.0.0.1:` + strconv.Itoa(sipPort) + `
http_listen = 127.0.0.1:HTTP_PORT
udp_workers = 2
tcp_workers = 1

route {
	if (!mf_process_maxfwd_header(10)) {
		sl_send_reply(483, "Too Many Hops");
		exit;
	}
	if (has_totag()) {
		if (!loose_route()) {
			if (!is_myself($ru) || !lookup("location")) {
				sl_send_reply(404, "Not Here");
				exit;
			}
		}
		route(relay);
	}
	if (is_method("CANCEL")) {
		if (t_check_trans())
			t_relay();
		exit;
	}
	t_check_trans();
	if (is_method("REGISTER")) {
		save("location");
		exit;
	}
	if (is_method("INVITE"))
		record_route();
	if (!is_myself($ru))
		route(relay);
	if (!lookup("location")) {
		sl_send_reply(404, "Not Found");
		exit;
	}
	route(relay);
}

route[relay] {
	if (!t_relay())
		sl_send_reply(500, "Internal Server Error");
	exit;
}
`
}

// A user registers with SIPp's register scenario; calls to that user then
// reach the SIPp UAS at the registered contact, and `ctl ul show` lists the
// binding. A call to a user who never registered gets 404.
func TestRegisterThenInvite(t *testing.T) {
	sip, uas, uac := freePort(t), freePort(t), freePort(t)
	s := startServer(t, registrarCfg(sip))
	sippUAS(t, uas)
	target := "127.0.0.1:" + strconv.Itoa(sip)

	r := runSIPp(t, 30*time.Second, "-sn", "uac", target, "-s", "alice", "-i", "127.0.0.1", "-p", strconv.Itoa(uac),
		"-m", "1", "-timeout", "20", "-timeout_error")
	if r.Successful != 0 || r.Failed != 1 {
		t.Fatalf("want the call to an unregistered user to fail, have %d successful, %d failed\n%s", r.Successful, r.Failed, tail(r.Out, 40))
	}
	if !strings.Contains(r.Out, "404") {
		t.Errorf("want a 404 for an unregistered user on SIPp's screen\n%s", tail(r.Out, 60))
	}

	r = runSIPp(t, 30*time.Second, "-sf", "testdata/register.xml", target, "-s", "alice", "-key", "contact_port", strconv.Itoa(uas),
		"-i", "127.0.0.1", "-p", strconv.Itoa(uac), "-m", "1", "-timeout", "20", "-timeout_error")
	if r.Exit != 0 || r.Successful != 1 || r.Failed != 0 {
		t.Fatalf("want 1 successful registration, have %d/%d (exit %d)\n%s", r.Successful, r.Failed, r.Exit, tail(r.Out, 40))
	}

	out, err := s.ctl("ul", "show")
	if err != nil {
		t.Fatalf("ctl ul show: %v: %s", err, out)
	}
	contact := "sip:alice@127.0.0.1:" + strconv.Itoa(uas)
	if !strings.Contains(out, "alice") || !strings.Contains(out, contact) {
		t.Errorf("want ul show to list alice at %s, have\n%s", contact, out)
	}

	r = runSIPp(t, 60*time.Second, "-sn", "uac", target, "-s", "alice", "-i", "127.0.0.1", "-p", strconv.Itoa(uac),
		"-r", "10", "-m", "20", "-d", "200", "-timeout", "40", "-timeout_error")
	if r.Exit != 0 || r.Successful != 20 || r.Failed != 0 {
		t.Fatalf("want 20 calls to the registered user to succeed, have %d/%d (exit %d)\n%s\n%s",
			r.Successful, r.Failed, r.Exit, tail(r.Out, 40), tail(s.log.String(), 20))
	}
}

// sipMsg is a SIP message read off a socket, split just enough for tests.
type sipMsg struct {
	raw   string
	first string
	from  *net.UDPAddr
}

// header returns the value of the first header called name (any case).
func (m sipMsg) header(name string) string {
	for _, line := range m.lines()[1:] {
		if i := strings.IndexByte(line, ':'); i > 0 && strings.EqualFold(strings.TrimSpace(line[:i]), name) {
			return strings.TrimSpace(line[i+1:])
		}
	}
	return ""
}

func (m sipMsg) lines() []string {
	head, _, _ := strings.Cut(m.raw, "\r\n\r\n")
	return strings.Split(head, "\r\n")
}

// status is the code of a response, 0 for a request.
func (m sipMsg) status() int {
	f := strings.Fields(m.first)
	if len(f) < 2 || f[0] != "SIP/2.0" {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// method is the method of a request, "" for a response.
func (m sipMsg) method() string {
	if m.status() != 0 {
		return ""
	}
	f := strings.Fields(m.first)
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func (m sipMsg) String() string {
	if m.status() != 0 {
		return strconv.Itoa(m.status())
	}
	return m.method()
}

// peer is a UDP endpoint of a test: a caller or a callee written in Go, so
// that the test sees every datagram exactly as it was sent.
type peer struct {
	t *testing.T
	c *net.UDPConn
}

func newPeer(t *testing.T) *peer {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &peer{t: t, c: c}
}

func (p *peer) port() int { return p.c.LocalAddr().(*net.UDPAddr).Port }

func (p *peer) send(to *net.UDPAddr, msg string) {
	p.t.Helper()
	if _, err := p.c.WriteToUDP([]byte(msg), to); err != nil {
		p.t.Fatalf("send to %v: %v", to, err)
	}
}

// recv reads one datagram, or reports ok = false at the deadline.
func (p *peer) recv(within time.Duration) (sipMsg, bool) {
	p.t.Helper()
	buf := make([]byte, 65536)
	p.c.SetReadDeadline(time.Now().Add(within))
	n, from, err := p.c.ReadFromUDP(buf)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return sipMsg{}, false
		}
		p.t.Fatalf("recv: %v", err)
	}
	raw := string(buf[:n])
	first, _, _ := strings.Cut(raw, "\r\n")
	return sipMsg{raw: raw, first: first, from: from}, true
}

// expect reads until a message for which want is true, failing the test at
// the deadline. Messages it skips are returned too, in order.
func (p *peer) expect(within time.Duration, what string, want func(sipMsg) bool) (sipMsg, []sipMsg) {
	p.t.Helper()
	deadline := time.Now().Add(within)
	var skipped []sipMsg
	for {
		left := time.Until(deadline)
		if left <= 0 {
			p.t.Fatalf("want %s within %v, have %v", what, within, skipped)
		}
		m, ok := p.recv(left)
		if !ok {
			continue
		}
		if want(m) {
			return m, skipped
		}
		skipped = append(skipped, m)
	}
}

func isStatus(code int) func(sipMsg) bool {
	return func(m sipMsg) bool { return m.status() == code }
}

func isMethod(method string) func(sipMsg) bool {
	return func(m sipMsg) bool { return m.method() == method }
}

// replyTo builds a response to req as a UAS does: every Via, From, To with
// the given tag, Call-ID, CSeq and Record-Route copied.
func replyTo(req sipMsg, code int, reason, toTag string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "SIP/2.0 %d %s\r\n", code, reason)
	for _, line := range req.lines()[1:] {
		name, _, _ := strings.Cut(line, ":")
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "via", "v", "from", "f", "call-id", "i", "cseq", "record-route":
			b.WriteString(line + "\r\n")
		case "to", "t":
			if toTag != "" && !strings.Contains(line, ";tag=") {
				line += ";tag=" + toTag
			}
			b.WriteString(line + "\r\n")
		}
	}
	b.WriteString("Content-Length: 0\r\n\r\n")
	return b.String()
}

// TestRetransmissionsAbsorbed sends an INVITE through the proxy from a Go
// socket, then sends it again: the proxy answers the retransmission with
// its last reply (100, then the 180 the callee sent) and the callee never
// sees the INVITE twice. After the callee's 486, a retransmitted INVITE gets
// the 486 again, and the caller's ACK ends at the proxy, which has ACKed the
// 486 to the callee itself.
func TestRetransmissionsAbsorbed(t *testing.T) {
	t.Run("through the supervisor", func(t *testing.T) { testRetransmissionsAbsorbed(t, false) })
	// The callee answers the INVITE's source, which is the worker's reply
	// socket: the replies reach the transaction without the front door.
	t.Run("reply sockets", func(t *testing.T) { testRetransmissionsAbsorbed(t, true) })
}

func testRetransmissionsAbsorbed(t *testing.T, replySockets bool) {
	sip := freePort(t)
	caller, callee := newPeer(t), newPeer(t)
	// Two workers: the retransmissions must reach the worker that holds the
	// transaction, by Call-ID.
	extra := "udp_workers = 2\ntcp_workers = 1"
	if replySockets {
		extra += "\nworker_reply_sockets = yes"
	}
	s := startServer(t, proxyCfg(sip, callee.port(), extra))
	defer s.stopDrained()
	proxy := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sip}

	invite := fmt.Sprintf("INVITE sip:bob@127.0.0.1:%[2]d SIP/2.0\r\n"+
		"Via: SIP/2.0/UDP 127.0.0.1:%[1]d;branch=z9hG4bK-retrans-%[3]d\r\n"+
		"Max-Forwards: 70\r\n"+
		"From: <sip:alice@127.0.0.1:%[1]d>;tag=caller%[3]d\r\n"+
		"To: <sip:bob@127.0.0.1:%[2]d>\r\n"+
		"Call-ID: retrans-%[3]d@127.0.0.1\r\n"+
		"CSeq: 1 INVITE\r\n"+
		"Contact: <sip:alice@127.0.0.1:%[1]d>\r\n"+
		"Content-Length: 0\r\n\r\n", caller.port(), callee.port(), time.Now().UnixNano())

	caller.send(proxy, invite)
	caller.expect(5*time.Second, "100 Trying", isStatus(100))
	inv, _ := callee.expect(5*time.Second, "the INVITE at the callee", isMethod("INVITE"))
	if viaPort := inv.from.Port; (viaPort != sip) != replySockets || !strings.Contains(inv.header("Via"), ":"+strconv.Itoa(viaPort)+";") {
		t.Fatalf("reply sockets %v: want the INVITE from and naming in its Via %s, have it from port %d with Via %q",
			replySockets, map[bool]string{false: "the SIP port", true: "a port of the worker's"}[replySockets], viaPort, inv.header("Via"))
	}
	callee.send(inv.from, replyTo(inv, 180, "Ringing", "callee1"))
	caller.expect(5*time.Second, "180 Ringing", isStatus(180))

	caller.send(proxy, invite)
	caller.expect(5*time.Second, "180 Ringing again for the retransmitted INVITE", isStatus(180))
	// The proxy's own INVITE retransmissions (timer A) stopped at the 180, so
	// anything the callee gets now came from the caller's retransmission.
	if m, ok := callee.recv(time.Second); ok {
		t.Fatalf("want nothing at the callee after the retransmission, have %s:\n%s", m, m.raw)
	}

	callee.send(inv.from, replyTo(inv, 486, "Busy Here", "callee1"))
	ack, _ := callee.expect(5*time.Second, "the proxy's ACK of the 486", isMethod("ACK"))
	if have := ack.header("CSeq"); have != "1 ACK" {
		t.Errorf("want CSeq 1 ACK on the hop-by-hop ACK, have %q", have)
	}
	caller.expect(5*time.Second, "486 Busy Here", isStatus(486))
	caller.send(proxy, invite)
	caller.expect(5*time.Second, "486 again for the retransmitted INVITE", isStatus(486))

	ackUp := fmt.Sprintf("ACK sip:bob@127.0.0.1:%[2]d SIP/2.0\r\n"+
		"%[3]s\r\n"+
		"Max-Forwards: 70\r\n"+
		"From: %[4]s\r\n"+
		"To: <sip:bob@127.0.0.1:%[2]d>;tag=callee1\r\n"+
		"Call-ID: %[5]s\r\n"+
		"CSeq: 1 ACK\r\n"+
		"Content-Length: 0\r\n\r\n", caller.port(), callee.port(),
		strings.Split(invite, "\r\n")[1], headerOf(invite, "From"), headerOf(invite, "Call-ID"))
	caller.send(proxy, ackUp)
	if m, ok := callee.recv(time.Second); ok {
		t.Fatalf("want the caller's ACK of the 486 to end at the proxy, have %s at the callee:\n%s", m, m.raw)
	}
}

func headerOf(msg, name string) string {
	first, _, _ := strings.Cut(msg, "\r\n")
	return sipMsg{raw: msg, first: first}.header(name)
}

// malformedCfg answers OPTIONS itself and relays everything else to a UAS.
func malformedCfg(sipPort, uasPort int) string {
	return `
socket = udp:127.0.0.1:` + strconv.Itoa(sipPort) + `
socket = tcp:127.0.0.1:` + strconv.Itoa(sipPort) + `
http_listen = 127.0.0.1:HTTP_PORT
udp_workers = 2
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

func options(port int, callID string, extra string) string {
	return fmt.Sprintf("OPTIONS sip:127.0.0.1 SIP/2.0\r\n"+
		"Via: SIP/2.0/UDP 127.0.0.1:%[1]d;branch=z9hG4bK-%[2]s\r\n"+
		"Max-Forwards: 70\r\n"+
		"From: <sip:probe@127.0.0.1:%[1]d>;tag=%[2]s\r\n"+
		"To: <sip:127.0.0.1>\r\n"+
		"Call-ID: %[2]s\r\n"+
		"CSeq: 1 OPTIONS\r\n"+
		"%[3]s"+
		"Content-Length: 0\r\n\r\n", port, callID, extra)
}

// TestMalformedDatagrams sends datagrams no SIP stack should accept to the
// real server: each is counted by reason at the front door, none stops it,
// and OPTIONS and SIPp calls are served afterwards.
func TestMalformedDatagrams(t *testing.T) {
	sip, uas, uac := freePort(t), freePort(t), freePort(t)
	s := startServer(t, malformedCfg(sip, uas))
	sippUAS(t, uas)
	c := newPeer(t)
	proxy := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sip}

	good := options(c.port(), "ok-1", "")
	truncated := good[:strings.Index(good, "Call-ID")]
	noCallID := strings.Replace(good, "Call-ID: ok-1\r\n", "", 1)
	longLine := options(c.port(), "long-1", "X-Long: "+strings.Repeat("a", 65000)+"\r\n")
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
		before := s.metric("sipvisor_frontdoor_malformed_total", `reason="`+tc.reason+`"`)
		c.send(proxy, tc.msg)
		deadline := time.Now().Add(10 * time.Second)
		for s.metric("sipvisor_frontdoor_malformed_total", `reason="`+tc.reason+`"`) != before+1 {
			if time.Now().After(deadline) {
				t.Fatalf("%s: want sipvisor_frontdoor_malformed_total{reason=%q} %v, have %v", tc.name, tc.reason,
					before+1, s.metric("sipvisor_frontdoor_malformed_total", `reason="`+tc.reason+`"`))
			}
			time.Sleep(20 * time.Millisecond)
		}
	}

	// The largest datagram UDP carries over IPv4, made of short header lines:
	// the front door accepts it and a worker parses it.
	var pad strings.Builder
	for pad.Len() < 65507-600 {
		pad.WriteString("X-Pad: " + strings.Repeat("p", 90) + "\r\n")
	}
	big := options(c.port(), "big-1", pad.String())
	if len(big) > 65507 {
		big = options(c.port(), "big-1", pad.String()[:strings.LastIndex(pad.String()[:pad.Len()-(len(big)-65507)], "\r\n")+2])
	}
	c.send(proxy, big)
	m, _ := c.expect(10*time.Second, "a reply to a 64 KB OPTIONS", func(m sipMsg) bool { return m.status() != 0 })
	if m.status() != 200 && m.status() != 400 && m.status() != 513 {
		t.Errorf("want 200, 400 or 513 for a 64 KB OPTIONS, have %d", m.status())
	}

	c.send(proxy, options(c.port(), "ok-2", ""))
	c.expect(10*time.Second, "200 for OPTIONS after the malformed datagrams", isStatus(200))
	r := runSIPp(t, 60*time.Second, "-sn", "uac", "127.0.0.1:"+strconv.Itoa(sip), "-i", "127.0.0.1", "-p", strconv.Itoa(uac),
		"-r", "20", "-m", "20", "-d", "100", "-timeout", "40", "-timeout_error")
	if r.Exit != 0 || r.Successful != 20 || r.Failed != 0 {
		t.Fatalf("want 20 successful calls after the malformed datagrams, have %d/%d (exit %d)\n%s", r.Successful, r.Failed, r.Exit, tail(r.Out, 40))
	}
	for _, g := range s.ps() {
		for _, w := range g.Workers {
			if w.State != "ready" {
				t.Errorf("want every worker ready, have %s worker %d (pid %d) %s", g.Name, w.ID, w.Pid, w.State)
			}
		}
	}
	if v := s.metric("sipvisor_pool_worker_exits_total"); v != 0 {
		t.Errorf("want no worker exits, have %v\n%s", v, tail(s.log.String(), 20))
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
	sip, uas := freePort(t), freePort(t)
	s := startServer(t, malformedCfg(sip, uas))
	long := strings.Replace(options(40000, "tcp-long-1", "X-Long: "+strings.Repeat("a", 64<<10)+"\r\n"), "SIP/2.0/UDP", "SIP/2.0/TCP", 1)
	reply, closed := tcpExchange(t, sip, long)
	if strings.HasPrefix(reply, "SIP/2.0 200") {
		t.Errorf("want a 64 KiB header line refused, have %q", tail(reply, 1))
	}
	if !closed && !strings.HasPrefix(reply, "SIP/2.0 4") && !strings.HasPrefix(reply, "SIP/2.0 5") {
		t.Errorf("want the connection closed or a 4xx/5xx, have %q and the connection open", reply)
	}
	good := strings.Replace(options(40000, "tcp-ok-1", ""), "SIP/2.0/UDP", "SIP/2.0/TCP", 1)
	if reply, _ := tcpExchange(t, sip, good); !strings.HasPrefix(reply, "SIP/2.0 200") {
		t.Errorf("want 200 for OPTIONS on a new connection after the long line, have %q\n%s", reply, tail(s.log.String(), 20))
	}
	if v := s.metric("sipvisor_pool_worker_exits_total"); v != 0 {
		t.Errorf("want no worker exits, have %v\n%s", v, tail(s.log.String(), 20))
	}
}

// A worker's reply socket is named in the Via of what it relays, so a peer
// learns its address. A new session sent there would skip the front door,
// and with it a suspension: the worker refuses it with a 403 instead. An
// in-dialog request sent there starts nothing and is relayed as usual.
func TestReplySocketTakesNoNewSession(t *testing.T) {
	sip := freePort(t)
	caller, callee := newPeer(t), newPeer(t)
	s := startServer(t, proxyCfg(sip, callee.port(), "udp_workers = 1\ntcp_workers = 1\nworker_reply_sockets = yes"))
	defer s.stopDrained()
	proxy := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sip}
	invite := func(id, to string) string { return testInvite(caller, callee, id, to, 70) }

	caller.send(proxy, invite("direct-first", ""))
	inv, _ := callee.expect(5*time.Second, "the INVITE at the callee", isMethod("INVITE"))
	direct := inv.from
	if direct.Port == sip {
		t.Fatalf("want the INVITE relayed from the worker's reply socket, have it from the SIP port")
	}
	callee.send(direct, replyTo(inv, 486, "Busy Here", "callee1"))
	callee.expect(5*time.Second, "the proxy's ACK of the 486", isMethod("ACK"))
	caller.expect(5*time.Second, "486 Busy Here", isStatus(486))

	if out, err := s.ctl("suspend"); err != nil {
		t.Fatalf("ctl suspend: %v\n%s", err, out)
	}
	caller.send(proxy, invite("direct-door", ""))
	caller.expect(5*time.Second, "503 from the suspended door", isStatus(503))

	caller.send(direct, invite("direct-new", ""))
	m, ok := caller.recv(5 * time.Second)
	if !ok || m.status() != 403 {
		t.Fatalf("want a 403 for a new INVITE sent to the reply socket %v, have %q", direct, m.first)
	}
	// Its ACK, which carries the 403's tag, ends at the worker too.
	caller.send(direct, ackFor(invite("direct-new", ""), m))
	if m, ok := callee.recv(time.Second); ok {
		t.Fatalf("want nothing relayed for the INVITE sent to the reply socket or its ACK, have %s at the callee", m)
	}

	// The drain at the end waits out the BYE's timer J (32 s), as it must:
	// a retransmitted BYE would otherwise be relayed again by another worker.
	bye := strings.Replace(strings.Replace(invite("direct-bye", ";tag=callee1"), "INVITE sip:", "BYE sip:", 1),
		"CSeq: 1 INVITE", "CSeq: 2 BYE", 1)
	caller.send(direct, bye)
	b, _ := callee.expect(5*time.Second, "the in-dialog BYE sent to the reply socket, relayed", isMethod("BYE"))
	callee.send(b.from, replyTo(b, 200, "OK", ""))
	caller.expect(5*time.Second, "200 OK to the BYE", isStatus(200))
}

// testInvite is an INVITE from caller to callee, its Call-ID and branch
// made of id, its To given a tag when to is ";tag=...".
func testInvite(caller, callee *peer, id, to string, maxForwards int) string {
	return fmt.Sprintf("INVITE sip:bob@127.0.0.1:%[2]d SIP/2.0\r\n"+
		"Via: SIP/2.0/UDP 127.0.0.1:%[1]d;branch=z9hG4bK-%[3]s\r\n"+
		"Max-Forwards: %[5]d\r\n"+
		"From: <sip:alice@127.0.0.1:%[1]d>;tag=caller\r\n"+
		"To: <sip:bob@127.0.0.1:%[2]d>%[4]s\r\n"+
		"Call-ID: %[3]s@127.0.0.1\r\n"+
		"CSeq: 1 INVITE\r\n"+
		"Contact: <sip:alice@127.0.0.1:%[1]d>\r\n"+
		"Content-Length: 0\r\n\r\n", caller.port(), callee.port(), id, to, maxForwards)
}

// ackFor is the ACK of a non-2xx final response to invite: same branch and
// From, the response's To (with its tag), CSeq method ACK.
func ackFor(invite string, resp sipMsg) string {
	first, _, _ := strings.Cut(invite, "\r\n")
	ruri := strings.Fields(first)[1]
	cseq := strings.Fields(headerOf(invite, "CSeq"))[0]
	return "ACK " + ruri + " SIP/2.0\r\n" +
		"Via: " + headerOf(invite, "Via") + "\r\n" +
		"Max-Forwards: 70\r\n" +
		"From: " + headerOf(invite, "From") + "\r\n" +
		"To: " + resp.header("To") + "\r\n" +
		"Call-ID: " + headerOf(invite, "Call-ID") + "\r\n" +
		"CSeq: " + cseq + " ACK\r\n" +
		"Content-Length: 0\r\n\r\n"
}

// The ACK of a reply the script sent statelessly (sl_send_reply) ends at
// the worker, as Kamailio's sl module filters it: the script would
// otherwise take it, with its To tag, for an in-dialog request and relay it
// to a callee that never saw the INVITE.
func TestAckOfStatelessReplyEndsAtWorker(t *testing.T) {
	sip := freePort(t)
	caller, callee := newPeer(t), newPeer(t)
	s := startServer(t, proxyCfg(sip, callee.port(), "udp_workers = 1\ntcp_workers = 1"))
	defer s.stop()
	proxy := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sip}
	// Max-Forwards 0: the script answers 483 with sl_send_reply.
	inv483 := testInvite(caller, callee, "sl-483", "", 0)
	caller.send(proxy, inv483)
	r, _ := caller.expect(5*time.Second, "483 Too Many Hops", isStatus(483))
	// An ACK with someone else's tag is in-dialog for the script, which
	// relays it: the callee is reachable. (Nothing here leaves a
	// transaction, so the server stops at once.)
	ack := ackFor(inv483, r)
	caller.send(proxy, strings.Replace(ack, r.header("To"), "<sip:bob@127.0.0.1>;tag=callee1", 1))
	callee.expect(5*time.Second, "the ACK with the callee's tag, relayed", isMethod("ACK"))
	caller.send(proxy, ack)
	if m, ok := callee.recv(time.Second); ok {
		t.Fatalf("want the ACK of the 483 to end at the worker, have %s at the callee:\n%s", m, m.raw)
	}
}
