package overload

import (
	"bufio"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// tcpOptions sends an OPTIONS over a new TCP connection and returns the
// final response.
func tcpOptions(t *testing.T, sipPort int, ruri string) harness.Resp {
	t.Helper()
	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(sipPort), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	callID := harness.NewID()
	fmt.Fprintf(c, "OPTIONS %s SIP/2.0\r\nVia: SIP/2.0/TCP %s;branch=z9hG4bK-%s\r\nMax-Forwards: 70\r\n"+
		"From: <sip:probe@127.0.0.1>;tag=%s\r\nTo: <%s>\r\nCall-ID: %s\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n",
		ruri, c.LocalAddr(), harness.NewID(), callID[:8], ruri, callID)
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
		m, err := harness.Parse([]byte(head.String()))
		if err != nil {
			t.Fatal(err)
		}
		if n, _ := strconv.Atoi(m.Header("Content-Length")); n > 0 {
			r.Discard(n)
		}
		if m.Code >= 200 {
			return m
		}
	}
}

// The built-in config answers an OPTIONS probe of the server itself 200;
// while the server is suspended the front door answers it 503 with
// Retry-After over UDP and over TCP, so that a dispatcher probing it moves
// new calls elsewhere; an OPTIONS to a user is still routed by the script.
func TestProbeOfTheServer(t *testing.T) {
	t.Parallel()
	s := harness.Start(t, harness.DefaultCfg0(t))
	sip, tcp := s.SIPPort("udp"), s.SIPPort("tcp")
	ua := harness.NewUA(t, sip)
	self, selfTCP := "sip:"+s.SIPAddr("udp"), "sip:"+s.SIPAddr("tcp")
	probe := func() harness.Resp {
		id := harness.NewID()
		ua.Send("OPTIONS", self, id, 1, "<"+self+">")
		return ua.Final(id, "OPTIONS")
	}
	if m := probe(); m.Code != 200 {
		t.Fatalf("want 200 to a probe, have %d\n%s", m.Code, m.Raw)
	}
	if m := tcpOptions(t, tcp, selfTCP); m.Code != 200 {
		t.Fatalf("want 200 to a probe over TCP, have %d\n%s", m.Code, m.Raw)
	}
	if out, err := s.Ctl("suspend"); err != nil {
		t.Fatalf("ctl suspend: %v: %s", err, out)
	}
	harness.WantRefused(t, "probe while suspended", probe())
	harness.WantRefused(t, "probe over TCP while suspended", tcpOptions(t, tcp, selfTCP))
	id := harness.NewID()
	ua.Send("OPTIONS", "sip:nobody@127.0.0.1:"+strconv.Itoa(sip), id, 1, "<sip:nobody@127.0.0.1>")
	if m := ua.Final(id, "OPTIONS"); m.Code != 404 {
		t.Fatalf("want the script's 404 to an OPTIONS for an unknown user while suspended, have %d\n%s", m.Code, m.Raw)
	}
	if out, err := s.Ctl("resume"); err != nil {
		t.Fatalf("ctl resume: %v: %s", err, out)
	}
	if m := probe(); m.Code != 200 {
		t.Fatalf("want 200 to a probe after resume, have %d\n%s", m.Code, m.Raw)
	}
	// Each refusal counted where it was sent: one by the UDP door, one on
	// a connection, on the supervisor's word.
	if v := s.Metric("sipvisor_frontdoor_probes_refused_total", `group="tcp"`); v != 1 {
		t.Fatalf("want 1 probe refused over TCP, have %v", v)
	}
	if v := s.Metric("sipvisor_frontdoor_probes_refused_total"); v != 2 {
		t.Fatalf("want 2 probes refused, one by the UDP door, have %v", v)
	}
}
