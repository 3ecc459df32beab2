package transport

import (
	"bufio"
	"crypto/tls"
	"fmt"
	"io"
	"net"
	"net/textproto"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// streamPhone is a phone as phones are: it registers over a connection it
// opened (TCP or TLS, no certificate of its own) with a Contact nothing
// can connect to (a *.invalid host), and answers the calls that come over
// that connection: 200 to an INVITE and a BYE.
type streamPhone struct {
	t       testing.TB
	c       net.Conn
	r       *textproto.Reader
	user    string
	tr      string // "tcp" or "tls"
	contact string

	mu      sync.Mutex
	got     []string // methods and statuses read, in order
	regDone chan harness.Resp
	byes    chan string
	// finals are the final responses to the phone's INVITEs.
	finals chan phoneFinal
}

type phoneFinal struct {
	code            int
	to, contact, id string
	rr              []string
}

func dialPhone(t *testing.T, pki *harness.PKI, s *harness.Server, user, tr string, ob bool) *streamPhone {
	t.Helper()
	var c net.Conn
	var err error
	if tr == "tls" {
		c, err = tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", s.SIPAddr("tls"),
			&tls.Config{RootCAs: pki.Pool, ServerName: "127.0.0.1"})
	} else {
		c, err = net.DialTimeout("tcp", s.SIPAddr("tcp"), 5*time.Second)
	}
	if err != nil {
		t.Fatalf("phone %s: %v", user, err)
	}
	t.Cleanup(func() { c.Close() })
	p := &streamPhone{t: t, c: c, r: textproto.NewReader(bufio.NewReader(c)), user: user, tr: tr,
		contact: "sip:" + user + "@" + harness.NewID() + ".invalid;transport=" + tr,
		regDone: make(chan harness.Resp, 4), byes: make(chan string, 8), finals: make(chan phoneFinal, 4)}
	if ob {
		p.contact += ";ob"
	}
	go p.serve()
	return p
}

func (p *streamPhone) write(s string) {
	if _, err := io.WriteString(p.c, s); err != nil {
		p.t.Errorf("phone %s: write: %v", p.user, err)
	}
}

// register registers the phone's contact over its connection.
func (p *streamPhone) register(sipPort, aorPort int, extraContact string) harness.Resp {
	p.t.Helper()
	id := harness.NewID()
	var b strings.Builder
	fmt.Fprintf(&b, "REGISTER sip:127.0.0.1:%d;transport=%s SIP/2.0\r\n", sipPort, p.tr)
	fmt.Fprintf(&b, "Via: SIP/2.0/%s %s.invalid;branch=z9hG4bK-%s;rport\r\nMax-Forwards: 70\r\n", strings.ToUpper(p.tr), id, harness.NewID())
	fmt.Fprintf(&b, "From: <sip:%s@127.0.0.1:%d>;tag=%s\r\nTo: <sip:%s@127.0.0.1:%d>\r\nCall-ID: %s\r\nCSeq: 1 REGISTER\r\n", p.user, aorPort, id[:8], p.user, aorPort, id)
	fmt.Fprintf(&b, "Contact: <%s>%s\r\nExpires: 600\r\nSupported: path, outbound\r\nContent-Length: 0\r\n\r\n", p.contact, extraContact)
	p.write(b.String())
	select {
	case m := <-p.regDone:
		return m
	case <-time.After(10 * time.Second):
		p.t.Fatalf("phone %s: no answer to its REGISTER", p.user)
	}
	return harness.Resp{}
}

func (p *streamPhone) serve() {
	for {
		first, err := p.r.ReadLine()
		if err != nil {
			return
		}
		if first == "" {
			continue
		}
		hdr, err := p.r.ReadMIMEHeader()
		if err != nil {
			return
		}
		n, _ := strconv.Atoi(hdr.Get("Content-Length"))
		if _, err := io.CopyN(io.Discard, p.r.R, int64(n)); err != nil {
			return
		}
		p.mu.Lock()
		p.got = append(p.got, strings.Fields(first)[0]+" "+hdr.Get("CSeq"))
		p.mu.Unlock()
		if strings.HasPrefix(first, "SIP/2.0 ") {
			if strings.HasSuffix(hdr.Get("CSeq"), "REGISTER") {
				var raw strings.Builder
				raw.WriteString(first + "\r\n")
				for k, vs := range hdr {
					for _, v := range vs {
						raw.WriteString(k + ": " + v + "\r\n")
					}
				}
				if m, err := harness.Parse([]byte(raw.String() + "\r\n")); err == nil && m.Code >= 200 {
					p.regDone <- m
				}
			}
			if code, _ := strconv.Atoi(strings.Fields(first)[1]); code >= 200 && strings.HasSuffix(hdr.Get("CSeq"), "INVITE") {
				f := phoneFinal{code: code, to: hdr.Get("To"), contact: strings.Trim(hdr.Get("Contact"), "<> "), id: hdr.Get("Call-ID")}
				for _, v := range hdr.Values("Record-Route") {
					for _, x := range strings.Split(v, ",") {
						f.rr = append(f.rr, strings.TrimSpace(x))
					}
				}
				p.finals <- f
			}
			continue
		}
		method, _, _ := strings.Cut(first, " ")
		if method == "ACK" {
			continue
		}
		var b strings.Builder
		b.WriteString("SIP/2.0 200 OK\r\n")
		for _, v := range hdr.Values("Via") {
			b.WriteString("Via: " + v + "\r\n")
		}
		for _, v := range hdr.Values("Record-Route") {
			b.WriteString("Record-Route: " + v + "\r\n")
		}
		to := hdr.Get("To")
		if !strings.Contains(to, "tag=") {
			to += ";tag=phone-" + p.user
		}
		fmt.Fprintf(&b, "From: %s\r\nTo: %s\r\nCall-ID: %s\r\nCSeq: %s\r\n", hdr.Get("From"), to, hdr.Get("Call-ID"), hdr.Get("CSeq"))
		fmt.Fprintf(&b, "Contact: <%s>\r\nContent-Length: 0\r\n\r\n", p.contact)
		p.write(b.String())
		if method == "BYE" {
			p.byes <- hdr.Get("Call-ID")
		}
	}
}

// callOut places a call from the phone, over its connection, to ruri
// and ACKs its 200 along the route set; the callee is to hang up.
func (p *streamPhone) callOut(ruri string) string {
	p.t.Helper()
	id := harness.NewID() + "@phone"
	req := func(method, uri, to string, route []string) string {
		var b strings.Builder
		fmt.Fprintf(&b, "%s %s SIP/2.0\r\nVia: SIP/2.0/%s %s.invalid;branch=z9hG4bK-%s;rport\r\nMax-Forwards: 70\r\n",
			method, uri, strings.ToUpper(p.tr), id[:8], harness.NewID())
		for _, r := range route {
			b.WriteString("Route: " + r + "\r\n")
		}
		fmt.Fprintf(&b, "From: <sip:%s@127.0.0.1>;tag=%s\r\nTo: %s\r\nCall-ID: %s\r\nCSeq: 1 %s\r\nContact: <%s>\r\nContent-Length: 0\r\n\r\n",
			p.user, id[:8], to, id, method, p.contact)
		return b.String()
	}
	p.write(req("INVITE", ruri, "<"+ruri+">", nil))
	var f phoneFinal
	select {
	case f = <-p.finals:
	case <-time.After(10 * time.Second):
		p.t.Fatalf("phone %s: no final answer to its INVITE", p.user)
	}
	if f.code != 200 || f.id != id {
		p.t.Fatalf("phone %s: INVITE to %s: want 200, have %d (%s)", p.user, ruri, f.code, f.id)
	}
	var route []string
	for i := len(f.rr) - 1; i >= 0; i-- {
		route = append(route, f.rr[i])
	}
	p.write(req("ACK", f.contact, f.to, route))
	return id
}

// streamCall is a caller's side of a call over a connection: INVITE, its
// 200, the ACK and the BYE routed as RFC 3261 12.2 says, by the Record-Route
// set of the 200 and the phone's Contact.
type streamCaller struct {
	t    *testing.T
	c    net.Conn
	r    *textproto.Reader
	port int
	tr   string
	// invBranch is the last INVITE's branch; ackHop makes the next ACK
	// take it.
	invBranch string
	ackHop    bool
}

func (u *streamCaller) send(method, ruri, callID string, cseq int, to string, extra ...string) {
	branch := harness.NewID()
	if method == "INVITE" {
		u.invBranch = branch
	}
	if method == "ACK" && u.ackHop {
		// The ACK of a non-2xx is part of the INVITE's transaction
		// (RFC 3261 17.1.1.3).
		branch = u.invBranch
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s SIP/2.0\r\n", method, ruri)
	fmt.Fprintf(&b, "Via: SIP/2.0/%s %s;branch=z9hG4bK-%s\r\nMax-Forwards: 70\r\n", strings.ToUpper(u.tr), u.c.LocalAddr(), branch)
	fmt.Fprintf(&b, "From: <sip:carol@example.com>;tag=%s\r\nTo: %s\r\nCall-ID: %s\r\n", callID[:8], to, callID)
	fmt.Fprintf(&b, "CSeq: %d %s\r\nContact: <sip:carol@%s;transport=%s>\r\n", cseq, method, u.c.LocalAddr(), u.tr)
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("Content-Length: 0\r\n\r\n")
	if _, err := io.WriteString(u.c, b.String()); err != nil {
		u.t.Fatal(err)
	}
}

// final reads until the final response to callID's method: its status,
// its To, its Contact and its Record-Route values in order.
func (u *streamCaller) final(callID, method string, within time.Duration) (code int, to, contact string, rr []string) {
	u.t.Helper()
	u.c.SetReadDeadline(time.Now().Add(within))
	for {
		first, err := u.r.ReadLine()
		if err != nil {
			u.t.Fatalf("no final response to %s %s: %v", method, callID, err)
		}
		if first == "" {
			continue
		}
		hdr, err := u.r.ReadMIMEHeader()
		if err != nil {
			u.t.Fatal(err)
		}
		n, _ := strconv.Atoi(hdr.Get("Content-Length"))
		io.CopyN(io.Discard, u.r.R, int64(n))
		f := strings.Fields(first)
		if len(f) < 2 || f[0] != "SIP/2.0" || hdr.Get("Call-ID") != callID || !strings.HasSuffix(hdr.Get("CSeq"), " "+method) {
			continue
		}
		if code, _ = strconv.Atoi(f[1]); code < 200 {
			continue
		}
		for _, v := range hdr.Values("Record-Route") {
			for _, x := range strings.Split(v, ",") {
				rr = append(rr, strings.TrimSpace(x))
			}
		}
		return code, hdr.Get("To"), strings.Trim(hdr.Get("Contact"), "<> "), rr
	}
}

// call places a call to user and hangs up; it returns the INVITE's status.
func (u *streamCaller) call(user string, byeWant int) int {
	u.t.Helper()
	id := harness.NewID() + "@flow"
	ruri := fmt.Sprintf("sip:%s@127.0.0.1:%d;transport=%s", user, u.port, u.tr)
	u.send("INVITE", ruri, id, 1, "<sip:"+user+"@127.0.0.1>")
	code, to, contact, rr := u.final(id, "INVITE", 10*time.Second)
	if code != 200 {
		u.ackHop = true
		u.send("ACK", ruri, id, 1, to)
		u.ackHop = false
		return code
	}
	// The route set is the Record-Route reversed (RFC 3261 12.1.2).
	var route []string
	for i := len(rr) - 1; i >= 0; i-- {
		route = append(route, "Route: "+rr[i])
	}
	u.send("ACK", contact, id, 1, to, route...)
	u.send("BYE", contact, id, 2, to, route...)
	if c, _, _, _ := u.final(id, "BYE", 10*time.Second); c != byeWant {
		u.t.Errorf("BYE to %s: want %d, have %d", user, byeWant, c)
	}
	return code
}

func newStreamCaller(t *testing.T, s *harness.Server) *streamCaller {
	c, err := net.DialTimeout("tcp", s.SIPAddr("tcp"), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &streamCaller{t: t, c: c, r: textproto.NewReader(bufio.NewReader(c)), port: s.SIPPort("tcp"), tr: "tcp"}
}

// Phones registered over TCP and over TLS, each with a *.invalid Contact
// that nothing can connect to, are called from UDP (SIPp) and from TCP
// connections read by another worker than the phone's: every request of
// the call, the in-dialog ones too, goes over the connection the phone
// registered on. When that connection closes, a call to the phone is
// answered at once: 480, or 430 Flow Failed for a phone that registered
// with ;ob (RFC 5626), and nothing connects to the phone.
func TestFlows(t *testing.T) {
	t.Parallel()
	pki := harness.NewPKI(t)
	pki.Issue("server", "sipvisor", 2)
	cfg := strings.Replace(harness.TLSConfig(pki, ""), "tcp_workers = 1", "tcp_workers = 2", 1)
	s := harness.Start(t, cfg)
	udp := s.SIPAddr("udp")
	// dave hangs up the calls the phones make, sending the BYE by the
	// route set to sipvisor's UDP socket.
	dave := startRouteFollowingCallee(t)
	if ok, failed, out := runCaller(t, pki, "udp", udp, "-sf", harness.Testdata("register_transport.xml"), "-s", "dave-udp",
		"-key", "contact_port", strconv.Itoa(dave.Port()), "-key", "contact_transport", "udp", "-m", "1"); ok != 1 || failed != 0 {
		t.Fatalf("register dave-udp: have %d/%d\n%s", ok, failed, harness.Tail(out, 30))
	}

	for _, tc := range []struct {
		tr string
		ob bool
	}{{"tcp", false}, {"tls", true}} {
		user := "phone-" + tc.tr
		t.Run(tc.tr, func(t *testing.T) {
			phone := dialPhone(t, pki, s, user, tc.tr, tc.ob)
			extra := ""
			if tc.ob {
				extra = `;+sip.instance="<urn:uuid:00000000-0000-1000-8000-` + harness.NewID()[:12] + `>";reg-id=1`
			}
			if m := phone.register(s.SIPPort(tc.tr), s.SIPPort("udp"), extra); m.Code != 200 {
				t.Fatalf("REGISTER over %s: want 200, have %d\n%s", tc.tr, m.Code, m.Raw)
			}
			// From UDP: SIPp's ACK and BYE come back to the AOR and are
			// looked up again, as the INVITE was.
			r := harness.RunSIPp(t, 60*time.Second, "-sn", "uac", udp, "-s", user, "-i", "127.0.0.1",
				"-m", "2", "-r", "2", "-timeout", "30", "-timeout_error")
			if r.Exit != 0 || r.Successful != 2 {
				t.Fatalf("UDP caller → %s phone: have %d/%d (exit %d)\n%s\n%s", tc.tr, r.Successful, r.Failed, r.Exit,
					harness.Tail(r.Out, 80), harness.Tail(s.Log.String(), 20))
			}
			// From TCP, over two connections: with two TCP workers taking
			// connections in turn, one of them is read by another worker
			// than the phone's. The BYE follows the Record-Route set.
			for i := 0; i < 2; i++ {
				if code := newStreamCaller(t, s).call(user, 200); code != 200 {
					t.Fatalf("TCP caller %d → %s phone: want 200, have %d\n%s", i, tc.tr, code, harness.Tail(s.Log.String(), 20))
				}
			}
			harness.WaitFor(t, "the phone to see 4 BYEs", 10*time.Second, func() bool { return len(phone.byes) == 4 })
			for range 4 {
				<-phone.byes
			}

			// The phone calls a UDP callee that hangs up: the callee's BYE
			// comes to sipvisor's UDP socket, by the Record-Route, and goes
			// to the phone over its connection, by the flow token of the
			// Record-Route on the phone's side.
			id := phone.callOut("sip:dave-udp@" + udp)
			select {
			case got := <-phone.byes:
				if got != id {
					t.Fatalf("the phone got a BYE for %s, want %s", got, id)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("the callee's BYE did not reach the %s phone over its connection\n%s", tc.tr, harness.Tail(s.Log.String(), 20))
			}

			// The phone's connection closes: a call to it is answered at once.
			closed := s.MetricAbsentAs0("sipvisor_frontdoor_connections_closed_total", `reason="peer"`)
			phone.c.Close()
			want := 480
			if tc.ob {
				want = 430
			}
			harness.WaitFor(t, "the phone's connection to be gone", 10*time.Second, func() bool {
				return s.MetricAbsentAs0("sipvisor_frontdoor_connections_closed_total", `reason="peer"`) > closed
			})
			start := time.Now()
			caller := newStreamCaller(t, s)
			if code := caller.call(user, 0); code != want {
				t.Fatalf("TCP caller → %s phone whose connection closed: want %d, have %d\n%s", tc.tr, want, code, harness.Tail(s.Log.String(), 20))
			}
			if code := udpCall(t, s, user); code != want {
				t.Fatalf("UDP caller → %s phone whose connection closed: want %d, have %d", tc.tr, want, code)
			}
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("the answers for a gone flow took %v", d)
			}
		})
	}
	if n := s.MetricAbsentAs0("sipvisor_frontdoor_flow_writes_total", `outcome="written"`); n < 1 {
		t.Errorf("no request was written by the worker holding the phone's connection for another: %v\n%s", n, harness.Tail(s.Log.String(), 30))
	}
}

// udpCall sends an INVITE for user over UDP and returns its final status,
// which it ACKs: a call the test expects refused.
func udpCall(t *testing.T, s *harness.Server, user string) int {
	t.Helper()
	ua := harness.NewUA(t, s.SIPPort("udp"))
	id, branch, local := harness.NewID(), "z9hG4bK-"+harness.NewID(), ua.C.LocalAddr().String()
	req := func(method, to string) string {
		return fmt.Sprintf("%s sip:%s@%s SIP/2.0\r\nVia: SIP/2.0/UDP %s;branch=%s;rport\r\nMax-Forwards: 70\r\n"+
			"From: <sip:dave@example.com>;tag=%s\r\nTo: %s\r\nCall-ID: %s\r\nCSeq: 1 %s\r\nContact: <sip:dave@%s>\r\nContent-Length: 0\r\n\r\n",
			method, user, s.SIPAddr("udp"), local, branch, id[:8], to, id, method, local)
	}
	if _, err := ua.C.WriteToUDP([]byte(req("INVITE", "<sip:"+user+"@127.0.0.1>")), harness.Local(s.SIPPort("udp"))); err != nil {
		t.Fatal(err)
	}
	m := ua.Final(id, "INVITE")
	ua.C.WriteToUDP([]byte(req("ACK", m.Header("To"))), harness.Local(s.SIPPort("udp")))
	return m.Code
}
