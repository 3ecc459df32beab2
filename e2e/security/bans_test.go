package security

import (
	"bufio"
	"fmt"
	"io"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// options is an OPTIONS to the server itself at home from local, which the
// built-in script answers 200.
func options(local net.Addr, home, transport, id string) string {
	return fmt.Sprintf("OPTIONS sip:%[1]s SIP/2.0\r\n"+
		"Via: SIP/2.0/%[3]s %[2]s;branch=z9hG4bK-%[4]s\r\n"+
		"Max-Forwards: 70\r\n"+
		"From: <sip:ping@%[2]s>;tag=%[4]s\r\n"+
		"To: <sip:%[1]s>\r\n"+
		"Call-ID: %[4]s\r\n"+
		"CSeq: 1 OPTIONS\r\n"+
		"Content-Length: 0\r\n\r\n", home, local, transport, id)
}

// bansCfg is the built-in config with 127.0.0.1, whence the test floods,
// no longer exempt; action is its ban_action.
func bansCfg(t *testing.T, action string) string {
	cfg := harness.DefaultCfg0(t)
	for old, repl := range map[string]string{`ban_exempt = "127.0.0.1"`: `ban_exempt = "127.0.0.3"`, "ban_action = drop": "ban_action = " + action} {
		if !strings.Contains(cfg, old) {
			t.Fatalf("the built-in config has no line %q any more", old)
		}
		cfg = strings.Replace(cfg, old, repl, 1)
	}
	return cfg
}

// A source that floods the built-in config is banned everywhere it may
// come in: its datagrams are dropped where they are read, its new TCP
// connections closed at accept, the one it had open closed at its next
// request; another source is served meanwhile. A reload to ban_action =
// reply answers it 403 instead, and once lifted it is served again.
func TestBanReachesEveryDoor(t *testing.T) {
	t.Parallel()
	s := harness.Start(t, bansCfg(t, "drop"))
	home := s.SIPAddr("udp")
	to, _ := net.ResolveUDPAddr("udp", home)
	other, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 2)})
	if err != nil {
		t.Skipf("no 127.0.0.2 to send from: %v", err)
	}
	defer other.Close()

	// A TCP connection from the source, open before the ban and served.
	conn, err := net.Dial("tcp", s.SIPAddr("tcp"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	r := bufio.NewReader(conn)
	fmt.Fprint(conn, options(conn.LocalAddr(), home, "TCP", "tcp-"+harness.NewID()))
	conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	if line, err := r.ReadString('\n'); err != nil || !strings.HasPrefix(line, "SIP/2.0 200") {
		t.Fatalf("OPTIONS over TCP before the ban: want 200, have %q %v", line, err)
	}

	// 150 requests at once: more than pike_requests (100) in pike_window.
	flood := harness.NewPeer(t)
	for i := range 150 {
		flood.Send(to, options(flood.C.LocalAddr(), home, "UDP", fmt.Sprintf("flood-%d-%s", i, harness.NewID())))
	}
	s.WaitLog(`msg="source banned" component=supervisor source=127.0.0.1 reason=pike`, 10*time.Second)
	if n := s.Metric("sipvisor_frontdoor_banned_total", `reason="pike"`); n != 1 {
		t.Fatalf("sipvisor_frontdoor_banned_total{reason=\"pike\"}: want 1, have %v", n)
	}
	s.AwaitMetricAtLeast(1, 10*time.Second, "sipvisor_frontdoor_banned_datagrams_total")

	// Another source is served.
	id := "other-" + harness.NewID()
	if _, err := other.WriteToUDP([]byte(options(other.LocalAddr(), home, "UDP", id)), to); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 65536)
	other.SetReadDeadline(time.Now().Add(5 * time.Second))
	if n, _, err := other.ReadFromUDP(buf); err != nil || !strings.HasPrefix(string(buf[:n]), "SIP/2.0 200") {
		t.Fatalf("another source while 127.0.0.1 is banned: want 200, have %q %v", buf[:n], err)
	}

	// New connections from the banned source are closed at accept.
	c2, err := net.Dial("tcp", s.SIPAddr("tcp"))
	if err == nil {
		c2.SetReadDeadline(time.Now().Add(5 * time.Second))
		if n, err := c2.Read(buf); err != io.EOF && !isReset(err) {
			t.Errorf("a new connection from a banned source: want it closed, have %q %v", buf[:n], err)
		}
		c2.Close()
	}
	s.AwaitMetricAtLeast(1, 5*time.Second, "sipvisor_frontdoor_connections_dropped_total", `reason="banned"`)

	// The open one is closed at its next request, once the ban reached
	// its worker.
	harness.WaitFor(t, "the banned source's open connection closed", 10*time.Second, func() bool {
		fmt.Fprint(conn, options(conn.LocalAddr(), home, "TCP", "tcp-"+harness.NewID()))
		conn.SetReadDeadline(time.Now().Add(time.Second))
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				return err == io.EOF || isReset(err)
			}
			if line == "\r\n" {
				return false // a whole answer: not banned yet
			}
		}
	})
	s.AwaitMetricAtLeast(1, 5*time.Second, "sipvisor_frontdoor_connections_closed_total", `reason="banned"`)

	// ban_action = reply, by a reload: 403.
	s.Rewrite(bansCfg(t, "reply"))
	if out, err := s.Ctl("reload"); err != nil {
		t.Fatalf("ctl reload: %v: %s", err, out)
	}
	expect := func(what, status string) {
		t.Helper()
		// A socket of its own, which no earlier answer waits in; each
		// request's own answer, matched by its Call-ID.
		p := harness.NewPeer(t)
		harness.WaitFor(t, what, 10*time.Second, func() bool {
			id := "after-" + harness.NewID()
			p.Send(to, options(p.C.LocalAddr(), home, "UDP", id))
			for {
				m, ok := p.Recv(500 * time.Millisecond)
				if !ok {
					return false
				}
				if strings.Contains(m.Raw, id) {
					return strings.HasPrefix(m.First, status)
				}
			}
		})
	}
	expect("403 to the banned source after ban_action = reply", "SIP/2.0 403")

	if out, err := s.Ctl("ban", "rm", "127.0.0.1"); err != nil {
		t.Fatalf("ctl ban rm: %v: %s", err, out)
	}
	expect("200 to the source once its ban is lifted", "SIP/2.0 200")
	if out, err := s.Ctl("bans"); err != nil || !strings.Contains(out, "no bans") {
		t.Fatalf("ctl bans after the lift: %v: %s", err, out)
	}
}

func isReset(err error) bool {
	return err != nil && strings.Contains(err.Error(), "connection reset")
}
