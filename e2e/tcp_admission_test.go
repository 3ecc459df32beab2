package e2e

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"
)

// tcpUA speaks SIP over one TCP connection, so the test sees every byte of
// the answers a TCP client gets.
type tcpUA struct {
	t     *testing.T
	c     net.Conn
	r     *bufio.Reader
	local string
	port  int
	// transport is the Via's and the Request-URI's: TCP unless set.
	transport string
}

func newTCPUA(t *testing.T, sipPort int) *tcpUA {
	t.Helper()
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(sipPort))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &tcpUA{t: t, c: c, r: bufio.NewReader(c), local: c.LocalAddr().String(), port: sipPort}
}

func (u *tcpUA) send(method, callID string, cseq int, to string, extra ...string) {
	u.t.Helper()
	u.sendTo("bob", method, callID, cseq, to, extra...)
}

// sendTo sends a request for user@ the server.
func (u *tcpUA) sendTo(user, method, callID string, cseq int, to string, extra ...string) {
	u.t.Helper()
	tr := u.transport
	if tr == "" {
		tr = "TCP"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s sip:%s@127.0.0.1:%d;transport=%s SIP/2.0\r\n", method, user, u.port, strings.ToLower(tr))
	fmt.Fprintf(&b, "Via: SIP/2.0/%s %s;branch=z9hG4bK-%s\r\nMax-Forwards: 70\r\n", tr, u.local, ovID())
	fmt.Fprintf(&b, "From: <sip:alice@example.com>;tag=%s\r\nTo: %s\r\nCall-ID: %s\r\n", callID[:8], to, callID)
	fmt.Fprintf(&b, "CSeq: %d %s\r\nContact: <sip:alice@%s;transport=%s>\r\n", cseq, method, u.local, strings.ToLower(tr))
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("Content-Length: 0\r\n\r\n")
	if _, err := io.WriteString(u.c, b.String()); err != nil {
		u.t.Fatal(err)
	}
}

// final reads messages until the final response to callID's method.
func (u *tcpUA) final(callID, method string) ovResp {
	u.t.Helper()
	u.c.SetReadDeadline(time.Now().Add(10 * time.Second))
	tr := textproto.NewReader(u.r)
	for {
		first, err := tr.ReadLine()
		if err != nil {
			u.t.Fatalf("no final response to %s %s: %v", method, callID, err)
		}
		if first == "" {
			continue // keepalive CRLFs
		}
		hdr, err := tr.ReadMIMEHeader()
		if err != nil {
			u.t.Fatalf("reading a message: %v", err)
		}
		n, _ := strconv.Atoi(hdr.Get("Content-Length"))
		if _, err := io.CopyN(io.Discard, u.r, int64(n)); err != nil {
			u.t.Fatal(err)
		}
		var raw strings.Builder
		raw.WriteString(first + "\r\n")
		for k, vs := range hdr {
			for _, v := range vs {
				raw.WriteString(k + ": " + v + "\r\n")
			}
		}
		raw.WriteString("\r\n")
		m, err := ovParse([]byte(raw.String()))
		if err != nil || m.code < 200 || m.header("Call-ID") != callID || !strings.HasSuffix(m.header("CSeq"), " "+method) {
			continue
		}
		return m
	}
}

// invite sets a call up over the connection: INVITE, its 200, the ACK.
// It returns the final response and, for a 2xx, the dialog's To.
func (u *tcpUA) invite(callID string) (ovResp, string) {
	u.t.Helper()
	return u.inviteTo("bob", callID)
}

// inviteTo is invite for user@ the server.
func (u *tcpUA) inviteTo(user, callID string) (ovResp, string) {
	u.t.Helper()
	u.sendTo(user, "INVITE", callID, 1, "<sip:bob@example.com>")
	m := u.final(callID, "INVITE")
	to := "<sip:bob@example.com>;tag=" + m.toTag()
	if m.code/100 == 2 {
		u.sendTo(user, "ACK", callID, 1, to)
	}
	return m, to
}

// New sessions over TCP pass the same guards as over UDP and get the same
// 503 with Retry-After, while a call already up over TCP goes on: the
// server suspended, then a session limit.
func TestTCPNewSessionsPassTheGuards(t *testing.T) {
	sip, uas, uac := freePort(t), freePort(t), freePort(t)
	// The callee over TCP too: a TCP caller's call to a UDP callee is
	// another matter (the callee's answers reach a UDP worker).
	s := ovServer{startServer(t, proxyConfig("sip:127.0.0.1:"+strconv.Itoa(uas)+";transport=tcp", sip,
		"udp_workers = 1\ntcp_workers = 1\nauto_scaling_cycle = 0.2\nretry_after = 7\n", true))}
	sippUAS(t, uas, "-t", "t1")
	ua := newTCPUA(t, sip)

	up := ovID() + "@tcp-up"
	m, upTo := ua.invite(up)
	if m.code != 200 {
		t.Fatalf("a call over TCP: want 200, have %d\n%s", m.code, m.raw)
	}
	tcpCalls := []string{"sipvisor_frontdoor_sessions", `group="tcp"`, `kind="call"`}
	s.awaitMetric(1, tcpCalls...)

	if out, err := s.ctl("suspend"); err != nil {
		t.Fatalf("ctl suspend: %v: %s", err, out)
	}
	refused, _ := ua.invite(ovID() + "@tcp-new")
	ovWantRefused(t, "a new INVITE over TCP while suspended", refused)
	if ra := refused.header("Retry-After"); ra != "7" {
		t.Errorf("Retry-After over TCP: want 7, have %q", ra)
	}
	ua.send("BYE", up, 2, upTo)
	if bye := ua.final(up, "BYE"); bye.code != 200 {
		t.Fatalf("BYE of the call up over TCP while suspended: want 200, have %d\n%s", bye.code, bye.raw)
	}
	s.awaitMetric(0, tcpCalls...)
	if out, err := s.ctl("resume"); err != nil {
		t.Fatalf("ctl resume: %v: %s", err, out)
	}

	// One call up over UDP fills max_calls = 1: a new one over TCP is
	// refused as one over UDP would be.
	s.set("limits/max_calls", "1")
	wait := ovSIPpBackground(t, 60*time.Second, "-sn", "uac", "127.0.0.1:"+strconv.Itoa(sip), "-i", "127.0.0.1", "-p", strconv.Itoa(uac),
		"-r", "1", "-m", "1", "-d", "6000", "-timeout", "40", "-timeout_error")
	s.awaitResource("max_calls", 1)
	refused, _ = ua.invite(ovID() + "@tcp-limit")
	ovWantRefused(t, "a new INVITE over TCP at max_calls", refused)
	if r := wait(); r.Successful != 1 || r.Failed != 0 {
		t.Fatalf("the call under the limit: want 1 successful, have %d/%d\n%s", r.Successful, r.Failed, tail(r.Out, 30))
	}
	for _, reason := range []string{"suspended", "limit"} {
		if v := s.mustMetric("sipvisor_frontdoor_refused_sessions_total", `group="tcp"`, `reason="`+reason+`"`); v != 1 {
			t.Errorf("refused over TCP, %s: want 1, have %v", reason, v)
		}
	}
	s.awaitResource("max_calls", 0)
	after := ovID() + "@tcp-after"
	m, afterTo := ua.invite(after)
	if m.code != 200 {
		t.Fatalf("a new call over TCP under the limit: want 200, have %d\n%s", m.code, m.raw)
	}
	// A call up over TCP counts as a session as one over UDP does, and
	// fills max_calls in turn.
	s.awaitResource("max_calls", 1)
	refused, _ = ua.invite(ovID() + "@tcp-limit-2")
	ovWantRefused(t, "a new INVITE over TCP while a TCP call fills max_calls", refused)
	ua.send("BYE", after, 2, afterTo)
	if bye := ua.final(after, "BYE"); bye.code != 200 {
		t.Fatalf("BYE over TCP: want 200, have %d\n%s", bye.code, bye.raw)
	}
	s.awaitResource("max_calls", 0)
	s.awaitMetric(0, tcpCalls...)
}
