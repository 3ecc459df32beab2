package loadgen

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"io"
	"math/big"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// testCA is a certificate authority made for one test: its certificate is
// DIR/NAME-ca.pem, and issue writes certificates for 127.0.0.1 beside it.
type testCA struct {
	t    *testing.T
	dir  string
	name string
	cert *x509.Certificate
	key  *ecdsa.PrivateKey
}

func newTestCA(t *testing.T, name string) *testCA {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ := x509.ParseCertificate(der)
	ca := &testCA{t: t, dir: t.TempDir(), name: name, cert: cert, key: key}
	ca.write(name+"-ca.pem", "CERTIFICATE", der)
	return ca
}

func (ca *testCA) write(name, typ string, der []byte) string {
	ca.t.Helper()
	p := filepath.Join(ca.dir, name)
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		ca.t.Fatal(err)
	}
	return p
}

func (ca *testCA) file() string { return filepath.Join(ca.dir, ca.name+"-ca.pem") }

// issue returns the certificate and key files of a new certificate for
// 127.0.0.1, good for a server and a client.
func (ca *testCA) issue(name string) (cert, key string) {
	ca.t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		ca.t.Fatal(err)
	}
	serial, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	tmpl := &x509.Certificate{SerialNumber: serial, Subject: pkix.Name{CommonName: name},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, &k.PublicKey, ca.key)
	if err != nil {
		ca.t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		ca.t.Fatal(err)
	}
	return ca.write(name+".pem", "CERTIFICATE", der), ca.write(name+".key", "EC PRIVATE KEY", kder)
}

// Calls over -t l1, with certificates on both sides checked against a CA
// (SIPp's -tls_ca: the server demands the client's), count as over UDP and
// TCP.
func TestUACAgainstUASOverTLS(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "loadgen")
	srvCert, srvKey := ca.issue("uas")
	cliCert, cliKey := ca.issue("uac")
	addr, res := startUAS(t, Options{Transport: "l1", MaxCalls: 20, TLSCert: srvCert, TLSKey: srvKey, TLSCA: ca.file()})
	c := runClient(t, Options{Scenario: "uac", Target: addr.String(), Transport: "l1", Schedule: Constant(50), MaxCalls: 20,
		Hold: 20 * time.Millisecond, TLSCert: cliCert, TLSKey: cliKey, TLSCA: ca.file()})
	s := wait(t, res, "uas")
	if c.Offered != 20 || c.Succeeded != 20 || c.Failed != 0 || s.Succeeded != 20 || s.Failed != 0 {
		t.Errorf("want 20 calls offered and succeeded on both sides, have uac %+v, uas %+v", c.Counts, s.Counts)
	}
}

// SIPp's XML scenarios run over -t l1 as given on the command line, server
// and client, with [transport] TLS; SIPp's flags name the files.
func TestXMLScenariosOverTLS(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "loadgen")
	srvCert, srvKey := ca.issue("uas")
	dir := t.TempDir()
	uasDone := make(chan Stats, 1)
	bound := make(chan netip.AddrPort, 1)
	go func() {
		uasDone <- siploadArgs(t, []string{"-sf", builtinScenario(t, "uas"), "-t", "l1", "-i", "127.0.0.1", "-p", "0", "-m", "5",
			"-tls_cert", srvCert, "-tls_key", srvKey}, func(a netip.AddrPort) { bound <- a })
	}()
	addr := <-bound
	msgs := filepath.Join(dir, "m.log")
	var out, errb strings.Builder
	// No certificate of its own and no -tls_ca: SIPp's defaults, as a
	// client in a directory without cacert.pem.
	code := Main(context.Background(), []string{addr.String(), "-sf", builtinScenario(t, "uac"), "-t", "l1", "-i", "127.0.0.1",
		"-m", "5", "-r", "20", "-d", "10", "-trace_msg", "-message_file", msgs, "-q"}, &out, &errb)
	st := <-uasDone
	if code != ExitOK || st.Succeeded != 5 {
		t.Fatalf("want exit 0 and 5 calls answered, have %d and %+v\n%s%s", code, st.Counts, out.String(), errb.String())
	}
	b, _ := os.ReadFile(msgs)
	for _, want := range []string{"Via: SIP/2.0/TLS 127.0.0.1:", "transport=TLS", "BYE sip:"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("want %q in the -trace_msg log\n%s", want, b)
		}
	}
}

// What goes wrong with TLS says what and where: a server certificate of
// another CA, a server without a certificate, files that do not load, a
// version SIPp does not name.
func TestTLSErrors(t *testing.T) {
	ca, other := newTestCA(t, "loadgen"), newTestCA(t, "other")
	srvCert, srvKey := ca.issue("uas")
	addr, _ := startUAS(t, Options{Transport: "l1", TLSCert: srvCert, TLSKey: srvKey, Timeout: 20 * time.Second})
	_, err := Run(context.Background(), Options{Scenario: "uac", Target: addr.String(), LocalIP: "127.0.0.1", Transport: "l1",
		TLSCA: other.file(), MaxCalls: 1, Timeout: 10 * time.Second})
	if err == nil || !strings.Contains(err.Error(), "tls handshake") || !strings.Contains(err.Error(), "unknown authority") {
		t.Errorf("a server certificate of another CA: want a handshake error naming the unknown authority, have %v", err)
	}
	// With -tls_ca the server asks for a certificate; a client without one
	// ends its run with the server's refusal.
	addr, _ = startUAS(t, Options{Transport: "l1", TLSCert: srvCert, TLSKey: srvKey, TLSCA: ca.file(), Timeout: 20 * time.Second})
	st, err := Run(context.Background(), Options{Scenario: "uac", Target: addr.String(), LocalIP: "127.0.0.1", Transport: "l1",
		MaxCalls: 1, Timeout: 10 * time.Second})
	if err == nil || st.Succeeded != 0 {
		t.Errorf("a client without a certificate against -tls_ca: want an error and no call, have %v and %+v", err, st.Counts)
	}

	for _, tc := range []struct {
		name string
		o    Options
		want string
	}{
		{"uas without a certificate", Options{Scenario: "uas", TLSCert: "", TLSKey: ""}, "needs a certificate"},
		{"missing file", Options{Scenario: "uac", TLSCert: "/nonexistent.pem", TLSKey: srvKey}, "-tls_cert /nonexistent.pem"},
		{"key of another", Options{Scenario: "uas", TLSCert: srvCert, TLSKey: other.write("x.key", "EC PRIVATE KEY", []byte("x"))}, "-tls_key"},
		{"bad CA file", Options{Scenario: "uac", TLSCA: srvKey}, "no PEM certificate"},
		{"version", Options{Scenario: "uac", TLSVersion: "1.4"}, "-tls_version"},
	} {
		tc.o.Transport, tc.o.Target, tc.o.LocalIP, tc.o.Timeout = "l1", addr.String(), "127.0.0.1", 5*time.Second
		wd, _ := os.Getwd()
		os.Chdir(t.TempDir()) // no cacert.pem here
		_, err := Run(context.Background(), tc.o)
		os.Chdir(wd)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: want an error with %q, have %v", tc.name, tc.want, err)
		}
	}
	var errb strings.Builder
	if code := Main(context.Background(), []string{"127.0.0.1:9", "-t", "l2", "-q"}, io.Discard, &errb); code != ExitUsage ||
		!strings.Contains(errb.String(), "l1") {
		t.Errorf("-t l2: want exit 2 naming l1, have %d %q", code, errb.String())
	}
	errb.Reset()
	if code := Main(context.Background(), []string{"127.0.0.1:9", "-t", "l1", "-tls_version", "1.4", "-q"}, io.Discard, &errb); code != ExitUsage ||
		!strings.Contains(errb.String(), "-tls_version") {
		t.Errorf("-tls_version 1.4: want exit 2 naming the flag, have %d %q", code, errb.String())
	}
}

// -tls_handshakes makes a new connection per call, each a full handshake
// against a TLS server (sipload's uas), or, with -tls_resume, each after a
// first resuming that first's session; -tls_groups names what is offered.
func TestHandshakes(t *testing.T) {
	t.Parallel()
	ca := newTestCA(t, "loadgen")
	srvCert, srvKey := ca.issue("uas")
	addr, _ := startUAS(t, Options{Transport: "l1", TLSCert: srvCert, TLSKey: srvKey, Timeout: 60 * time.Second})
	for _, tc := range []struct {
		name  string
		extra []string
		full  int
	}{
		{"full", nil, 20},
		{"resumed", []string{"-tls_resume"}, 0},
		{"x25519 only", []string{"-tls_groups", "x25519"}, 20},
	} {
		var out, errb strings.Builder
		args := append([]string{addr.String(), "-t", "l1", "-tls_handshakes", "-tls_ca", ca.file(), "-m", "20", "-r", "100", "-q"}, tc.extra...)
		code := Main(context.Background(), args, &out, &errb)
		want := "handshakes full " + strconv.Itoa(tc.full) + "  resumed " + strconv.Itoa(20-tc.full)
		if code != ExitOK || !strings.Contains(out.String(), "offered 20  succeeded 20  failed 0") || !strings.Contains(out.String(), want) {
			t.Errorf("%s: want exit 0, 20 handshakes succeeded, %q; have %d\n%s%s", tc.name, want, code, out.String(), errb.String())
		}
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-tls_handshakes"}, "-t l1"},
		{[]string{"-t", "l1", "-tls_resume"}, "-tls_handshakes"},
		{[]string{"-t", "l1", "-tls_groups", "x448"}, "-tls_groups"},
		{[]string{"-t", "l1", "-sn", "uas", "-tls_handshakes"}, "uas"},
	} {
		var errb strings.Builder
		if code := Main(context.Background(), append([]string{addr.String(), "-q"}, tc.args...), io.Discard, &errb); code != ExitUsage ||
			!strings.Contains(errb.String(), tc.want) {
			t.Errorf("%v: want exit 2 naming %q, have %d %q", tc.args, tc.want, code, errb.String())
		}
	}
}
