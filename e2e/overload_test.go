package e2e

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/ctl"
)

// overloadCfg is proxyCfg plus a registrar, so that new INVITEs, new
// REGISTERs and refreshes of existing bindings can all be tried on one
// server. Cycles are short so that a watermark change takes effect quickly.
func overloadCfg(sipPort, uasPort int, extra string) string {
	return proxyConfig("sip:127.0.0.1:"+strconv.Itoa(uasPort), sipPort,
		"udp_workers = 1\ntcp_workers = 1\nauto_scaling_cycle = 0.2\n"+extra, true)
}

// ovUA speaks SIP over a plain UDP socket, so the test sees every byte of
// the server's answers (status, Retry-After) and controls Call-ID and CSeq.
type ovUA struct {
	t      *testing.T
	c      *net.UDPConn
	server *net.UDPAddr
	local  string
}

func newOvUA(t *testing.T, sipPort int) *ovUA {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &ovUA{t: t, c: c, local: c.LocalAddr().String(),
		server: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sipPort}}
}

func ovID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ovResp is a parsed response: the status and the headers the tests read.
type ovResp struct {
	code    int
	raw     string
	headers map[string]string // lower-case name → first value
}

func (m ovResp) header(name string) string { return m.headers[strings.ToLower(name)] }

// toTag is the tag parameter of the To header.
func (m ovResp) toTag() string {
	to := m.header("To")
	i := strings.Index(to, ";tag=")
	if i < 0 {
		return ""
	}
	tag := to[i+5:]
	if j := strings.IndexAny(tag, ";> "); j >= 0 {
		tag = tag[:j]
	}
	return tag
}

var ovCompact = map[string]string{"i": "call-id", "t": "to", "f": "from", "v": "via", "m": "contact", "l": "content-length"}

func ovParse(b []byte) (ovResp, error) {
	s := string(b)
	head, _, _ := strings.Cut(s, "\r\n\r\n")
	lines := strings.Split(head, "\r\n")
	f := strings.Fields(lines[0])
	if len(f) < 2 || f[0] != "SIP/2.0" {
		return ovResp{}, fmt.Errorf("not a response: %q", lines[0])
	}
	code, err := strconv.Atoi(f[1])
	if err != nil {
		return ovResp{}, fmt.Errorf("status code %q: %w", f[1], err)
	}
	m := ovResp{code: code, raw: s, headers: map[string]string{}}
	for _, l := range lines[1:] {
		name, val, ok := strings.Cut(l, ":")
		if !ok {
			continue
		}
		name = strings.ToLower(strings.TrimSpace(name))
		if full, ok := ovCompact[name]; ok {
			name = full
		}
		if _, seen := m.headers[name]; !seen {
			m.headers[name] = strings.TrimSpace(val)
		}
	}
	return m, nil
}

// send writes one request. to is the To header's value (with a tag for an
// in-dialog request).
func (u *ovUA) send(method, ruri, callID string, cseq int, to string, extra ...string) {
	u.t.Helper()
	var b strings.Builder
	fmt.Fprintf(&b, "%s %s SIP/2.0\r\n", method, ruri)
	fmt.Fprintf(&b, "Via: SIP/2.0/UDP %s;branch=z9hG4bK-%s;rport\r\n", u.local, ovID())
	if !strings.HasPrefix(strings.Join(extra, "\n"), "Max-Forwards:") {
		b.WriteString("Max-Forwards: 70\r\n")
	}
	fmt.Fprintf(&b, "From: <sip:alice@example.com>;tag=%s\r\n", callID[:8])
	fmt.Fprintf(&b, "To: %s\r\n", to)
	fmt.Fprintf(&b, "Call-ID: %s\r\n", callID)
	fmt.Fprintf(&b, "CSeq: %d %s\r\n", cseq, method)
	fmt.Fprintf(&b, "Contact: <sip:alice@%s>\r\n", u.local)
	for _, h := range extra {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("Content-Length: 0\r\n\r\n")
	if _, err := u.c.WriteToUDP([]byte(b.String()), u.server); err != nil {
		u.t.Fatal(err)
	}
}

// final waits for the final response to the request of callID with the
// given CSeq method, skipping provisional answers and other calls' traffic.
func (u *ovUA) final(callID, method string) ovResp {
	u.t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	buf := make([]byte, 65535)
	for {
		u.c.SetReadDeadline(deadline)
		n, _, err := u.c.ReadFromUDP(buf)
		if err != nil {
			u.t.Fatalf("no final response to %s %s: %v", method, callID, err)
		}
		m, err := ovParse(buf[:n])
		if err != nil || m.code < 200 || m.header("Call-ID") != callID || !strings.HasSuffix(m.header("CSeq"), " "+method) {
			continue
		}
		return m
	}
}

// register sends a REGISTER for alice and returns its final response.
func (u *ovUA) register(callID string, cseq int) ovResp {
	u.t.Helper()
	u.send("REGISTER", "sip:example.com", callID, cseq, "<sip:alice@example.com>", "Expires: 3600")
	return u.final(callID, "REGISTER")
}

// invite sends a new INVITE and returns its final response; a 2xx is
// acknowledged and the call hung up at once, so nothing is left open.
func (u *ovUA) invite() ovResp {
	u.t.Helper()
	callID := ovID() + "@raw"
	u.send("INVITE", "sip:bob@example.com", callID, 1, "<sip:bob@example.com>")
	m := u.final(callID, "INVITE")
	if m.code/100 == 2 {
		to := "<sip:bob@example.com>;tag=" + m.toTag()
		u.send("ACK", "sip:bob@example.com", callID, 1, to)
		u.send("BYE", "sip:bob@example.com", callID, 2, to)
		if bye := u.final(callID, "BYE"); bye.code != 200 {
			u.t.Errorf("want 200 to the BYE of a relayed call, have %d", bye.code)
		}
	}
	return m
}

// ovWantRefused checks a 503 from admission control, with its Retry-After.
func ovWantRefused(t *testing.T, what string, m ovResp) {
	t.Helper()
	if m.code != 503 {
		t.Fatalf("%s: want 503, have %d\n%s", what, m.code, m.raw)
	}
	if ra, err := strconv.Atoi(m.header("Retry-After")); err != nil || ra <= 0 {
		t.Fatalf("%s: want a Retry-After of some seconds, have %q\n%s", what, m.header("Retry-After"), m.raw)
	}
}

// ovServer adds the overload checks to a running server.
type ovServer struct{ *server }

// stats is `ctl stats --json`.
func (s ovServer) stats() ctl.Stats {
	s.t.Helper()
	out, err := s.ctl("stats", "--json")
	if err != nil {
		s.t.Fatalf("ctl stats: %v: %s", err, out)
	}
	var st ctl.Stats
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		s.t.Fatalf("ctl stats --json: %v: %s", err, out)
	}
	return st
}

// resource reads one row of `ctl resource-monitor --json`.
func (s ovServer) resource(name string) ctl.Resource {
	s.t.Helper()
	out, err := s.ctl("resource-monitor", "--json")
	if err != nil {
		s.t.Fatalf("ctl resource-monitor: %v: %s", err, out)
	}
	var rs []ctl.Resource
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		s.t.Fatalf("ctl resource-monitor --json: %v: %s", err, out)
	}
	for _, r := range rs {
		if r.Name == name {
			return r
		}
	}
	s.t.Fatalf("resource-monitor has no %s: %s", name, out)
	return ctl.Resource{}
}

// set runs `ctl set` and fails the test if it is refused.
func (s ovServer) set(path, value string) {
	s.t.Helper()
	if out, err := s.ctl("set", path, value); err != nil {
		s.t.Fatalf("ctl set %s %s: %v: %s", path, value, err, out)
	}
}

// cycles is how many monitoring cycles the server has completed.
func (s ovServer) cycles() float64 {
	return s.metric("sipvisor_supervisor_cycle_duration_seconds_count")
}

// status is the HTTP status of a GET on the control address.
func (s ovServer) status(path string) int {
	s.t.Helper()
	resp, err := http.Get("http://" + s.http + path)
	if err != nil {
		s.t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// awaitMetric waits until a metric's series reads want.
func (s ovServer) awaitMetric(want float64, series ...string) {
	s.t.Helper()
	name, labels := series[0], series[1:]
	deadline := time.Now().Add(20 * time.Second)
	for {
		v := s.mustMetric(name, labels...)
		if v == want {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s%v: want %v within 20s, have %v", name, labels, want, v)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitSuspended waits until the server's suspended state is want, and
// returns how many cycles that took.
func (s ovServer) awaitSuspended(want bool) float64 {
	s.t.Helper()
	c0 := s.cycles()
	deadline := time.Now().Add(20 * time.Second)
	for s.stats().Suspended != want {
		if time.Now().After(deadline) {
			s.t.Fatalf("want suspended=%v within 20s, have %v\n%s", want, !want, tail(s.log.String(), 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
	return s.cycles() - c0
}

// holdsFor checks that the suspended state stays want for n whole cycles:
// the hysteresis band changes nothing in either direction.
func (s ovServer) holdsFor(want bool, n float64) {
	s.t.Helper()
	c0 := s.cycles()
	deadline := time.Now().Add(30 * time.Second)
	for s.cycles() < c0+n+1 {
		if st := s.stats(); st.Suspended != want {
			s.t.Fatalf("want suspended=%v to hold, have %v (%v)", want, st.Suspended, st.SuspendReasons)
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("fewer than %v cycles in 30s", n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// awaitResource waits until a resource-monitor row reads want.
func (s ovServer) awaitResource(name string, want float64) {
	s.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := s.resource(name)
		if r.Value == want {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("%s: want %v, have %v", name, want, r.Value)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ovSIPpBackground runs a SIPp uac while the test goes on; wait returns its
// result.
func ovSIPpBackground(t *testing.T, timeout time.Duration, args ...string) (wait func() sippResult) {
	done := make(chan sippResult, 1)
	go func() { done <- runSIPp(t, timeout, args...) }()
	return func() sippResult {
		t.Helper()
		select {
		case r := <-done:
			return r
		case <-time.After(timeout + 10*time.Second):
			t.Fatal("sipp did not end")
			return sippResult{}
		}
	}
}

// Lowering number_of_sessions' watermarks under the live count suspends the
// server: new INVITEs and REGISTERs get 503 + Retry-After, the calls already
// up finish, a binding is refreshed; between the watermarks nothing changes
// in either direction; the calls' BYEs bring the count under the low
// watermark, which resumes it.
func TestSuspendOnSessionWatermark(t *testing.T) {
	sip, uas, uac := freePort(t), freePort(t), freePort(t)
	s := ovServer{startServer(t, overloadCfg(sip, uas, "retry_after = 7-9"))}
	sippUAS(t, uas)
	ua := newOvUA(t, sip)

	regID := ovID() + "@reg"
	if m := ua.register(regID, 1); m.code != 200 {
		t.Fatalf("want 200 to the first REGISTER, have %d\n%s", m.code, m.raw)
	}

	// Ten calls held long enough that the suspension and the checks below
	// come while they are up (about 13 s here; 25 s leaves room on a
	// loaded machine).
	const calls = 10
	hold := 25 * time.Second
	start := time.Now()
	wait := ovSIPpBackground(t, 90*time.Second, "-sn", "uac", "127.0.0.1:"+strconv.Itoa(sip), "-i", "127.0.0.1", "-p", strconv.Itoa(uac),
		"-r", "20", "-m", strconv.Itoa(calls), "-d", strconv.Itoa(int(hold.Milliseconds())), "-timeout", "60", "-timeout_error")
	s.awaitResource("number_of_sessions", calls+1)

	// Between the watermarks a running server keeps running.
	s.set("suspend_watermarks/number_of_sessions/low", "5")
	s.set("suspend_watermarks/number_of_sessions/high", "12")
	s.holdsFor(false, 5)

	s.set("suspend_watermarks/number_of_sessions/high", "8")
	n := s.awaitSuspended(true)
	t.Logf("suspended %v cycles after the high watermark went under the session count", n)
	suspendedAt := time.Now()

	ovWantRefused(t, "new INVITE while suspended", ua.invite())
	ovWantRefused(t, "new REGISTER while suspended", ua.register(ovID()+"@reg", 1))
	if m := ua.register(regID, 2); m.code != 200 {
		t.Errorf("re-REGISTER of a live binding while suspended: want 200, have %d\n%s", m.code, m.raw)
	}
	if c := s.status("/readyz"); c != http.StatusServiceUnavailable {
		t.Errorf("/readyz while suspended: want 503, have %d", c)
	}
	if c := s.status("/healthz"); c != http.StatusOK {
		t.Errorf("/healthz while suspended: want 200, have %d", c)
	}
	st := s.stats()
	if !strings.Contains(st.Warning, "suspended due to high resource usage") || !strings.Contains(st.Warning, "number_of_sessions") {
		t.Errorf("want the warning to name number_of_sessions, have %q", st.Warning)
	}
	out, _ := s.ctl("stats")
	if !strings.Contains(out, "not accepting new sessions") || !strings.Contains(out, "number_of_sessions") {
		t.Errorf("ctl stats while suspended: want the not-accepting state and its reason, have\n%s", out)
	}
	if v := s.metric("sipvisor_frontdoor_refused_sessions_total", `reason="suspended"`); v != 2 {
		t.Errorf("refused_sessions_total{reason=suspended}: want 2, have %v", v)
	}
	if v := s.metric("sipvisor_overload_suspended"); v != 1 {
		t.Errorf("sipvisor_overload_suspended: want 1, have %v", v)
	}

	// Over the low watermark and under the high one a suspended server
	// stays suspended.
	s.set("suspend_watermarks/number_of_sessions/high", "20")
	s.holdsFor(true, 5)

	if suspendedAt.Sub(start) >= hold {
		t.Fatalf("the suspension came %v after the calls started, after their BYEs were due; the test proves nothing", suspendedAt.Sub(start))
	}
	r := wait()
	if r.Successful != calls || r.Failed != 0 {
		t.Fatalf("calls up before the suspension: want %d successful and 0 failed, have %d/%d (exit %d)\n%s", calls, r.Successful, r.Failed, r.Exit, tail(r.Out, 40))
	}

	// Their BYEs end the calls: the count falls to the one registration,
	// under the low watermark, and the server resumes by itself.
	s.awaitResource("number_of_sessions", 1)
	n = s.awaitSuspended(false)
	t.Logf("resumed %v cycles after the calls ended", n)
	if m := ua.invite(); m.code != 200 {
		t.Fatalf("new INVITE after resuming: want 200, have %d\n%s", m.code, m.raw)
	}
	if c := s.status("/readyz"); c != http.StatusOK {
		t.Errorf("/readyz after resuming: want 200, have %d", c)
	}
	if v := s.metric("sipvisor_overload_suspensions_total", `reason="number_of_sessions"`); v != 1 {
		t.Errorf("suspensions_total{reason=number_of_sessions}: want 1, have %v", v)
	}
}

// A high watermark under the machine's memory use suspends the server; the
// defaults back resume it.
func TestSuspendOnSystemMemoryWatermark(t *testing.T) {
	sip, uas := freePort(t), freePort(t)
	s := ovServer{startServer(t, overloadCfg(sip, uas, ""))}
	sippUAS(t, uas)
	ua := newOvUA(t, sip)

	mem := s.resource("system_memory_usage").Value
	if mem < 0.5 {
		t.Skipf("system memory use %.2f%% leaves no room for a watermark under it", mem)
	}
	low, high := fmt.Sprintf("%.2f", mem/4), fmt.Sprintf("%.2f", mem/2)
	s.set("suspend_watermarks/system_memory_usage/low", low)
	s.set("suspend_watermarks/system_memory_usage/high", high)
	s.awaitSuspended(true)
	st := s.stats()
	if len(st.SuspendReasons) == 0 || !strings.Contains(st.SuspendReasons[0], "system_memory_usage") {
		t.Errorf("want system_memory_usage as the reason, have %v", st.SuspendReasons)
	}
	if !s.resource("system_memory_usage").Over {
		t.Errorf("resource-monitor: want system_memory_usage marked over its threshold")
	}
	ovWantRefused(t, "new INVITE while suspended", ua.invite())
	if c := s.status("/readyz"); c != http.StatusServiceUnavailable {
		t.Errorf("/readyz while suspended: want 503, have %d", c)
	}

	s.set("suspend_watermarks/system_memory_usage/high", "85")
	s.set("suspend_watermarks/system_memory_usage/low", "70")
	s.awaitSuspended(false)
	if m := ua.invite(); m.code != 200 {
		t.Fatalf("new INVITE after resuming: want 200, have %d\n%s", m.code, m.raw)
	}
}

// Refused control input changes nothing: the whole settings tree reads the
// same afterwards. With http_token set, requests without it or with another
// one are refused with 401.
func TestBadControlInputChangesNothing(t *testing.T) {
	t.Setenv("SIPVISOR_CTL_TOKEN", "")
	const tok = "e2e-token-1"
	sip, uas := freePort(t), freePort(t)
	s := ovServer{startServer(t, overloadCfg(sip, uas, `http_token = "`+tok+`"`))}
	withToken := func(args ...string) (string, error) { return s.ctl(append([]string{"-token", tok}, args...)...) }

	before, err := withToken("get")
	if err != nil {
		t.Fatalf("ctl get: %v: %s", err, before)
	}
	for _, c := range []struct {
		path, value, why string
	}{
		{"suspend_watermarks/system_memory_usage/hihg", "90", "did you mean"},
		{"no/such/path", "1", "unknown path"},
		{"suspend_watermarks", "90", "group of settings"},
		{"suspend_watermarks/system_memory_usage/high", "ninety", "not a number"},
		{"suspend_watermarks/system_memory_usage/high", "NaN", "not a usable number"},
		{"suspend_watermarks/system_memory_usage/high", "Inf", "not a usable number"},
		{"suspend_watermarks/system_memory_usage/high", "120", "outside"},
		{"suspend_watermarks/system_memory_usage/high", "-1", "outside"},
		{"suspend_watermarks/system_memory_usage/low", "90", "must be below high watermark"},
		{"suspend_watermarks/system_memory_usage/low", "85", "must be below high watermark"},
		{"suspend_watermarks/system_memory_usage/high", "70", "must be below high watermark"},
		{"suspend_watermarks/number_of_sessions/low", "-5", "0 or more"},
		{"suspend_watermarks/number_of_sessions/high", "1.5", "whole number"},
		{"limits/max_calls", "-1", "0 or more"},
		{"limits/max_sessions", "many", "not a number"},
		{"limits/queue_admission_threshold", "95", "over 90%"},
		{"suspend/enable", "maybe", "not a switch"},
	} {
		out, err := withToken("set", c.path, c.value)
		if err == nil {
			t.Errorf("ctl set %s %s: want refused, have accepted: %s", c.path, c.value, out)
			continue
		}
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
			t.Errorf("ctl set %s %s: want exit 1, have %v", c.path, c.value, err)
		}
		if !strings.Contains(out, c.why) {
			t.Errorf("ctl set %s %s: want a reason with %q, have %q", c.path, c.value, c.why, out)
		}
	}

	// No token, the wrong one, in either header: 401 and no change.
	for _, h := range []struct{ name, value string }{
		{"", ""},
		{"Authorization", "Bearer wrong"},
		{"Authorization", "Bearer " + tok + "x"},
		{"Authorization", tok},
		{"X-Sipvisor-Token", "wrong"},
	} {
		for _, r := range []struct{ method, path string }{
			{"POST", "/mi/set/suspend_watermarks/system_memory_usage/high?value=90"},
			{"POST", "/mi/set/limits/max_calls?value=1"},
			{"POST", "/mi/suspend"},
			{"GET", "/mi/get/"},
			{"GET", "/mi/stats"},
		} {
			req, _ := http.NewRequest(r.method, "http://"+s.http+r.path, nil)
			if h.name != "" {
				req.Header.Set(h.name, h.value)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusUnauthorized {
				t.Errorf("%s %s with %s %q: want 401, have %d", r.method, r.path, h.name, h.value, resp.StatusCode)
			}
		}
	}
	for _, args := range [][]string{
		{"set", "limits/max_calls", "1"},
		{"-token", "wrong", "set", "limits/max_calls", "1"},
		{"-token", "wrong", "suspend"},
		{"get"},
	} {
		if out, err := s.ctl(args...); err == nil || !strings.Contains(out, "token") {
			t.Errorf("ctl %v: want refused for the token, have %v: %s", args, err, out)
		}
	}

	after, err := withToken("get")
	if err != nil {
		t.Fatalf("ctl get: %v: %s", err, after)
	}
	if after != before {
		t.Errorf("settings changed by refused input:\nbefore\n%s\nafter\n%s", before, after)
	}
	if c := s.status("/readyz"); c != http.StatusOK {
		t.Errorf("/readyz after refused suspends: want 200, have %d", c)
	}

	// The right token does change a setting, so the refusals above were
	// about the input and not a server that refuses everything.
	if out, err := withToken("set", "suspend_watermarks/system_memory_usage/high", "90"); err != nil {
		t.Fatalf("ctl set with the token: %v: %s", err, out)
	}
	if out, _ := withToken("get", "suspend_watermarks/system_memory_usage/high"); strings.TrimSpace(out) != "suspend_watermarks/system_memory_usage/high = 90" {
		t.Errorf("want high = 90 after a good set, have %q", out)
	}
}

// With max_calls = N, the N+1-th concurrent call gets 503 + Retry-After;
// registrations, another kind, are still admitted; raising the limit at run
// time admits calls again.
func TestMaxCallsLimit(t *testing.T) {
	sip, uas, uac := freePort(t), freePort(t), freePort(t)
	s := ovServer{startServer(t, overloadCfg(sip, uas, "max_calls = 3"))}
	sippUAS(t, uas)
	ua := newOvUA(t, sip)

	wait := ovSIPpBackground(t, 60*time.Second, "-sn", "uac", "127.0.0.1:"+strconv.Itoa(sip), "-i", "127.0.0.1", "-p", strconv.Itoa(uac),
		"-r", "10", "-m", "3", "-d", "8000", "-timeout", "40", "-timeout_error")
	s.awaitResource("max_calls", 3)
	if !s.resource("max_calls").Over {
		t.Errorf("resource-monitor: want max_calls marked at its limit")
	}
	ovWantRefused(t, "call over max_calls", ua.invite())
	if v := s.metric("sipvisor_frontdoor_refused_sessions_total", `reason="limit"`); v != 1 {
		t.Errorf("refused_sessions_total{reason=limit}: want 1, have %v", v)
	}
	if m := ua.register(ovID()+"@reg", 1); m.code != 200 {
		t.Errorf("REGISTER with calls at their limit: want 200, have %d", m.code)
	}
	if c := s.status("/readyz"); c != http.StatusOK {
		t.Errorf("/readyz at a session limit: want 200 (not suspended), have %d", c)
	}

	s.set("limits/max_calls", "5")
	if m := ua.invite(); m.code != 200 {
		t.Errorf("call under a raised max_calls: want 200, have %d\n%s", m.code, m.raw)
	}
	if r := wait(); r.Successful != 3 || r.Failed != 0 {
		t.Fatalf("calls under the limit: want 3 successful and 0 failed, have %d/%d\n%s", r.Successful, r.Failed, tail(r.Out, 30))
	}
}

// A call counts as a session from its INVITE to its BYE however long it
// stays silent: three calls held 70 s with no message between ACK and BYE
// keep max_calls = 3 full the whole time, past the 32 s Call-ID affinity
// lasts and past a minute; OPTIONS outside a dialog are no session at all.
func TestMaxCallsCountsSilentCalls(t *testing.T) {
	if testing.Short() {
		t.Skip("calls held for 70 s")
	}
	sip, uas, uac := freePort(t), freePort(t), freePort(t)
	s := ovServer{startServer(t, overloadCfg(sip, uas, "max_calls = 3"))}
	sippUAS(t, uas)
	ua := newOvUA(t, sip)

	const probes = 50
	for range probes {
		ua.send("OPTIONS", "sip:bob@example.com", ovID()+"@opt", 1, "<sip:bob@example.com>")
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.mustMetric("sipvisor_frontdoor_datagrams_received_total") < probes {
		if time.Now().After(deadline) {
			t.Fatal("the OPTIONS did not reach the front door")
		}
		time.Sleep(20 * time.Millisecond) // polling a counter, not asserting after a sleep
	}
	if v := s.mustMetric("sipvisor_frontdoor_sessions"); v != 0 {
		t.Errorf("sessions after %d OPTIONS: want 0, have %v", probes, v)
	}
	if r := s.resource("number_of_sessions"); r.Value != 0 {
		t.Errorf("number_of_sessions after %d OPTIONS: want 0, have %v", probes, r.Value)
	}

	const hold = 70 * time.Second
	wait := ovSIPpBackground(t, hold+60*time.Second, "-sn", "uac", "127.0.0.1:"+strconv.Itoa(sip), "-i", "127.0.0.1", "-p", strconv.Itoa(uac),
		"-r", "10", "-m", "3", "-d", strconv.Itoa(int(hold.Milliseconds())), "-timeout", "120", "-timeout_error")
	s.awaitResource("max_calls", 3)
	up := time.Now()
	for _, at := range []time.Duration{40 * time.Second, 62 * time.Second} {
		time.Sleep(time.Until(up.Add(at))) // the passing time is what is tested: silence past affinity and past a minute
		if r := s.resource("max_calls"); r.Value != 3 || !r.Over {
			t.Errorf("%v into silent calls: want max_calls at 3 and at its limit, have %v (over %v)", at, r.Value, r.Over)
		}
		ovWantRefused(t, fmt.Sprintf("a fourth call %v into three silent ones", at), ua.invite())
	}
	if r := wait(); r.Successful != 3 || r.Failed != 0 {
		t.Fatalf("the silent calls: want 3 successful and 0 failed, have %d/%d\n%s", r.Successful, r.Failed, tail(r.Out, 30))
	}
	s.awaitResource("max_calls", 0)
}

// A group whose queue is fuller than queue_admission_threshold takes no new
// sessions. The worker is stopped (SIGSTOP) so that its queue fills exactly
// as far as the test sends, then continued.
func TestQueueAdmissionThreshold(t *testing.T) {
	sip, uas := freePort(t), freePort(t)
	// No RTT throttle: a stopped worker's echo would trip it too.
	s := ovServer{startServer(t, overloadCfg(sip, uas, "throttle_enable = no"))}
	sippUAS(t, uas)
	ua := newOvUA(t, sip)
	s.set("limits/queue_admission_threshold", "1")
	group := "udp:127.0.0.1:" + strconv.Itoa(sip)

	var pid int
	for _, g := range s.ps() {
		if g.Name == group && len(g.Workers) == 1 {
			pid = g.Workers[0].Pid
		}
	}
	if pid == 0 {
		t.Fatalf("no single worker in group %s: %+v", group, s.ps())
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cont := func() { syscall.Kill(pid, syscall.SIGCONT) }
	defer cont()

	// 1% of the worker's queue is 41 frames. OPTIONS are not new sessions
	// and are queued whatever the threshold; with Max-Forwards 0 the script
	// answers them statelessly, so no transaction outlives the test.
	for i := 0; i < 100; i++ {
		ua.send("OPTIONS", "sip:bob@example.com", ovID()+"@opt", 1, "<sip:bob@example.com>", "Max-Forwards: 0")
	}
	deadline := time.Now().Add(20 * time.Second)
	for !s.resource("queue_admission/" + group).Over {
		if time.Now().After(deadline) {
			t.Fatalf("queue usage did not pass 1%%: %+v", s.resource("queue_admission/"+group))
		}
		time.Sleep(20 * time.Millisecond)
	}
	ovWantRefused(t, "INVITE to a group over its queue admission threshold", ua.invite())
	if v := s.metric("sipvisor_frontdoor_refused_sessions_total", `reason="queue"`); v != 1 {
		t.Errorf("refused_sessions_total{reason=queue}: want 1, have %v", v)
	}
	cont()

	deadline = time.Now().Add(20 * time.Second)
	for s.resource("queue_admission/" + group).Over {
		if time.Now().After(deadline) {
			t.Fatal("the continued worker did not empty its queue")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if m := ua.invite(); m.code != 200 {
		t.Fatalf("INVITE once the queue emptied: want 200, have %d\n%s", m.code, m.raw)
	}
}

// ctl suspend refuses new sessions whatever the monitors say, keeps
// refreshes of bindings working, and ctl resume lifts it; resume with no
// operator suspension is refused and changes nothing.
func TestManualSuspendResume(t *testing.T) {
	sip, uas := freePort(t), freePort(t)
	s := ovServer{startServer(t, overloadCfg(sip, uas, ""))}
	sippUAS(t, uas)
	ua := newOvUA(t, sip)
	regID := ovID() + "@reg"
	if m := ua.register(regID, 1); m.code != 200 {
		t.Fatalf("want 200 to the first REGISTER, have %d", m.code)
	}
	s.awaitResource("number_of_sessions", 1)

	out, err := s.ctl("suspend")
	if err != nil || !strings.Contains(out, "suspended") {
		t.Fatalf("ctl suspend: %v: %s", err, out)
	}
	st := s.stats()
	if !st.Suspended || !st.SuspendedManually {
		t.Fatalf("after ctl suspend: want suspended by the operator, have %+v", st)
	}
	ovWantRefused(t, "new INVITE while suspended by the operator", ua.invite())
	ovWantRefused(t, "new REGISTER while suspended by the operator", ua.register(ovID()+"@reg", 1))
	if m := ua.register(regID, 2); m.code != 200 {
		t.Errorf("re-REGISTER while suspended by the operator: want 200, have %d", m.code)
	}
	if c := s.status("/readyz"); c != http.StatusServiceUnavailable {
		t.Errorf("/readyz while suspended by the operator: want 503, have %d", c)
	}
	if c := s.status("/healthz"); c != http.StatusOK {
		t.Errorf("/healthz while suspended by the operator: want 200, have %d", c)
	}
	// No monitor is over its watermark, yet cycles do not lift it.
	s.holdsFor(true, 3)

	if out, err := s.ctl("resume"); err != nil || !strings.Contains(out, "running") {
		t.Fatalf("ctl resume: %v: %s", err, out)
	}
	if s.stats().Suspended {
		t.Fatal("still suspended after ctl resume")
	}
	if m := ua.invite(); m.code != 200 {
		t.Fatalf("new INVITE after ctl resume: want 200, have %d\n%s", m.code, m.raw)
	}
	if out, err := s.ctl("resume"); err == nil {
		t.Errorf("ctl resume when running: want refused, have %s", out)
	}
	if s.stats().Suspended {
		t.Error("a refused resume changed the state")
	}
	if v := s.metric("sipvisor_overload_suspensions_total", `reason="operator"`); v != 1 {
		t.Errorf("suspensions_total{reason=operator}: want 1, have %v", v)
	}
}

// A worker whose script blocks 40 ms on each INVITE gets a burst of new
// calls: admission by queue delay (the default 250 ms) lets in what the
// worker can answer within it and refuses the rest with 503, by reason
// "queue"; turned off, the whole burst queues.
func TestQueueDelayAdmission(t *testing.T) {
	sip := freePort(t)
	s := ovServer{startServer(t, `
socket = udp:127.0.0.1:`+strconv.Itoa(sip)+`
http_listen = 127.0.0.1:HTTP_PORT
udp_workers = 1
auto_scaling_cycle = 0.2
# The echo throttle would refuse too; this test is about the queue.
throttle_enable = no
route {
	if (is_method("INVITE"))
		usleep(40000);
	sl_send_reply(486, "Busy Here");
}
`)}
	caller := newPeer(t)
	proxy := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sip}
	invite := func(id string) string {
		return fmt.Sprintf("INVITE sip:bob@127.0.0.1 SIP/2.0\r\n"+
			"Via: SIP/2.0/UDP 127.0.0.1:%[1]d;branch=z9hG4bK-%[2]s\r\n"+
			"Max-Forwards: 70\r\n"+
			"From: <sip:alice@127.0.0.1>;tag=%[2]s\r\n"+
			"To: <sip:bob@127.0.0.1>\r\n"+
			"Call-ID: %[2]s\r\n"+
			"CSeq: 1 INVITE\r\n"+
			"Content-Length: 0\r\n\r\n", caller.port(), id)
	}
	// burst sends n INVITEs at once and counts the answers by code.
	burst := func(name string, n int) map[int]int {
		t.Helper()
		for i := 0; i < n; i++ {
			caller.send(proxy, invite(fmt.Sprintf("%s-%d-%d", name, i, time.Now().UnixNano())))
		}
		codes := map[int]int{}
		for got := 0; got < n; got++ {
			m, ok := caller.recv(30 * time.Second)
			if !ok {
				t.Fatalf("%s: want %d answers, have %v", name, n, codes)
			}
			codes[m.status()]++
		}
		return codes
	}
	// The estimate needs a cycle that saw the worker at work.
	if codes := burst("warm-up", 3); codes[486] != 3 {
		t.Fatalf("warm-up: want 3 × 486, have %v", codes)
	}
	time.Sleep(time.Second)

	// 30 INVITEs of 40 ms each are 1.2 s of work: well past 250 ms.
	codes := burst("burst", 30)
	if codes[486]+codes[503] != 30 || codes[503] < 10 || codes[486] < 3 {
		t.Errorf("burst of 30: want most refused with 503 and the first few served, have %v", codes)
	}
	if v := s.metric("sipvisor_frontdoor_refused_sessions_total", `reason="queue"`); v != float64(codes[503]) {
		t.Errorf("refused_sessions_total{reason=queue}: want %d, have %v", codes[503], v)
	}

	group := "udp:127.0.0.1:" + strconv.Itoa(sip)
	if r := s.resource("queue_delay/" + group); r.High != 0.25 || r.Unit != "s" {
		t.Errorf("resource-monitor queue_delay/%s: want a 0.25 s threshold, have %+v", group, r)
	}
	s.set("limits/queue_delay_admission", "0")
	if codes := burst("unlimited", 30); codes[486] != 30 {
		t.Errorf("queue delay admission off: want all 30 served, have %v", codes)
	}
}
