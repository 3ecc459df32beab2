package harness

import (
	"bufio"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"testing"
	"time"
)

// UA speaks SIP over a plain UDP socket, so the test sees every byte of
// the server's answers (status, Retry-After) and controls Call-ID and CSeq.
type UA struct {
	t      testing.TB
	C      *net.UDPConn
	server *net.UDPAddr
	local  string
}

// NewUA is a UA on a port of its own that talks to the server's SIP port.
func NewUA(t testing.TB, sipPort int) *UA {
	t.Helper()
	c := UDP(t)
	return &UA{t: t, C: c, local: c.LocalAddr().String(), server: Local(sipPort)}
}

// NewID is a random identifier for a Call-ID or a branch.
func NewID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// Resp is a parsed response: the status and the headers the tests read.
type Resp struct {
	Code    int
	Raw     string
	headers map[string]string // lower-case name → first value
}

// Header is the first value of a header, by its name in any case.
func (m Resp) Header(name string) string { return m.headers[strings.ToLower(name)] }

// ToTag is the tag parameter of the To header.
func (m Resp) ToTag() string {
	to := m.Header("To")
	i := strings.Index(to, ";tag=")
	if i < 0 {
		return ""
	}
	tag := to[i+5:]
	if j := strings.IndexAny(tag, ";> "); j >= 0 {
		tag = tag[:j]
	}
	return tag
}

var compact = map[string]string{"i": "call-id", "t": "to", "f": "from", "v": "via", "m": "contact", "l": "content-length"}

// Parse parses a response.
func Parse(b []byte) (Resp, error) {
	s := string(b)
	head, _, _ := strings.Cut(s, "\r\n\r\n")
	lines := strings.Split(head, "\r\n")
	f := strings.Fields(lines[0])
	if len(f) < 2 || f[0] != "SIP/2.0" {
		return Resp{}, fmt.Errorf("not a response: %q", lines[0])
	}
	code, err := strconv.Atoi(f[1])
	if err != nil {
		return Resp{}, fmt.Errorf("status code %q: %w", f[1], err)
	}
	m := Resp{Code: code, Raw: s, headers: map[string]string{}}
	for _, l := range lines[1:] {
		name, val, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		name = strings.ToLower(strings.TrimSpace(name))
		if full, ok := compact[name]; ok {
			name = full
		}
		if _, seen := m.headers[name]; !seen {
			m.headers[name] = strings.TrimSpace(val)
		}
	}
	return m, nil
}

// Send writes one request. to is the To header's value (with a tag for an
// in-dialog request).
func (u *UA) Send(method, ruri, callID string, cseq int, to string, extra ...string) {
	u.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s SIP/2.0\r\n", method, ruri)
	fmt.Fprintf(&b, "Via: SIP/2.0/UDP %s;branch=z9hG4bK-%s;rport\r\n", u.local, NewID())
	if !strings.HasPrefix(strings.Join(extra, "\n"), "Max-Forwards:") {
		b.WriteString("Max-Forwards: 70\r\n")
	}
	fmt.Fprintf(&b, "From: <sip:alice@example.com>;tag=%s\r\n", callID[:8])
	fmt.Fprintf(&b, "To: %s\r\n", to)
	fmt.Fprintf(&b, "Call-ID: %s\r\n", callID)
	fmt.Fprintf(&b, "CSeq: %d %s\r\n", cseq, method)
	fmt.Fprintf(&b, "Contact: <sip:alice@%s>\r\n", u.local)
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("Content-Length: 0\r\n\r\n")
	if _, err := u.C.WriteToUDP([]byte(b.String()), u.server); err != nil {
		u.t.Fatal(err)
	}
}

// Final waits for the final response to the request of callID with the
// given CSeq method, skipping provisional answers and other calls' traffic.
func (u *UA) Final(callID, method string) Resp {
	u.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 65535)
	for {
		u.C.SetReadDeadline(deadline)
		n, _, err := u.C.ReadFromUDP(buf)
		if err != nil {
			u.t.Fatalf("no final response to %s %s: %v", method, callID, err)
		}
		m, err := Parse(buf[:n])
		if err != nil || m.Code < 200 || m.Header("Call-ID") != callID || !strings.HasSuffix(m.Header("CSeq"), " "+method) {
			continue
		}
		return m
	}
}

// Register sends a REGISTER for alice and returns its final response.
func (u *UA) Register(callID string, cseq int) Resp {
	u.t.Helper()
	u.Send("REGISTER", "sip:example.com", callID, cseq, "<sip:alice@example.com>", "Expires: 3600")
	return u.Final(callID, "REGISTER")
}

// Call is a call set up by Dial and not yet hung up.
type Call struct {
	ID string
	To string // the dialog's To, with the callee's tag
}

// Dial sends a new INVITE for bob and returns its final response; a 2xx is
// acknowledged and the call left up, for HangUp.
func (u *UA) Dial() (Resp, Call) {
	u.t.Helper()
	callID := NewID() + "@raw"
	u.Send("INVITE", "sip:bob@example.com", callID, 1, "<sip:bob@example.com>")
	m := u.Final(callID, "INVITE")
	c := Call{ID: callID, To: "<sip:bob@example.com>;tag=" + m.ToTag()}
	if m.Code/100 == 2 {
		u.Send("ACK", "sip:bob@example.com", callID, 1, c.To)
	}
	return m, c
}

// HangUp sends the call's BYE and returns its final response.
func (u *UA) HangUp(c Call) Resp {
	u.t.Helper()
	u.Send("BYE", "sip:bob@example.com", c.ID, 2, c.To)
	return u.Final(c.ID, "BYE")
}

// Invite sends a new INVITE and returns its final response; a 2xx is
// acknowledged and the call hung up at once, so nothing is left open.
func (u *UA) Invite() Resp {
	u.t.Helper()
	m, c := u.Dial()
	if m.Code/100 == 2 {
		if bye := u.HangUp(c); bye.Code != 200 {
			u.t.Errorf("want 200 to the BYE of a relayed call, have %d", bye.Code)
		}
	}
	return m
}

// WantRefused checks a 503 from admission control, with its Retry-After.
func WantRefused(t testing.TB, what string, m Resp) {
	t.Helper()
	if m.Code != 503 {
		t.Fatalf("%s: want 503, have %d\n%s", what, m.Code, m.Raw)
	}
	if ra, err := strconv.Atoi(m.Header("Retry-After")); err != nil || ra <= 0 {
		t.Fatalf("%s: want a Retry-After of some seconds, have %q\n%s", what, m.Header("Retry-After"), m.Raw)
	}
}

// TCPUA speaks SIP over one TCP (or TLS) connection, so the test sees every
// byte of the answers a TCP client gets.
type TCPUA struct {
	T     testing.TB
	C     net.Conn
	R     *bufio.Reader
	local string
	port  int
	// Transport is the Via's and the Request-URI's: TCP unless set.
	Transport string
}

// NewTCPUA connects to the server's SIP port over TCP.
func NewTCPUA(t testing.TB, sipPort int) *TCPUA {
	t.Helper()
	c, err := net.Dial("tcp", "127.0.0.1:"+strconv.Itoa(sipPort))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return NewTCPUAOn(t, c, sipPort, "TCP")
}

// NewTCPUAOn speaks SIP on a connection already made to port.
func NewTCPUAOn(t testing.TB, c net.Conn, port int, transport string) *TCPUA {
	return &TCPUA{T: t, C: c, R: bufio.NewReader(c), local: c.LocalAddr().String(), port: port, Transport: transport}
}

// Send sends a request for bob.
func (u *TCPUA) Send(method, callID string, cseq int, to string, extra ...string) {
	u.T.Helper()
	u.SendTo("bob", method, callID, cseq, to, extra...)
}

// SendTo sends a request for user@ the server.
func (u *TCPUA) SendTo(user, method, callID string, cseq int, to string, extra ...string) {
	u.T.Helper()
	tr := u.Transport
	if tr == "" {
		tr = "TCP"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s sip:%s@127.0.0.1:%d;transport=%s SIP/2.0\r\n", method, user, u.port, strings.ToLower(tr))
	fmt.Fprintf(&b, "Via: SIP/2.0/%s %s;branch=z9hG4bK-%s\r\nMax-Forwards: 70\r\n", tr, u.local, NewID())
	fmt.Fprintf(&b, "From: <sip:alice@example.com>;tag=%s\r\nTo: %s\r\nCall-ID: %s\r\n", callID[:8], to, callID)
	fmt.Fprintf(&b, "CSeq: %d %s\r\nContact: <sip:alice@%s;transport=%s>\r\n", cseq, method, u.local, strings.ToLower(tr))
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("Content-Length: 0\r\n\r\n")
	if _, err := io.WriteString(u.C, b.String()); err != nil {
		u.T.Fatal(err)
	}
}

// Final reads messages until the final response to callID's method.
func (u *TCPUA) Final(callID, method string) Resp {
	u.T.Helper()
	u.C.SetReadDeadline(time.Now().Add(10 * time.Second))
	tr := textproto.NewReader(u.R)
	for {
		first, err := tr.ReadLine()
		if err != nil {
			u.T.Fatalf("no final response to %s %s: %v", method, callID, err)
		}
		if first == "" {
			continue // keepalive CRLFs
		}
		hdr, err := tr.ReadMIMEHeader()
		if err != nil {
			u.T.Fatalf("reading a message: %v", err)
		}
		n, _ := strconv.Atoi(hdr.Get("Content-Length"))
		if _, err := io.CopyN(io.Discard, u.R, int64(n)); err != nil {
			u.T.Fatal(err)
		}
		var raw strings.Builder
		raw.WriteString(first + "\r\n")
		for k, vs := range hdr {
			for _, v := range vs {
				raw.WriteString(k + ": " + v + "\r\n")
			}
		}
		raw.WriteString("\r\n")
		m, err := Parse([]byte(raw.String()))
		if err != nil || m.Code < 200 || m.Header("Call-ID") != callID || !strings.HasSuffix(m.Header("CSeq"), " "+method) {
			continue
		}
		return m
	}
}

// Invite sets a call up over the connection: INVITE, its 200, the ACK.
// It returns the final response and, for a 2xx, the dialog's To.
func (u *TCPUA) Invite(callID string) (Resp, string) {
	u.T.Helper()
	return u.InviteTo("bob", callID)
}

// InviteTo is Invite for user@ the server.
func (u *TCPUA) InviteTo(user, callID string) (Resp, string) {
	u.T.Helper()
	u.SendTo(user, "INVITE", callID, 1, "<sip:bob@example.com>")
	m := u.Final(callID, "INVITE")
	to := "<sip:bob@example.com>;tag=" + m.ToTag()
	if m.Code/100 == 2 {
		u.SendTo(user, "ACK", callID, 1, to)
	}
	return m, to
}
