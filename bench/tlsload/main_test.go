package main

import (
	"bufio"
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestReadMessage(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, in string
		code     int
		callID   string
		cseq     string
		rest     string // what must be left unread
		err      string
	}{
		{name: "response with body", in: "SIP/2.0 200 OK\r\nCall-ID: a@b\r\nCSeq: 1 INVITE\r\nContent-Length: 4\r\n\r\nv=0\nNEXT",
			code: 200, callID: "a@b", cseq: "INVITE", rest: "NEXT"},
		{name: "keep-alives first, compact names", in: "\r\n\r\nSIP/2.0 100 Trying\r\ni: x\r\nCSeq: 2 BYE\r\nl: 0\r\n\r\n",
			code: 100, callID: "x", cseq: "BYE"},
		{name: "folded header", in: "SIP/2.0 180 Ringing\r\nCall-ID:\r\n  folded\r\nCSeq: 1 INVITE\r\n\r\n",
			code: 180, callID: "folded", cseq: "INVITE"},
		{name: "request", in: "BYE sip:a SIP/2.0\r\nCall-ID: r\r\nCSeq: 3 BYE\r\nContent-Length: 0\r\n\r\n",
			code: 0, callID: "r", cseq: "BYE"},
		{name: "bad code", in: "SIP/2.0 2x0 OK\r\n\r\n", err: "bad code"},
		{name: "no colon", in: "SIP/2.0 200 OK\r\nnonsense\r\n\r\n", err: "without a colon"},
		{name: "bad length", in: "SIP/2.0 200 OK\r\nContent-Length: -1\r\n\r\n", err: "Content-Length"},
		{name: "cut short", in: "SIP/2.0 200 OK\r\nContent-Length: 10\r\n\r\nabc", err: "EOF"},
		{name: "too long", in: "SIP/2.0 200 OK\r\nX: " + strings.Repeat("a", maxMessage) + "\r\n\r\n", err: "over"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			br := bufio.NewReader(strings.NewReader(tc.in))
			m, err := readMessage(br)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("want an error with %q, have %v", tc.err, err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if m.code != tc.code || m.header("call-id") != tc.callID || m.cseqMethod() != tc.cseq {
				t.Errorf("have code %d Call-ID %q CSeq method %q", m.code, m.header("call-id"), m.cseqMethod())
			}
			rest := new(bytes.Buffer)
			rest.ReadFrom(br)
			if rest.String() != tc.rest {
				t.Errorf("left unread %q, want %q", rest, tc.rest)
			}
		})
	}
}

func TestSplitListAndURI(t *testing.T) {
	t.Parallel()
	got := splitList([]string{`<sip:a;lr>, "x,y" <sip:b;lr>`, "<sip:c,d;lr>"})
	want := []string{"<sip:a;lr>", `"x,y" <sip:b;lr>`, "<sip:c,d;lr>"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("splitList: have %q, want %q", got, want)
	}
	for in, want := range map[string]string{
		"<sip:127.0.0.1:5060;transport=UDP>": "sip:127.0.0.1:5060;transport=UDP",
		"sip:u@h;expires=5":                  "sip:u@h",
		"<sip:broken":                        "",
	} {
		if got := uriOf(in); got != want {
			t.Errorf("uriOf(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestPercentile(t *testing.T) {
	t.Parallel()
	var ds []time.Duration
	for i := 100; i >= 1; i-- {
		ds = append(ds, time.Duration(i))
	}
	for p, want := range map[float64]time.Duration{50: 50, 99: 99, 100: 100, 0: 1} {
		if got := percentile(ds, p); got != want {
			t.Errorf("p%g = %d, want %d", p, got, want)
		}
	}
	if percentile(nil, 50) != 0 {
		t.Error("percentile of nothing should be 0")
	}
}

func TestFlagErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-mode", "x", "-ca", "c"}, "-mode"},
		{[]string{}, "-ca is required"},
		{[]string{"-ca", "c", "-tls", "1.1"}, "-tls"},
		{[]string{"-ca", "c", "-curve", "p384"}, "-curve"},
		{[]string{"-ca", "c", "-mode", "calls", "-rate", "0", "-uas", "h:1"}, "-rate"},
		{[]string{"-ca", "c", "-mode", "calls"}, "-uas"},
		{[]string{"-ca", "c", "-secs", "0"}, "-secs"},
		{[]string{"-ca", "c", "-conns", "0"}, "-conns"},
		{[]string{"-ca", "c", "extra"}, "unexpected argument"},
	} {
		if _, err := parseFlags(tc.args); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%q: want an error with %q, have %v", tc.args, tc.want, err)
		}
	}
}

// testServer is a TLS server that answers as a proxy and its callee
// together: 100 and 200 to INVITE, 200 to BYE, nothing to ACK. It counts
// the ACKs and BYEs it got.
type testServer struct {
	ln        net.Listener
	ca        string
	acks, bye chan string
}

func startTestServer(t *testing.T) *testServer {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	s := &testServer{ln: ln, ca: ca, acks: make(chan string, 1000), bye: make(chan string, 1000)}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

func (s *testServer) serve(c net.Conn) {
	defer c.Close()
	br := bufio.NewReader(c)
	for {
		m, err := readMessage(br)
		if err != nil {
			return
		}
		method, _, _ := strings.Cut(m.first, " ")
		reply := func(code int, reason, to string) {
			var b strings.Builder
			fmt.Fprintf(&b, "SIP/2.0 %d %s\r\n", code, reason)
			for _, v := range m.headers["via"] {
				b.WriteString("Via: " + v + "\r\n")
			}
			fmt.Fprintf(&b, "Record-Route: <sip:127.0.0.1;lr;r2=on>, <sip:127.0.0.1;transport=tls;lr>\r\n")
			fmt.Fprintf(&b, "From: %s\r\nTo: %s\r\ni: %s\r\nCSeq: %s\r\nm: <sip:127.0.0.1:9>\r\nl: 0\r\n\r\n",
				m.header("from"), to, m.header("call-id"), m.header("cseq"))
			c.Write([]byte(b.String()))
		}
		switch method {
		case "INVITE":
			reply(100, "Trying", m.header("to"))
			reply(200, "OK", m.header("to")+";tag=uas")
		case "ACK":
			if !strings.HasPrefix(m.first, "ACK sip:127.0.0.1:9 ") || len(m.headers["route"]) != 2 {
				s.acks <- "bad ACK: " + m.first
			} else {
				s.acks <- m.header("call-id")
			}
		case "BYE":
			reply(200, "OK", m.header("to"))
			s.bye <- m.header("call-id")
		}
	}
}

func summary(t *testing.T, out string) map[string]string {
	t.Helper()
	kv := map[string]string{}
	for _, l := range strings.Split(strings.TrimSpace(out), "\n") {
		k, v, ok := strings.Cut(l, "=")
		if !ok {
			t.Fatalf("summary line without =: %q", l)
		}
		kv[k] = v
	}
	return kv
}

func TestCallsAndHandshakes(t *testing.T) {
	t.Parallel()
	s := startTestServer(t)
	dir := t.TempDir()
	var out bytes.Buffer
	err := run([]string{"-mode", "calls", "-addr", s.ln.Addr().String(), "-ca", s.ca, "-rate", "40", "-secs", "0.5",
		"-conns", "2", "-uas", "127.0.0.1:9", "-timeout", "5s", "-stat", filepath.Join(dir, "calls.csv")}, &out)
	if err != nil {
		t.Fatal(err)
	}
	kv := summary(t, out.String())
	if kv["started"] != "20" || kv["successful"] != "20" || kv["failed"] != "0" || kv["version"] != "TLS 1.3" {
		t.Fatalf("calls: want 20 started and successful over TLS 1.3, have\n%s", out.String())
	}
	for range 20 {
		if a := <-s.acks; strings.HasPrefix(a, "bad") {
			t.Fatal(a)
		}
	}
	stat, err := os.ReadFile(filepath.Join(dir, "calls.csv"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(string(stat)), "\n")
	if lines[0] != "elapsed_s,started,successful,failed" || !strings.HasSuffix(lines[len(lines)-1], ",20,20,0") {
		t.Errorf("stat file: want a header and a last row of 20,20,0, have\n%s", stat)
	}

	out.Reset()
	err = run([]string{"-mode", "handshake", "-addr", s.ln.Addr().String(), "-ca", s.ca, "-rate", "100", "-secs", "0.3",
		"-tls", "1.2", "-curve", "p256"}, &out)
	if err != nil {
		t.Fatal(err)
	}
	kv = summary(t, out.String())
	if kv["successful"] != "30" || kv["resumed"] != "0" || kv["version"] != "TLS 1.2" || kv["group"] != "p256" {
		t.Fatalf("handshakes: want 30 full TLS 1.2 handshakes with P-256, have\n%s", out.String())
	}

	// A certificate the client does not trust fails every handshake, with
	// the reason.
	other := startTestServer(t)
	out.Reset()
	if err := run([]string{"-mode", "handshake", "-addr", other.ln.Addr().String(), "-ca", s.ca, "-rate", "20", "-secs", "0.1"}, &out); err != nil {
		t.Fatal(err)
	}
	kv = summary(t, out.String())
	if kv["successful"] != "0" || kv["failed"] != "2" || !strings.Contains(kv["first_error"], "certificate") {
		t.Fatalf("untrusted server: want 2 failed handshakes and the reason, have\n%s", out.String())
	}
}
