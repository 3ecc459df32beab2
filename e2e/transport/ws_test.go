package transport

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// wsUA is a SIP user agent over a WebSocket, as a browser's is: its Via
// and Contact name an unroutable *.invalid host (RFC 7118 5.2), so
// sipvisor can answer it only over the connection it opened.
type wsUA struct {
	ws    *harness.WS
	user  string
	proto string // "WS" or "WSS"
	host  string
	seq   int
}

func newWSUA(ws *harness.WS, user, proto string) *wsUA {
	return &wsUA{ws: ws, user: user, proto: proto, host: harness.NewID() + ".invalid"}
}

func (u *wsUA) contact() string {
	return "<sip:" + u.user + "@" + u.host + ";transport=" + strings.ToLower(u.proto) + ">"
}

// request is a request of the UA's: extra holds header lines (CRLF ended).
func (u *wsUA) request(method, ruri, to, callID, fromTag, extra, body string) string {
	u.seq++
	ct := ""
	if body != "" {
		ct = "Content-Type: application/sdp\r\n"
	}
	return fmt.Sprintf("%s %s SIP/2.0\r\n"+
		"Via: SIP/2.0/%s %s;branch=z9hG4bK-%s\r\n"+
		"Max-Forwards: 70\r\n"+
		"From: <sip:%s@127.0.0.1>;tag=%s\r\n"+
		"To: %s\r\n"+
		"Call-ID: %s\r\n"+
		"CSeq: %d %s\r\n"+
		"Contact: %s\r\n"+
		"%s%s"+
		"Content-Length: %d\r\n\r\n%s",
		method, ruri, u.proto, u.host, harness.NewID(), u.user, fromTag, to, callID, u.seq, method, u.contact(), extra, ct, len(body), body)
}

func (u *wsUA) register(t *testing.T) harness.Msg {
	t.Helper()
	u.ws.Send(u.request("REGISTER", "sip:127.0.0.1", "<sip:"+u.user+"@127.0.0.1>", harness.NewID(), "r", "Expires: 600\r\n", ""))
	return u.ws.Expect(5*time.Second, "a final answer to the REGISTER", func(m harness.Msg) bool { return m.Status() >= 200 })
}

// call calls ruri and hangs up: INVITE, 200, ACK and BYE, the in-dialog
// requests by the route set the 200's Record-Route gave; up, when set,
// runs while the call is up. It returns the 200 to the INVITE.
func (u *wsUA) call(t *testing.T, ruri string, up func()) harness.Msg {
	t.Helper()
	callID, to := harness.NewID(), "<"+ruri+">"
	sdp := "v=0\r\no=- 1 1 IN IP4 127.0.0.1\r\ns=-\r\nc=IN IP4 127.0.0.1\r\nt=0 0\r\nm=audio 6000 RTP/AVP 0\r\n"
	u.ws.Send(u.request("INVITE", ruri, to, callID, "c", "", sdp))
	ok := u.ws.Expect(10*time.Second, "200 to the INVITE", func(m harness.Msg) bool { return m.Status() >= 200 })
	if ok.Status() != 200 {
		t.Fatalf("INVITE over %s answered %s", u.proto, ok.First)
	}
	var rr []string
	for _, l := range ok.Lines()[1:] {
		if name, v, _ := strings.Cut(l, ":"); strings.EqualFold(strings.TrimSpace(name), "Record-Route") {
			rr = append(rr, strings.TrimSpace(v))
		}
	}
	// Our own hop is the last Record-Route: the one facing us, with the
	// transport we came in on, so in-dialog requests come back on it.
	if len(rr) == 0 || !strings.Contains(rr[len(rr)-1], "transport="+strings.ToLower(u.proto)) {
		t.Fatalf("the 200's Record-Route %q does not name the %s hop facing the caller", rr, u.proto)
	}
	var route string
	for i := len(rr) - 1; i >= 0; i-- {
		route += "Route: " + rr[i] + "\r\n"
	}
	remote := strings.Trim(ok.Header("Contact"), "<>")
	toTagged := ok.Header("To")
	u.ws.Send(strings.Replace(u.request("ACK", remote, toTagged, callID, "c", route, ""), fmt.Sprintf("CSeq: %d ACK", u.seq), "CSeq: 1 ACK", 1))
	if up != nil {
		up()
	}
	u.ws.Send(u.request("BYE", remote, toTagged, callID, "c", route, ""))
	bye := u.ws.Expect(10*time.Second, "200 to the BYE", func(m harness.Msg) bool { return m.Status() >= 200 && strings.HasSuffix(m.Header("CSeq"), "BYE") })
	if bye.Status() != 200 {
		t.Fatalf("BYE over %s answered %s", u.proto, bye.First)
	}
	return ok
}

// wsConfig is the registrar script with ws: and wss: sockets beside UDP,
// TCP and TLS.
func wsConfig(pki *harness.PKI, extra string) string {
	return harness.TLSConfig(pki, "socket = ws:127.0.0.1:0\nsocket = wss:127.0.0.1:0\n"+extra)
}

// A client over ws: and over wss: registers and calls a SIPp callee on
// UDP through sipvisor, and hangs up; the Upgrade from an origin not
// allowed is refused with 403; frames that break RFC 6455 close their
// connection with the status that says why.
func TestWebSocket(t *testing.T) {
	t.Parallel()
	pki := harness.NewPKI(t)
	pki.Issue("server", "sipvisor one", 2)
	s := harness.Start(t, wsConfig(pki, `ws_allowed_origins = "https://phone.example.com"`+"\n"))
	udp := s.SIPAddr("udp")
	// A callee that copies Record-Route (SIPp's built-in uas does not),
	// so that the caller's ACK and BYE follow the route set back through
	// the WebSocket hop.
	callee := harness.SIPpServe(t, "-sf", harness.Path("examples/sipp-uas-rr.xml"), "-i", "127.0.0.1").Port
	r := harness.RunSIPp(t, 30*time.Second, "-sf", harness.Testdata("register_transport.xml"), udp, "-s", "bob",
		"-key", "contact_port", strconv.Itoa(callee), "-key", "contact_transport", "udp",
		"-i", "127.0.0.1", "-m", "1", "-timeout", "20", "-timeout_error")
	if r.Exit != 0 || r.Successful != 1 {
		t.Fatalf("register bob: %d/%d (exit %d)\n%s", r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 30))
	}
	bob := "sip:bob@" + udp

	for _, tr := range []struct {
		proto string
		conf  *tls.Config
	}{
		{"ws", nil},
		{"wss", &tls.Config{RootCAs: pki.Pool, ServerName: "127.0.0.1"}},
	} {
		t.Run(tr.proto, func(t *testing.T) {
			ws := harness.SIPOverWS(t, s.SIPAddr(tr.proto), tr.conf)
			defer ws.Close()
			ua := newWSUA(ws, "alice-"+tr.proto, strings.ToUpper(tr.proto))
			if m := ua.register(t); m.Status() != 200 {
				t.Fatalf("REGISTER over %s answered %s", tr.proto, m.First)
			}
			if b := s.Bindings("sip:alice-" + tr.proto + "@127.0.0.1"); len(b) != 1 {
				t.Fatalf("want alice-%s's one binding, have %v", tr.proto, b)
			}
			// The call counts as a session of the TCP group while it is up,
			// as one over TCP does, and no longer once it ended.
			ua.call(t, bob, func() {
				s.AwaitMetricAtLeast(1, 10*time.Second, "sipvisor_frontdoor_sessions", `group="tcp"`, `kind="call"`)
			})
			s.AwaitMetric(0, "sipvisor_frontdoor_sessions", `group="tcp"`, `kind="call"`)
			// A ping between messages is answered with its payload.
			if err := ws.WriteRaw(harness.Frame(true, 9, []byte("hi"), false)); err != nil {
				t.Fatal(err)
			}
			_, op, p, err := ws.ReadFrame(5 * time.Second)
			if err != nil || op != 10 || string(p) != "hi" {
				t.Fatalf("ping answered with op %d %q, %v; want a pong \"hi\"", op, p, err)
			}
		})
	}

	// A request toward a WebSocket client goes over its connection when
	// routing names the connection's source address with ;transport=ws,
	// whichever worker the request comes to: here a UDP peer's in-dialog
	// request whose Route names it (as a dialog's route set or a flow
	// would), and the client's answer comes back to the peer.
	t.Run("toward the client", func(t *testing.T) {
		ws := harness.SIPOverWS(t, s.SIPAddr("ws"), nil)
		defer ws.Close()
		ua := newWSUA(ws, "dave", "WS")
		if m := ua.register(t); m.Status() != 200 {
			t.Fatalf("REGISTER: %s", m.First)
		}
		client := ws.C.LocalAddr().String()
		peer := harness.NewPeer(t)
		id := harness.NewID()
		peer.Send(harness.Local(harness.PortOf(t, udp)), fmt.Sprintf("INFO sip:dave@%s;transport=ws SIP/2.0\r\n"+
			"Via: SIP/2.0/UDP 127.0.0.1:%d;branch=z9hG4bK-%s\r\n"+
			"Route: <sip:%s;transport=ws;lr>\r\n"+
			"Max-Forwards: 70\r\n"+
			"From: <sip:erin@127.0.0.1>;tag=e1\r\n"+
			"To: <sip:dave@127.0.0.1>;tag=d1\r\n"+
			"Call-ID: %s\r\n"+
			"CSeq: 2 INFO\r\n"+
			"Content-Length: 0\r\n\r\n", ua.host, peer.Port(), id, client, id))
		req := ws.Expect(10*time.Second, "the INFO over the client's connection", harness.IsMethod("INFO"))
		ws.Send(harness.ReplyTo(req, 200, "OK", ""))
		if m, _ := peer.Expect(10*time.Second, "the client's 200", func(m harness.Msg) bool { return m.Status() >= 200 }); m.Status() != 200 {
			t.Fatalf("the INFO to the client was answered %s", m.First)
		}
		// A UDP worker took it, and handed it to the one reading the
		// connection.
		if v := s.Metric("sipvisor_frontdoor_requests_passed_total", `outcome="passed"`); v < 1 {
			t.Errorf("want the INFO passed to the worker that reads the connection, have %v passed", v)
		}
	})

	t.Run("origin", func(t *testing.T) {
		addr := s.SIPAddr("ws")
		for origin, want := range map[string]int{"https://evil.example": 403, "https://phone.example.com": 101} {
			ws, code, err := harness.DialWS(t, addr, "/", nil, map[string]string{"Sec-WebSocket-Protocol": "sip", "Origin": origin})
			if err != nil || code != want {
				t.Fatalf("Upgrade from %s: %d, %v; want %d", origin, code, err, want)
			}
			if ws != nil {
				ws.Close()
			}
		}
		if _, code, err := harness.DialWS(t, addr, "/", nil, map[string]string{"Sec-WebSocket-Protocol": "chat"}); err != nil || code != 400 {
			t.Fatalf("Upgrade without the sip subprotocol: %d, %v; want 400", code, err)
		}
		s.AwaitMetricAtLeast(1, 10*time.Second, "sipvisor_frontdoor_connections_closed_total", `reason="origin"`)
	})

	t.Run("bad frames", func(t *testing.T) {
		for _, bad := range []struct {
			name   string
			frame  []byte
			status int
		}{
			{"unmasked", harness.Frame(true, 1, []byte("OPTIONS"), true), 1002},
			{"reserved opcode", harness.Frame(true, 3, []byte("x"), false), 1002},
			{"over 64 KiB", harness.Frame(true, 1, make([]byte, 70000), false), 1009},
			{"text not UTF-8", harness.Frame(true, 1, []byte{0xc3, 0x28}, false), 1007},
		} {
			ws := harness.SIPOverWS(t, s.SIPAddr("ws"), nil)
			if err := ws.WriteRaw(bad.frame); err != nil {
				t.Fatalf("%s: %v", bad.name, err)
			}
			var closed *harness.WSClosed
			if _, err := ws.Recv(10 * time.Second); !errors.As(err, &closed) || closed.Status != bad.status {
				t.Fatalf("%s: %v; want a close with status %d", bad.name, err, bad.status)
			}
			// Closed: an EOF, or a reset when sipvisor closed with bytes of
			// ours unread (the rest of the frame over 64 KiB).
			if _, _, _, err := ws.ReadFrame(10 * time.Second); !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("%s: after the close frame: %v; want the connection closed", bad.name, err)
			}
			ws.Close()
		}
		s.AwaitMetricAtLeast(4, 10*time.Second, "sipvisor_frontdoor_connections_closed_total", `reason="malformed"`)
		// The peer's close is answered.
		ws := harness.SIPOverWS(t, s.SIPAddr("ws"), nil)
		ws.WriteRaw(harness.Frame(true, 8, []byte{0x03, 0xe8}, false))
		var closed *harness.WSClosed
		if _, err := ws.Recv(10 * time.Second); !errors.As(err, &closed) || closed.Status != 1000 {
			t.Fatalf("close: %v; want the close answered with 1000", err)
		}
		ws.Close()
	})
}

// The guards of the TCP path hold for WebSocket connections: the limit
// per address at accept, the handshake timeout (here, an Upgrade that
// never comes), the idle timeout (with a close frame), and admission
// control's 503 for a new call while the server is suspended.
func TestWebSocketLimits(t *testing.T) {
	t.Parallel()
	pki := harness.NewPKI(t)
	pki.Issue("server", "sipvisor one", 2)
	s := harness.Start(t, wsConfig(pki, "tcp_max_connections_per_ip = 3\ntls_handshake_timeout = 1\ntcp_connection_lifetime = 2\ntcp_message_timeout = 1\n"))
	addr := s.SIPAddr("ws")

	// The idle one is closed with 1001 (going away) after 2 s.
	idle := harness.SIPOverWS(t, addr, nil)
	defer idle.Close()
	start := time.Now()
	var closed *harness.WSClosed
	if _, err := idle.Recv(20 * time.Second); !errors.As(err, &closed) || closed.Status != 1001 {
		t.Fatalf("idle: %v; want a close with 1001", err)
	}
	t.Logf("idle connection closed after %v", time.Since(start).Round(100*time.Millisecond))
	s.AwaitMetricAtLeast(1, 10*time.Second, "sipvisor_frontdoor_connections_closed_total", `reason="idle"`)

	// A message begun and never ended is cut at tcp_message_timeout,
	// however many pings come between its fragments.
	slow := harness.SIPOverWS(t, addr, nil)
	defer slow.Close()
	slow.WriteRaw(harness.Frame(false, 1, []byte("INVITE sip:bob@127.0.0.1 SIP/2.0\r\n"), false))
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		for {
			select {
			case <-stop:
				return
			case <-time.After(200 * time.Millisecond): // a client's pings, paced
				if slow.WriteRaw(harness.Frame(true, 9, nil, false)) != nil {
					return
				}
			}
		}
	}()
	start = time.Now()
	for {
		if time.Since(start) > 20*time.Second {
			t.Fatalf("a message begun 20 s ago, kept open by pings, still holds its connection")
		}
		_, op, _, err := slow.ReadFrame(20 * time.Second)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, syscall.ECONNRESET) {
				t.Fatalf("a message never ended: %v; want its connection closed", err)
			}
			break
		}
		if op != 10 {
			t.Fatalf("a message never ended: frame %d before the close, want pongs", op)
		}
	}
	t.Logf("a message never ended was cut after %v", time.Since(start).Round(100*time.Millisecond))
	s.AwaitMetricAtLeast(1, 10*time.Second, "sipvisor_frontdoor_connections_closed_total", `reason="message_timeout"`)

	// No Upgrade within tls_handshake_timeout: closed.
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetReadDeadline(time.Now().Add(20 * time.Second))
	if _, err := c.Read(make([]byte, 1)); !errors.Is(err, io.EOF) {
		t.Fatalf("a connection without Upgrade: %v; want it closed", err)
	}
	s.AwaitMetricAtLeast(1, 10*time.Second, "sipvisor_frontdoor_connections_closed_total", `reason="handshake"`)

	// Three at most from one address: the fourth is closed at accept.
	var open []*harness.WS
	for range 3 {
		open = append(open, harness.SIPOverWS(t, addr, nil))
	}
	defer func() {
		for _, ws := range open {
			ws.Close()
		}
	}()
	if ws, code, err := harness.DialWS(t, addr, "/", nil, map[string]string{"Sec-WebSocket-Protocol": "sip"}); err == nil {
		ws.Close()
		t.Fatalf("a fourth connection from 127.0.0.1 was upgraded (%d); want it refused", code)
	}
	if v := s.Metric("sipvisor_frontdoor_connections_dropped_total", `group="tcp"`, `reason="max_connections_per_ip"`); v < 1 {
		t.Fatalf("want the fourth connection dropped for max_connections_per_ip, have %v", v)
	}

	// Suspended: a new call over WebSocket is refused 503, as over UDP.
	ua := newWSUA(open[0], "carol", "WS")
	if out, err := s.Ctl("suspend"); err != nil {
		t.Fatalf("ctl suspend: %v: %s", err, out)
	}
	s.AwaitSuspended(true)
	open[0].Send(ua.request("INVITE", "sip:bob@127.0.0.1", "<sip:bob@127.0.0.1>", harness.NewID(), "c", "", ""))
	m := open[0].Expect(10*time.Second, "an answer to the INVITE", func(m harness.Msg) bool { return m.Status() >= 200 })
	if m.Status() != 503 || m.Header("Retry-After") == "" {
		t.Fatalf("INVITE over ws while suspended: %s; want 503 with Retry-After", m.First)
	}
}

// A draining worker gives its WebSocket connections back between messages
// and another worker goes on reading them: the TCP group scaled down from
// 2 workers to 1 closes no client's connection, and every client
// registers again over the connection it had.
func TestWebSocketScaleDown(t *testing.T) {
	t.Parallel()
	pki := harness.NewPKI(t)
	pki.Issue("server", "sipvisor one", 2)
	cfg := func(cooldown int) string {
		return strings.Replace(wsConfig(pki, fmt.Sprintf(`
auto_scaling_profile = P
	scale up to 2 on 90%% for 2 cycles within 3
	scale down to 1 on 30%% for 3 cycles
auto_scaling_cycle = 0.2
auto_scaling_cooldown = %d
tcp_workers = 2 use_auto_scaling_profile P
`, cooldown)), "tcp_workers = 1\n", "", 1)
	}
	s := harness.Start(t, cfg(3000))
	if n, all := harness.Live(s.PS(), "tcp"); n != 2 {
		t.Fatalf("want 2 TCP workers, have %v", all)
	}
	var uas []*wsUA
	for i := range 6 {
		ws := harness.SIPOverWS(t, s.SIPAddr("ws"), nil)
		defer ws.Close()
		ua := newWSUA(ws, "ws"+strconv.Itoa(i), "WS")
		if m := ua.register(t); m.Status() != 200 {
			t.Fatalf("REGISTER: %s", m.First)
		}
		uas = append(uas, ua)
	}
	s.Rewrite(cfg(1))
	if out, err := s.Ctl("reload"); err != nil {
		t.Fatalf("ctl reload: %v: %s", err, out)
	}
	s.AwaitMetricAtLeast(1, 60*time.Second, "sipvisor_pool_worker_exits_total", `group="tcp"`, `reason="clean"`)
	if v := s.Metric("sipvisor_frontdoor_connections_handed_off_total"); v < 1 {
		t.Fatalf("want connections handed off by the drained worker, have %v", v)
	}
	for _, ua := range uas {
		if m := ua.register(t); m.Status() != 200 {
			t.Fatalf("REGISTER after the scale-down: %s", m.First)
		}
	}
	for _, reason := range []string{"idle", "message_timeout", "malformed", "worker_exit", "handoff_failed", "handshake"} {
		if v := s.MetricAbsentAs0("sipvisor_frontdoor_connections_closed_total", `reason="`+reason+`"`); v != 0 {
			t.Errorf("connections closed by sipvisor for %s: want 0, have %v", reason, v)
		}
	}
}
