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
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// tlsUAS answers calls over TLS at a contact registered with sipvisor: the
// callee end of a call whose caller is on another transport.
type tlsUAS struct {
	ln    net.Listener
	calls chan string // Call-IDs of the BYEs answered
}

func startTLSUAS(t *testing.T, cert tls.Certificate) *tlsUAS {
	t.Helper()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12})
	if err != nil {
		t.Fatal(err)
	}
	u := &tlsUAS{ln: ln, calls: make(chan string, 16)}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go u.serve(c)
		}
	}()
	return u
}

func (u *tlsUAS) Port() int { return u.ln.Addr().(*net.TCPAddr).Port }

// serve answers INVITE with 200, BYE with 200, and takes ACKs.
func (u *tlsUAS) serve(c net.Conn) {
	defer c.Close()
	r := textproto.NewReader(bufio.NewReader(c))
	for {
		c.SetReadDeadline(time.Now().Add(30 * time.Second))
		first, err := r.ReadLine()
		if err != nil {
			return
		}
		if first == "" {
			continue
		}
		hdr, err := r.ReadMIMEHeader()
		if err != nil {
			return
		}
		n, _ := strconv.Atoi(hdr.Get("Content-Length"))
		if _, err := io.CopyN(io.Discard, r.R, int64(n)); err != nil {
			return
		}
		method, _, _ := strings.Cut(first, " ")
		if method == "ACK" || strings.HasPrefix(first, "SIP/") {
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
			to += ";tag=tls-uas"
		}
		fmt.Fprintf(&b, "From: %s\r\nTo: %s\r\nCall-ID: %s\r\nCSeq: %s\r\n", hdr.Get("From"), to, hdr.Get("Call-ID"), hdr.Get("CSeq"))
		fmt.Fprintf(&b, "Contact: <sip:bob-tls@%s;transport=tls>\r\nContent-Length: 0\r\n\r\n", c.LocalAddr())
		if _, err := io.WriteString(c, b.String()); err != nil {
			return
		}
		if method == "BYE" {
			u.calls <- hdr.Get("Call-ID")
		}
	}
}

// Calls between a TLS caller and a UDP callee and between a UDP caller and
// a TLS callee; TLS 1.2 at least; a reload takes new certificates for new
// connections while one already up carries on.
func TestTLS(t *testing.T) {
	t.Parallel()
	pki := harness.NewPKI(t)
	pki.Issue("server", "sipvisor one", 2)
	uasCert := pki.Issue("uas", "tls callee", 3)
	s := harness.Start(t, harness.TLSConfig(pki, ""))
	target, tlsPort := s.SIPAddr("udp"), s.SIPPort("tls")

	// Callees: SIPp on UDP, and a TLS one of the test's own.
	udpCallee := harness.SIPpUAS(t).Port
	uas := startTLSUAS(t, uasCert)
	for _, reg := range []struct{ user, port, tr string }{
		{"bob-udp", strconv.Itoa(udpCallee), "udp"},
		{"bob-tls", strconv.Itoa(uas.Port()), "tls"},
	} {
		r := harness.RunSIPp(t, 30*time.Second, "-sf", harness.Testdata("register_transport.xml"), target, "-s", reg.user,
			"-key", "contact_port", reg.port, "-key", "contact_transport", reg.tr,
			"-i", "127.0.0.1", "-m", "1", "-timeout", "20", "-timeout_error")
		if r.Exit != 0 || r.Successful != 1 {
			t.Fatalf("register %s: have %d/%d (exit %d)\n%s", reg.user, r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 30))
		}
	}

	ua, conn, err := harness.DialTLS(t, pki, tlsPort, nil)
	if err != nil {
		t.Fatalf("TLS handshake with the tls: socket: %v", err)
	}
	if v := conn.ConnectionState().Version; v < tls.VersionTLS12 {
		t.Errorf("negotiated %x, want TLS 1.2 or later", v)
	}
	if cn := conn.ConnectionState().PeerCertificates[0].Subject.CommonName; cn != "sipvisor one" {
		t.Errorf("server certificate: want sipvisor one, have %q", cn)
	}
	call := func(to string) {
		t.Helper()
		id := harness.NewID() + "@tls"
		m, dlg := ua.InviteTo(to, id)
		if m.Code != 200 {
			t.Fatalf("TLS caller → %s: want 200, have %d\n%s\n%s", to, m.Code, m.Raw, harness.Tail(s.Log.String(), 20))
		}
		// SIPp's uas leaves Record-Route out of its 200; the TLS one copies it.
		if rr := m.Header("Record-Route"); to == "bob-tls" && !strings.Contains(rr, "transport=tls") {
			t.Errorf("TLS caller → %s: want a Record-Route with transport=tls on the caller's side, have %q\n%s", to, rr, m.Raw)
		}
		ua.SendTo(to, "BYE", id, 2, dlg)
		if bye := ua.Final(id, "BYE"); bye.Code != 200 {
			t.Fatalf("TLS caller → %s: BYE: want 200, have %d\n%s", to, bye.Code, bye.Raw)
		}
	}
	call("bob-udp")
	call("bob-tls")

	// A UDP caller (SIPp) to the TLS callee: sipvisor opens the TLS
	// connection and checks the callee's certificate against tls_ca_list.
	r := harness.RunSIPp(t, 60*time.Second, "-sn", "uac", target, "-s", "bob-tls", "-i", "127.0.0.1",
		"-m", "2", "-r", "2", "-timeout", "30", "-timeout_error")
	if r.Exit != 0 || r.Successful != 2 {
		t.Fatalf("UDP caller → TLS callee: have %d/%d (exit %d)\n%s\n%s", r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 30), harness.Tail(s.Log.String(), 20))
	}

	// TLS 1.1 and older are refused.
	if _, _, err := harness.DialTLS(t, pki, tlsPort, &tls.Config{MaxVersion: tls.VersionTLS11}); err == nil {
		t.Error("a TLS 1.1 client completed a handshake")
	}

	// A reload takes a new certificate for new connections; the call up
	// over the connection made before it completes.
	upID := harness.NewID() + "@tls-up"
	m, upDlg := ua.InviteTo("bob-tls", upID)
	if m.Code != 200 {
		t.Fatalf("a TLS call before the reload: want 200, have %d\n%s", m.Code, m.Raw)
	}
	pki.Issue("server", "sipvisor two", 4)
	if out, err := s.Ctl("reload"); err != nil {
		t.Fatalf("ctl reload: %v: %s", err, out)
	}
	harness.WaitFor(t, "new connections to see the new certificate after the reload", 20*time.Second, func() bool {
		_, c2, err := harness.DialTLS(t, pki, tlsPort, nil)
		return err == nil && c2.ConnectionState().PeerCertificates[0].Subject.CommonName == "sipvisor two"
	})
	ua.SendTo("bob-tls", "BYE", upID, 2, upDlg)
	if bye := ua.Final(upID, "BYE"); bye.Code != 200 {
		t.Fatalf("the call up across the reload: BYE: want 200, have %d\n%s", bye.Code, bye.Raw)
	}
	call("bob-udp")
}

// With tls_verify_client, a client without a certificate of the CA's is
// refused at the handshake, and one with it is served.
func TestTLSVerifyClient(t *testing.T) {
	t.Parallel()
	pki := harness.NewPKI(t)
	pki.Issue("server", "sipvisor", 2)
	client := pki.Issue("client", "trunk", 3)
	tlsPort := harness.Start(t, harness.TLSConfig(pki, "tls_verify_client = yes")).SIPPort("tls")

	// TLS 1.3 reports a refused client certificate at the first read.
	ua, _, err := harness.DialTLS(t, pki, tlsPort, nil)
	if err == nil {
		ua.C.SetReadDeadline(time.Now().Add(5 * time.Second))
		ua.Send("OPTIONS", harness.NewID(), 1, "<sip:bob@example.com>")
		_, err = ua.R.ReadByte()
	}
	if err == nil {
		t.Fatal("a client without a certificate was served")
	}
	ua, _, err = harness.DialTLS(t, pki, tlsPort, &tls.Config{Certificates: []tls.Certificate{client}})
	if err != nil {
		t.Fatalf("a client with a certificate of the CA's: %v", err)
	}
	id := harness.NewID()
	ua.SendTo("nobody", "OPTIONS", id, 1, "<sip:nobody@example.com>")
	if m := ua.Final(id, "OPTIONS"); m.Code != 404 {
		t.Fatalf("OPTIONS over mutual TLS: want the script's 404, have %d\n%s", m.Code, m.Raw)
	}
}

// A client that keeps its TLS session resumes it on its next connection,
// whichever TCP worker that connection reaches: the workers seal and open
// tickets with the keys the supervisor gave them all. Connections are
// placed on the two workers in turn, so most resume a session another
// worker began; each connection's worker is the one whose handled count
// grew with it.
func TestTLSResumesAcrossWorkers(t *testing.T) {
	t.Parallel()
	pki := harness.NewPKI(t)
	pki.Issue("server", "sipvisor", 2)
	s := harness.Start(t, strings.Replace(harness.TLSConfig(pki, ""), "tcp_workers = 1", "tcp_workers = 2", 1))
	tlsPort := s.SIPPort("tls")
	harness.WaitFor(t, "2 TCP workers ready", 20*time.Second, func() bool {
		n, _ := harness.Live(s.PS(), "tcp")
		return n == 2
	})
	handled := func() map[int]uint64 {
		out := map[int]uint64{}
		for _, g := range s.PS() {
			if g.Name == "tcp" {
				for _, w := range g.Workers {
					out[w.Pid] = w.Handled
				}
			}
		}
		return out
	}
	cache := tls.NewLRUClientSessionCache(4)
	var workers []int
	var resumed []bool
	for i := range 6 {
		before := handled()
		ua, c, err := harness.DialTLS(t, pki, tlsPort, &tls.Config{ClientSessionCache: cache})
		if err != nil {
			t.Fatalf("connection %d: %v", i+1, err)
		}
		// An answer read: the server has the connection, and the client
		// has taken the ticket sent with the handshake.
		id := harness.NewID()
		ua.SendTo("nobody", "OPTIONS", id, 1, "<sip:nobody@example.com>")
		if m := ua.Final(id, "OPTIONS"); m.Code == 0 {
			t.Fatalf("connection %d: no answer to OPTIONS", i+1)
		}
		resumed = append(resumed, c.ConnectionState().DidResume)
		c.Close()
		after, on := handled(), 0
		for pid, n := range after {
			if n > before[pid] {
				on = pid
			}
		}
		workers = append(workers, on)
	}
	if resumed[0] {
		t.Error("the first connection resumed a session it never had")
	}
	across := 0
	for i := 1; i < len(resumed); i++ {
		if !resumed[i] {
			t.Errorf("connection %d: want its session resumed, have a full handshake (workers %v)", i+1, workers)
		}
		if resumed[i] && workers[i] != 0 && workers[i-1] != 0 && workers[i] != workers[i-1] {
			across++
		}
	}
	if across == 0 {
		t.Errorf("want a session resumed on a worker other than the one that began it, have workers %v, resumed %v", workers, resumed)
	}
}
