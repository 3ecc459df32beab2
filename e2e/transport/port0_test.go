package transport

import (
	"bufio"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/ctl"
	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// logLines parses the JSON log, one object a line; a line that is not
// JSON fails the test: the supervisor and its workers share one format.
func logLines(t *testing.T, log string) []map[string]any {
	t.Helper()
	var out []map[string]any
	sc := bufio.NewScanner(strings.NewReader(log))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if sc.Text() == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			t.Fatalf("a log line that is not JSON, with -log-format json: %q", sc.Text())
		}
		out = append(out, m)
	}
	return out
}

// served is the start-up lines of the JSON log, proto → address, read
// here rather than through the harness, which only needs the addresses.
func served(t *testing.T, s *harness.Server) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, l := range logLines(t, s.Log.String()) {
		if l["msg"] == "serving" {
			out[l["proto"].(string)] = l["address"].(string)
		}
	}
	return out
}

func miSockets(t *testing.T, s *harness.Server) []ctl.Socket {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTP + "/mi/sockets")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ss []ctl.Socket
	if err := json.NewDecoder(resp.Body).Decode(&ss); err != nil {
		t.Fatalf("/mi/sockets: %v", err)
	}
	return ss
}

// A server whose sockets and control address have port 0 binds ports the
// kernel picks and says which, in its start-up log, /mi/sockets and ctl
// sockets; what it advertises and knows as itself is the port bound: a
// user registered at the UDP port is filed under the home domain with that
// port (aor_keep_port, which files the home domain's port), and calls that reach it at the TCP port, which differs, find that
// user rather than loop. A reload keeps the ports. Every log line, the
// workers' included, is JSON, and each worker line names its worker.
func TestPort0(t *testing.T) {
	t.Parallel()
	cfg := strings.Replace(harness.RegistrarCfg(), "route {\n", "route {\n\txlog(\"L_INFO\", \"port0 $rm to $ru\");\n", 1) + "\naor_keep_port = yes\n"
	s := harness.Start(t, cfg, "-log-format", "json")
	served := served(t, s)

	ss := miSockets(t, s)
	if len(ss) != 3 {
		t.Fatalf("/mi/sockets: want udp, tcp and http, have %v", ss)
	}
	for _, so := range ss {
		if strings.HasSuffix(so.Address, ":0") {
			t.Errorf("/mi/sockets: want the port bound, have %v", so)
		}
		if served[so.Proto] != so.Address {
			t.Errorf("%s: the start-up log says %q, /mi/sockets %q", so.Proto, served[so.Proto], so.Address)
		}
	}
	udp, tcp := served["udp"], served["tcp"]
	if udp == "" || tcp == "" {
		t.Fatalf("want a start-up line for the UDP and the TCP socket, have %v", served)
	}
	out, err := s.Ctl("sockets")
	if err != nil {
		t.Fatalf("ctl sockets: %v: %s", err, out)
	}
	for proto, addr := range served {
		if !strings.Contains(out, proto) || !strings.Contains(out, addr) {
			t.Errorf("ctl sockets: want %s %s, have\n%s", proto, addr, out)
		}
	}

	uas := harness.SIPpUAS(t).Port
	r := harness.RunSIPp(t, 30*time.Second, "-sf", harness.Testdata("register_transport.xml"), udp, "-s", "bob",
		"-key", "contact_port", strconv.Itoa(uas), "-key", "contact_transport", "udp",
		"-i", "127.0.0.1", "-m", "1", "-timeout", "20", "-timeout_error")
	if r.Exit != 0 || r.Successful != 1 {
		t.Fatalf("register bob: have %d/%d (exit %d)\n%s\n%s", r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 30), harness.Tail(s.Log.String(), 20))
	}
	out, err = s.Ctl("ul", "show", "--json")
	if err != nil {
		t.Fatalf("ctl ul show: %v: %s", err, out)
	}
	if aor := "sip:bob@" + udp; !strings.Contains(out, `"`+aor+`"`) {
		t.Errorf("want bob filed under %s (the home domain with the UDP port bound), have\n%s", aor, out)
	}

	viaAndRecordRoute(t, s, udp, tcp)

	calls := func(when string) {
		t.Helper()
		for _, c := range []struct{ transport, target string }{{"u1", udp}, {"t1", tcp}} {
			r := harness.RunSIPp(t, 60*time.Second, "-sn", "uac", c.target, "-s", "bob", "-t", c.transport,
				"-i", "127.0.0.1", "-r", "5", "-m", "3", "-d", "100",
				"-timeout", "40", "-timeout_error")
			if r.Exit != 0 || r.Successful != 3 || r.Failed != 0 {
				t.Fatalf("%s: 3 calls over %s to %s: have %d successful, %d failed (exit %d)\n%s\n%s",
					when, c.transport, c.target, r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 40), harness.Tail(s.Log.String(), 20))
			}
		}
	}
	calls("before the reload")

	if out, err := s.Ctl("reload"); err != nil {
		t.Fatalf("ctl reload: %v: %s", err, out)
	}
	if again := miSockets(t, s); len(again) != len(ss) || again[0] != ss[0] || again[1] != ss[1] || again[2] != ss[2] {
		t.Errorf("after a reload: want the sockets bound at start %v, have %v", ss, again)
	}
	calls("after the reload")

	workerLines := 0
	for _, l := range logLines(t, s.Log.String()) {
		if msg, _ := l["msg"].(string); !strings.HasPrefix(msg, "port0 ") {
			continue
		}
		workerLines++
		if l["group"] == nil || l["worker"] == nil || l["pid"] == nil || l["pid"] == float64(s.Cmd.Process.Pid) {
			t.Errorf("a worker's line without its group, worker and pid: %v", l)
		}
	}
	if workerLines == 0 {
		t.Errorf("want the workers' xlog lines in the log, have none\n%s", harness.Tail(s.Log.String(), 20))
	}
}

// viaAndRecordRoute registers carol at a TCP listener of the test's and
// calls her over UDP at the server's TCP port: the UDP worker must know
// that port as its own (else it relays the INVITE to itself), and the
// INVITE that reaches carol over TCP must name the TCP port bound in its
// Via and Record-Route, not the port 0 of the config or the connection's
// own ephemeral port, so that what carol sends back comes to the server.
func viaAndRecordRoute(t *testing.T, s *harness.Server, udp, tcp string) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	ua := harness.NewUA(t, harness.PortOf(t, udp))
	local, server := ua.C.LocalAddr().String(), harness.Local(harness.PortOf(t, udp))
	reg := harness.NewID()
	raw := "REGISTER sip:" + udp + " SIP/2.0\r\nVia: SIP/2.0/UDP " + local + ";branch=z9hG4bK-" + harness.NewID() + ";rport\r\n" +
		"Max-Forwards: 70\r\nFrom: <sip:carol@" + udp + ">;tag=" + reg[:8] + "\r\nTo: <sip:carol@" + udp + ">\r\n" +
		"Call-ID: " + reg + "\r\nCSeq: 1 REGISTER\r\nContact: <sip:carol@" + ln.Addr().String() + ";transport=tcp>\r\n" +
		"Expires: 3600\r\nContent-Length: 0\r\n\r\n"
	if _, err := ua.C.WriteToUDP([]byte(raw), server); err != nil {
		t.Fatal(err)
	}
	if m := ua.Final(reg, "REGISTER"); m.Code != 200 {
		t.Fatalf("register carol: want 200, have %d\n%s", m.Code, m.Raw)
	}

	call, branch := harness.NewID(), "z9hG4bK-"+harness.NewID()
	ruri := "sip:carol@" + tcp
	// The ACK of a failure answer belongs to the INVITE's transaction: it
	// carries the INVITE's branch, so both are written here.
	request := func(method, to string) {
		t.Helper()
		raw := method + " " + ruri + " SIP/2.0\r\nVia: SIP/2.0/UDP " + local + ";branch=" + branch + ";rport\r\n" +
			"Max-Forwards: 70\r\nFrom: <sip:alice@example.com>;tag=" + call[:8] + "\r\nTo: " + to + "\r\n" +
			"Call-ID: " + call + "\r\nCSeq: 1 " + method + "\r\nContact: <sip:alice@" + local + ">\r\nContent-Length: 0\r\n\r\n"
		if _, err := ua.C.WriteToUDP([]byte(raw), server); err != nil {
			t.Fatal(err)
		}
	}
	request("INVITE", "<"+ruri+">")
	ln.(*net.TCPListener).SetDeadline(time.Now().Add(10 * time.Second))
	c, err := ln.Accept()
	if err != nil {
		t.Fatalf("no connection to carol for an INVITE to %s over UDP: %v\n%s", ruri, err, harness.Tail(s.Log.String(), 20))
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	r := bufio.NewReader(c)
	var head []string
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			t.Fatalf("reading the INVITE carol gets: %v", err)
		}
		line = strings.TrimRight(line, "\r\n")
		if line == "" {
			break
		}
		head = append(head, line)
	}
	var vias, rrs []string
	reply := "SIP/2.0 486 Busy Here\r\n"
	for _, h := range head[1:] {
		name, val, _ := strings.Cut(h, ":")
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "via", "v":
			vias = append(vias, strings.TrimSpace(val))
			reply += h + "\r\n"
		case "record-route":
			rrs = append(rrs, strings.TrimSpace(val))
		case "from", "f", "call-id", "i", "cseq":
			reply += h + "\r\n"
		case "to", "t":
			reply += h + ";tag=carol\r\n"
		}
	}
	if len(vias) == 0 || !strings.HasPrefix(vias[0], "SIP/2.0/TCP "+tcp+";") {
		t.Errorf("carol's INVITE: want its top Via at %s, the TCP port bound, have %q", tcp, vias)
	}
	rr := strings.Join(rrs, ",")
	if !strings.Contains(rr, "sip:"+tcp+";") || !strings.Contains(rr, "sip:"+udp+";") {
		t.Errorf("carol's INVITE: want Record-Route to name %s (TCP) and %s (UDP), the ports bound, have %q", tcp, udp, rr)
	}
	if _, err := io.WriteString(c, reply+"Content-Length: 0\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	m := ua.Final(call, "INVITE")
	if m.Code != 486 {
		t.Fatalf("want carol's 486 back to the caller, have %d\n%s", m.Code, m.Raw)
	}
	request("ACK", m.Header("To"))
}

// A tls: socket with port 0: the worker that gets a connection to it
// knows it for the TLS socket by the port bound, so it does the handshake,
// and a request at that port is for this server (404 for a user nobody
// registered, not a relay to itself).
func TestPort0TLS(t *testing.T) {
	t.Parallel()
	pki := harness.NewPKI(t)
	pki.Issue("server", "sipvisor port0", 2)
	s := harness.Start(t, harness.TLSConfig(pki, ""), "-log-format", "json")
	served := served(t, s)
	addr := served["tls"]
	if addr == "" || strings.HasSuffix(addr, ":0") {
		t.Fatalf("want a start-up line for the tls: socket with its port, have %v", served)
	}
	if ss := miSockets(t, s); len(ss) != 4 || ss[2].Proto != "tls" || ss[2].Address != addr {
		t.Errorf("/mi/sockets: want the tls: socket third at %s, have %v", addr, ss)
	}
	ua, _, err := harness.DialTLS(t, pki, harness.PortOf(t, addr), nil)
	if err != nil {
		t.Fatalf("TLS handshake with the tls: socket at %s: %v\n%s", addr, err, harness.Tail(s.Log.String(), 20))
	}
	call := harness.NewID() + "@tls"
	ua.SendTo("nobody", "INVITE", call, 1, "<sip:nobody@"+addr+">")
	if m := ua.Final(call, "INVITE"); m.Code != 404 {
		t.Errorf("INVITE to nobody at %s: want 404, have %d\n%s", addr, m.Code, m.Raw)
	}
}
