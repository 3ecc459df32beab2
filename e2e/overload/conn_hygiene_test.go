package overload

import (
	"io"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// closedWithin waits for the server to close c, reading and discarding
// what it sends, and fails unless that happens within d.
func closedWithin(t *testing.T, what string, c net.Conn, d time.Duration) {
	t.Helper()
	c.SetReadDeadline(time.Now().Add(d))
	if _, err := io.Copy(io.Discard, c); err != nil {
		t.Fatalf("%s: want the server to close the connection within %v, have %v", what, d, err)
	}
}

// What a TCP or TLS peer may cost is bounded: one that trickles a message
// (slowloris), one that never starts its TLS handshake and one that stays
// silent are closed within their timeouts while another client is served;
// CRLF keep-alives keep a connection open; one source address gets at most
// tcp_max_connections_per_ip.
func TestConnectionHygiene(t *testing.T) {
	t.Parallel()
	pki := harness.NewPKI(t)
	pki.Issue("server", "sipvisor", 2)
	s := harness.Start(t, harness.TLSConfig(pki, `tcp_message_timeout = 1s
tls_handshake_timeout = 1s
tcp_connection_lifetime = 2s
tcp_max_connections_per_ip = 3`))
	addr := s.SIPAddr("tcp")
	dial := func(a string) net.Conn {
		t.Helper()
		c, err := net.Dial("tcp", a)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	served := func() {
		t.Helper()
		ua := harness.NewTCPUA(t, s.SIPPort("tcp"))
		id := harness.NewID()
		ua.SendTo("nobody", "OPTIONS", id, 1, "<sip:nobody@example.com>")
		if m := ua.Final(id, "OPTIONS"); m.Code != 404 {
			t.Fatalf("a client beside them: want the script's 404, have %d", m.Code)
		}
		ua.C.Close()
	}

	// Slowloris: a header line every 300 ms, never the end of the message.
	slow := dial(addr)
	stop := make(chan struct{})
	go func() {
		io.WriteString(slow, "OPTIONS sip:nobody@127.0.0.1 SIP/2.0\r\n")
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-time.After(300 * time.Millisecond):
			}
			if _, err := io.WriteString(slow, "X-Slow-"+strconv.Itoa(i)+": 1\r\n"); err != nil {
				return
			}
		}
	}()
	// A TLS client that never says hello.
	mute := dial(s.SIPAddr("tls"))
	served()
	start := time.Now()
	closedWithin(t, "a message trickled for longer than tcp_message_timeout 1s", slow, 5*time.Second)
	close(stop)
	closedWithin(t, "no TLS handshake within tls_handshake_timeout 1s", mute, 5*time.Second)
	t.Logf("slowloris and silent handshake closed within %v", time.Since(start))

	// Each close reaches the supervisor's count in a note of the worker's.
	s.AwaitMetric(0, "sipvisor_frontdoor_connections")

	// A silent connection is closed after tcp_connection_lifetime 2s; one
	// that sends CRLF keep-alives, opened with it, is not, and gets its
	// pongs: it sends them until the silent one is closed, and once more.
	idle := dial(addr)
	alive := dial(addr)
	idleClosed := make(chan error, 1)
	go func() {
		idle.SetReadDeadline(time.Now().Add(6 * time.Second))
		_, err := io.Copy(io.Discard, idle)
		idleClosed <- err
	}()
	ping := func() {
		t.Helper()
		buf := make([]byte, 2)
		io.WriteString(alive, "\r\n\r\n")
		alive.SetReadDeadline(time.Now().Add(5 * time.Second))
		if _, err := io.ReadFull(alive, buf); err != nil || string(buf) != "\r\n" {
			t.Fatalf("a CRLF keep-alive: want a CRLF pong, have %q, %v", buf, err)
		}
	}
	keepAlive := time.NewTicker(500 * time.Millisecond) // a client's keep-alive interval, under the lifetime
	defer keepAlive.Stop()
	pings := 0
	for closed := false; !closed; {
		select {
		case err := <-idleClosed:
			if err != nil {
				t.Fatalf("a connection silent past tcp_connection_lifetime 2s: want the server to close it within 6s, have %v", err)
			}
			closed = true
		case <-keepAlive.C:
			ping()
			pings++
		}
	}
	ping()
	t.Logf("the silent connection closed after %d keep-alives on the other", pings)
	served()

	// Per source: three at once (the keep-alive one is still open).
	s.AwaitMetric(1, "sipvisor_frontdoor_connections")
	extra := []net.Conn{dial(addr), dial(addr)}
	s.AwaitMetric(3, "sipvisor_frontdoor_connections")
	over := dial(addr)
	closedWithin(t, "a fourth connection from one address, tcp_max_connections_per_ip 3", over, 5*time.Second)
	if v := s.Metric("sipvisor_frontdoor_connections_dropped_total", `group="tcp"`, `reason="max_connections_per_ip"`); v != 1 {
		t.Errorf("refused for the per-IP limit: want 1, have %v", v)
	}
	for _, c := range extra {
		c.Close()
	}
	alive.Close()
	s.AwaitMetric(0, "sipvisor_frontdoor_connections")
	for _, reason := range []string{"message_timeout", "handshake", "idle"} {
		if v := s.Metric("sipvisor_frontdoor_connections_closed_total", `reason="`+reason+`"`); v < 1 {
			t.Errorf("connections closed for %s: want at least 1, have %v", reason, v)
		}
	}
	if !strings.Contains(s.Log.String(), "message_timeout") {
		t.Errorf("the slowloris close is not in the log:\n%s", harness.Tail(s.Log.String(), 20))
	}
}
