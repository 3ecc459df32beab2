package e2e

import (
	"bufio"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/textproto"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testPKI is a certificate authority of the test's own and what it signs.
type testPKI struct {
	t    *testing.T
	dir  string
	ca   *x509.Certificate
	key  *ecdsa.PrivateKey
	pool *x509.CertPool
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "sipvisor test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(der)
	p := &testPKI{t: t, dir: t.TempDir(), ca: ca, key: key, pool: x509.NewCertPool()}
	p.pool.AddCert(ca)
	p.write("ca.pem", "CERTIFICATE", der)
	return p
}

func (p *testPKI) write(name, typ string, der []byte) string {
	p.t.Helper()
	path := filepath.Join(p.dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		p.t.Fatal(err)
	}
	return path
}

// issue signs a certificate for 127.0.0.1 named cn and writes it and its
// key as NAME.pem and NAME.key.
func (p *testPKI) issue(name, cn string, serial int64) tls.Certificate {
	p.t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		p.t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &key.PublicKey, p.key)
	if err != nil {
		p.t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		p.t.Fatal(err)
	}
	cert := p.write(name+".pem", "CERTIFICATE", der)
	keyPath := p.write(name+".key", "EC PRIVATE KEY", kder)
	c, err := tls.LoadX509KeyPair(cert, keyPath)
	if err != nil {
		p.t.Fatal(err)
	}
	return c
}

func (p *testPKI) path(name string) string { return filepath.Join(p.dir, name) }

// dialTLS opens a TLS connection to the server's tls: socket, trusting the
// test's CA, and speaks SIP on it as tcpUA does.
func dialTLS(t *testing.T, pki *testPKI, port int, conf *tls.Config) (*tcpUA, *tls.Conn, error) {
	t.Helper()
	if conf == nil {
		conf = &tls.Config{}
	}
	conf.RootCAs, conf.ServerName = pki.pool, "127.0.0.1"
	c, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp", "127.0.0.1:"+strconv.Itoa(port), conf)
	if err != nil {
		return nil, nil, err
	}
	t.Cleanup(func() { c.Close() })
	return &tcpUA{t: t, c: c, r: bufio.NewReader(c), local: c.LocalAddr().String(), port: port, transport: "TLS"}, c, nil
}

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

func (u *tlsUAS) port() int { return u.ln.Addr().(*net.TCPAddr).Port }

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

// tlsConfig is the registrar script with a tls: socket beside UDP and TCP.
func tlsConfig(pki *testPKI, sip, tlsPort int, extra string) string {
	return strings.Replace(registrarCfg(sip), "http_listen", fmt.Sprintf(`socket = tls:127.0.0.1:%d
tls_certificate = "%s"
tls_private_key = "%s"
tls_ca_list = "%s"
%s
http_listen`, tlsPort, pki.path("server.pem"), pki.path("server.key"), pki.path("ca.pem"), extra), 1)
}

// Calls between a TLS caller and a UDP callee and between a UDP caller and
// a TLS callee; TLS 1.2 at least; a reload takes new certificates for new
// connections while one already up carries on.
func TestTLS(t *testing.T) {
	pki := newTestPKI(t)
	pki.issue("server", "sipvisor one", 2)
	uasCert := pki.issue("uas", "tls callee", 3)
	sip, tlsPort := freePort(t), freePort(t)
	s := startServer(t, tlsConfig(pki, sip, tlsPort, ""))
	target := "127.0.0.1:" + strconv.Itoa(sip)

	// Callees: SIPp on UDP, and a TLS one of the test's own.
	udpCallee := freePort(t)
	sippUAS(t, udpCallee)
	uas := startTLSUAS(t, uasCert)
	for _, reg := range []struct{ user, port, tr string }{
		{"bob-udp", strconv.Itoa(udpCallee), "udp"},
		{"bob-tls", strconv.Itoa(uas.port()), "tls"},
	} {
		r := runSIPp(t, 30*time.Second, "-sf", "testdata/register_transport.xml", target, "-s", reg.user,
			"-key", "contact_port", reg.port, "-key", "contact_transport", reg.tr,
			"-i", "127.0.0.1", "-p", strconv.Itoa(freePort(t)), "-m", "1", "-timeout", "20", "-timeout_error")
		if r.Exit != 0 || r.Successful != 1 {
			t.Fatalf("register %s: have %d/%d (exit %d)\n%s", reg.user, r.Successful, r.Failed, r.Exit, tail(r.Out, 30))
		}
	}

	ua, conn, err := dialTLS(t, pki, tlsPort, nil)
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
		id := ovID() + "@tls"
		m, dlg := ua.inviteTo(to, id)
		if m.code != 200 {
			t.Fatalf("TLS caller → %s: want 200, have %d\n%s\n%s", to, m.code, m.raw, tail(s.log.String(), 20))
		}
		// SIPp's uas leaves Record-Route out of its 200; the TLS one copies it.
		if rr := m.header("Record-Route"); to == "bob-tls" && !strings.Contains(rr, "transport=tls") {
			t.Errorf("TLS caller → %s: want a Record-Route with transport=tls on the caller's side, have %q\n%s", to, rr, m.raw)
		}
		ua.sendTo(to, "BYE", id, 2, dlg)
		if bye := ua.final(id, "BYE"); bye.code != 200 {
			t.Fatalf("TLS caller → %s: BYE: want 200, have %d\n%s", to, bye.code, bye.raw)
		}
	}
	call("bob-udp")
	call("bob-tls")

	// A UDP caller (SIPp) to the TLS callee: sipvisor opens the TLS
	// connection and checks the callee's certificate against tls_ca_list.
	r := runSIPp(t, 60*time.Second, "-sn", "uac", target, "-s", "bob-tls", "-i", "127.0.0.1", "-p", strconv.Itoa(freePort(t)),
		"-m", "2", "-r", "2", "-timeout", "30", "-timeout_error")
	if r.Exit != 0 || r.Successful != 2 {
		t.Fatalf("UDP caller → TLS callee: have %d/%d (exit %d)\n%s\n%s", r.Successful, r.Failed, r.Exit, tail(r.Out, 30), tail(s.log.String(), 20))
	}

	// TLS 1.1 and older are refused.
	if _, _, err := dialTLS(t, pki, tlsPort, &tls.Config{MaxVersion: tls.VersionTLS11}); err == nil {
		t.Error("a TLS 1.1 client completed a handshake")
	}

	// A reload takes a new certificate for new connections; the call up
	// over the connection made before it completes.
	upID := ovID() + "@tls-up"
	m, upDlg := ua.inviteTo("bob-tls", upID)
	if m.code != 200 {
		t.Fatalf("a TLS call before the reload: want 200, have %d\n%s", m.code, m.raw)
	}
	pki.issue("server", "sipvisor two", 4)
	if out, err := s.ctl("reload"); err != nil {
		t.Fatalf("ctl reload: %v: %s", err, out)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, c2, err := dialTLS(t, pki, tlsPort, nil)
		if err == nil && c2.ConnectionState().PeerCertificates[0].Subject.CommonName == "sipvisor two" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the reload: want new connections to see the new certificate (last error %v)", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	ua.sendTo("bob-tls", "BYE", upID, 2, upDlg)
	if bye := ua.final(upID, "BYE"); bye.code != 200 {
		t.Fatalf("the call up across the reload: BYE: want 200, have %d\n%s", bye.code, bye.raw)
	}
	call("bob-udp")
}

// With tls_verify_client, a client without a certificate of the CA's is
// refused at the handshake, and one with it is served.
func TestTLSVerifyClient(t *testing.T) {
	pki := newTestPKI(t)
	pki.issue("server", "sipvisor", 2)
	client := pki.issue("client", "trunk", 3)
	sip, tlsPort := freePort(t), freePort(t)
	startServer(t, tlsConfig(pki, sip, tlsPort, "tls_verify_client = yes"))

	// TLS 1.3 reports a refused client certificate at the first read.
	ua, _, err := dialTLS(t, pki, tlsPort, nil)
	if err == nil {
		ua.c.SetReadDeadline(time.Now().Add(5 * time.Second))
		ua.send("OPTIONS", ovID(), 1, "<sip:bob@example.com>")
		_, err = ua.r.ReadByte()
	}
	if err == nil {
		t.Fatal("a client without a certificate was served")
	}
	ua, _, err = dialTLS(t, pki, tlsPort, &tls.Config{Certificates: []tls.Certificate{client}})
	if err != nil {
		t.Fatalf("a client with a certificate of the CA's: %v", err)
	}
	id := ovID()
	ua.sendTo("nobody", "OPTIONS", id, 1, "<sip:nobody@example.com>")
	if m := ua.final(id, "OPTIONS"); m.code != 404 {
		t.Fatalf("OPTIONS over mutual TLS: want the script's 404, have %d\n%s", m.code, m.raw)
	}
}
