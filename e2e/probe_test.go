package e2e

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/config"
)

// defaultCfgOn is the built-in config with its SIP sockets on sipPort and
// its control address on HTTP_PORT.
func defaultCfgOn(t *testing.T, sipPort int) string {
	t.Helper()
	cfg := config.DefaultText
	for _, s := range []string{"socket = udp:127.0.0.1:5060", "socket = tcp:127.0.0.1:5060", "http_listen = 127.0.0.1:8888"} {
		if !strings.Contains(cfg, s) {
			t.Fatalf("the built-in config has no line %q any more", s)
		}
	}
	cfg = strings.ReplaceAll(cfg, "127.0.0.1:5060", "127.0.0.1:"+strconv.Itoa(sipPort))
	return strings.ReplaceAll(cfg, "127.0.0.1:8888", "127.0.0.1:HTTP_PORT")
}

// withoutAuth takes the digest authentication out of the built-in
// config's script, for tests of other things that register by hand.
func withoutAuth(t *testing.T, cfg string) string {
	t.Helper()
	for _, block := range []string{`
		if (!www_authorize("", "subscriber")) {
			www_challenge("", "0");
			exit;
		}
		consume_credentials();`, `
	if (is_method("INVITE") && is_myself($fu)) {
		if (!proxy_authorize("", "subscriber")) {
			proxy_challenge("", "0");
			exit;
		}
		consume_credentials();
	}`} {
		if !strings.Contains(cfg, block) {
			t.Fatalf("the built-in config's authentication changed; update withoutAuth:\n%s", block)
		}
		cfg = strings.Replace(cfg, block, "", 1)
	}
	return cfg
}

// tcpOptions sends an OPTIONS over a new TCP connection and returns the
// final response.
func tcpOptions(t *testing.T, sipPort int, ruri string) ovResp {
	t.Helper()
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(sipPort), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	callID := ovID()
	fmt.Fprintf(c, "OPTIONS %s SIP/2.0\r\nVia: SIP/2.0/TCP %s;branch=z9hG4bK-%s\r\nMax-Forwards: 70\r\n"+
		"From: <sip:probe@127.0.0.1>;tag=%s\r\nTo: <%s>\r\nCall-ID: %s\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n",
		ruri, c.LocalAddr(), ovID(), callID[:8], ruri, callID)
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	for {
		var head strings.Builder
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("no response to OPTIONS %s over TCP: %v", ruri, err)
			}
			head.WriteString(line)
			if line == "\r\n" {
				break
			}
		}
		m, err := ovParse([]byte(head.String()))
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := strconv.Atoi(m.header("Content-Length")); n > 0 {
			r.Discard(n)
		}
		if m.code >= 200 {
			return m
		}
	}
}

// The built-in config answers an OPTIONS probe of the server itself 200;
// while the server is suspended the front door answers it 503 with
// Retry-After over UDP and over TCP, so that a dispatcher probing it moves
// new calls elsewhere; an OPTIONS to a user is still routed by the script.
func TestProbeOfTheServer(t *testing.T) {
	sip := freePort(t)
	s := startServer(t, defaultCfgOn(t, sip))
	ua := newOvUA(t, sip)
	self := "sip:127.0.0.1:" + strconv.Itoa(sip)
	probe := func() ovResp {
		id := ovID()
		ua.send("OPTIONS", self, id, 1, "<"+self+">")
		return ua.final(id, "OPTIONS")
	}
	if m := probe(); m.code != 200 {
		t.Fatalf("want 200 to a probe, have %d\n%s", m.code, m.raw)
	}
	if m := tcpOptions(t, sip, self); m.code != 200 {
		t.Fatalf("want 200 to a probe over TCP, have %d\n%s", m.code, m.raw)
	}
	if out, err := s.ctl("suspend"); err != nil {
		t.Fatalf("ctl suspend: %v: %s", err, out)
	}
	ovWantRefused(t, "probe while suspended", probe())
	ovWantRefused(t, "probe over TCP while suspended", tcpOptions(t, sip, self))
	id := ovID()
	ua.send("OPTIONS", "sip:nobody@127.0.0.1:"+strconv.Itoa(sip), id, 1, "<sip:nobody@127.0.0.1>")
	if m := ua.final(id, "OPTIONS"); m.code != 404 {
		t.Fatalf("want the script's 404 to an OPTIONS for an unknown user while suspended, have %d\n%s", m.code, m.raw)
	}
	if out, err := s.ctl("resume"); err != nil {
		t.Fatalf("ctl resume: %v: %s", err, out)
	}
	if m := probe(); m.code != 200 {
		t.Fatalf("want 200 to a probe after resume, have %d\n%s", m.code, m.raw)
	}
	if v := s.metric("sipvisor_frontdoor_probes_refused_total"); v != 1 {
		t.Fatalf("want 1 probe refused by the UDP door, have %v", v)
	}
}
