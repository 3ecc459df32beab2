package harness

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

// Msg is a SIP message read off a socket, split just enough for tests.
type Msg struct {
	Raw   string
	First string
	From  *net.UDPAddr
}

// Header returns the value of the first header called name (any case).
func (m Msg) Header(name string) string {
	for _, line := range m.Lines()[1:] {
		if i := strings.IndexByte(line, ':'); i > 0 && strings.EqualFold(strings.TrimSpace(line[:i]), name) {
			return strings.TrimSpace(line[i+1:])
		}
	}
	return ""
}

// Lines are the start line and the header lines.
func (m Msg) Lines() []string {
	head, _, _ := strings.Cut(m.Raw, "\r\n\r\n")
	return strings.Split(head, "\r\n")
}

// Status is the code of a response, 0 for a request.
func (m Msg) Status() int {
	f := strings.Fields(m.First)
	if len(f) < 2 || f[0] != "SIP/2.0" {
		return 0
	}
	n, _ := strconv.Atoi(f[1])
	return n
}

// Method is the method of a request, "" for a response.
func (m Msg) Method() string {
	if m.Status() != 0 {
		return ""
	}
	f := strings.Fields(m.First)
	if len(f) == 0 {
		return ""
	}
	return f[0]
}

func (m Msg) String() string {
	if m.Status() != 0 {
		return strconv.Itoa(m.Status())
	}
	return m.Method()
}

// HeaderOf is the value of a header of a message given as text.
func HeaderOf(msg, name string) string {
	first, _, _ := strings.Cut(msg, "\r\n")
	return Msg{Raw: msg, First: first}.Header(name)
}

// Peer is a UDP endpoint of a test: a caller or a callee written in Go, so
// that the test sees every datagram exactly as it was sent.
type Peer struct {
	t testing.TB
	C *net.UDPConn
}

// NewPeer is a Peer on a port of its own, closed with the test.
func NewPeer(t testing.TB) *Peer {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &Peer{t: t, C: c}
}

// Port is the peer's port.
func (p *Peer) Port() int { return p.C.LocalAddr().(*net.UDPAddr).Port }

// Send sends msg to to.
func (p *Peer) Send(to *net.UDPAddr, msg string) {
	p.t.Helper()
	if _, err := p.C.WriteToUDP([]byte(msg), to); err != nil {
		p.t.Fatalf("send to %v: %v", to, err)
	}
}

// Recv reads one datagram, or reports ok = false at the deadline.
func (p *Peer) Recv(within time.Duration) (Msg, bool) {
	p.t.Helper()
	buf := make([]byte, 65536)
	p.C.SetReadDeadline(time.Now().Add(within))
	n, from, err := p.C.ReadFromUDP(buf)
	if err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return Msg{}, false
		}
		p.t.Fatalf("recv: %v", err)
	}
	raw := string(buf[:n])
	first, _, _ := strings.Cut(raw, "\r\n")
	return Msg{Raw: raw, First: first, From: from}, true
}

// Expect reads until a message for which want is true, failing the test at
// the deadline. Messages it skips are returned too, in order.
func (p *Peer) Expect(within time.Duration, what string, want func(Msg) bool) (Msg, []Msg) {
	p.t.Helper()
	deadline := time.Now().Add(within)
	var skipped []Msg
	for {
		left := time.Until(deadline)
		if left <= 0 {
			p.t.Fatalf("want %s within %v, have %v", what, within, skipped)
		}
		m, ok := p.Recv(left)
		if !ok {
			continue
		}
		if want(m) {
			return m, skipped
		}
		skipped = append(skipped, m)
	}
}

// IsStatus matches a response with the code.
func IsStatus(code int) func(Msg) bool {
	return func(m Msg) bool { return m.Status() == code }
}

// IsMethod matches a request of the method.
func IsMethod(method string) func(Msg) bool {
	return func(m Msg) bool { return m.Method() == method }
}

// ReplyTo builds a response to req as a UAS does: every Via, From, To with
// the given tag, Call-ID, CSeq and Record-Route copied.
func ReplyTo(req Msg, code int, reason, toTag string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "SIP/2.0 %d %s\r\n", code, reason)
	for _, line := range req.Lines()[1:] {
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

// Invite is an INVITE from caller to bob at callee, both on 127.0.0.1: id
// is its Call-ID's local part and its branch's tail, to is added to the To
// header (";tag=x" for an in-dialog one, or ""), as a Go test's caller
// sends it through the proxy.
func Invite(caller, callee *Peer, id, to string, maxForwards int) string {
	return fmt.Sprintf("INVITE sip:bob@127.0.0.1:%[2]d SIP/2.0\r\n"+
		"Via: SIP/2.0/UDP 127.0.0.1:%[1]d;branch=z9hG4bK-%[3]s\r\n"+
		"Max-Forwards: %[5]d\r\n"+
		"From: <sip:alice@127.0.0.1:%[1]d>;tag=caller\r\n"+
		"To: <sip:bob@127.0.0.1:%[2]d>%[4]s\r\n"+
		"Call-ID: %[3]s@127.0.0.1\r\n"+
		"CSeq: 1 INVITE\r\n"+
		"Contact: <sip:alice@127.0.0.1:%[1]d>\r\n"+
		"Content-Length: 0\r\n\r\n", caller.Port(), callee.Port(), id, to, maxForwards)
}

// Options is an OPTIONS from 127.0.0.1:port with callID as its Call-ID and
// branch, and extra header lines (each ending in CRLF).
func Options(port int, callID string, extra string) string {
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

// Register sends one REGISTER of user with contact from p to the server at
// sip and returns the answer.
func Register(t testing.TB, p *Peer, sip int, user, contact string) Msg {
	t.Helper()
	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sip}
	branch := "z9hG4bK-" + NewID()
	p.Send(to, "REGISTER sip:example.test SIP/2.0\r\n"+
		"Via: SIP/2.0/UDP 127.0.0.1:"+strconv.Itoa(p.Port())+";branch="+branch+"\r\n"+
		"Max-Forwards: 70\r\n"+
		"From: <sip:"+user+"@example.test>;tag=r1\r\n"+
		"To: <sip:"+user+"@example.test>\r\n"+
		"Call-ID: "+branch+"@test\r\n"+
		"CSeq: 1 REGISTER\r\n"+
		"Contact: <"+contact+">\r\n"+
		"Expires: 600\r\n"+
		"Content-Length: 0\r\n\r\n")
	m, _ := p.Expect(5*time.Second, "a final answer to the REGISTER", func(m Msg) bool { return m.Status() >= 200 })
	return m
}

// UDP is a UDP socket on 127.0.0.1, closed with the test.
func UDP(t testing.TB) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// Local is 127.0.0.1:port as a UDP address.
func Local(port int) *net.UDPAddr { return &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port} }

// UserOf is the user part of an address of record, sip:user@domain.
func UserOf(aor string) string {
	user, _, _ := strings.Cut(strings.TrimPrefix(aor, "sip:"), "@")
	return user
}
