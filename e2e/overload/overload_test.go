package overload

import (
	"fmt"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// Lowering number_of_sessions' watermarks under the live count suspends the
// server: new INVITEs and REGISTERs get 503 + Retry-After, the calls already
// up finish, a binding is refreshed; between the watermarks nothing changes
// in either direction; the calls' BYEs bring the count under the low
// watermark, which resumes it.
func TestSuspendOnSessionWatermark(t *testing.T) {
	t.Parallel()
	s := harness.Start(t, harness.OverloadCfg(harness.SIPpUAS(t).Port, "retry_after = 7-9"))
	sip := s.SIPPort("udp")
	ua := harness.NewUA(t, sip)

	regID := harness.NewID() + "@reg"
	if m := ua.Register(regID, 1); m.Code != 200 {
		t.Fatalf("want 200 to the first REGISTER, have %d\n%s", m.Code, m.Raw)
	}

	// Ten calls up, held until the checks below are done.
	const calls = 10
	up := dialCalls(t, ua, calls)
	// The binding is no session: the count is the calls'. It is counted
	// among the bindings, whence its refresh is known below.
	s.AwaitResource("number_of_sessions", calls)
	s.AwaitResource("max_registrations", 1)

	// Between the watermarks a running server keeps running.
	s.Set("suspend_watermarks/number_of_sessions/low", "5")
	s.Set("suspend_watermarks/number_of_sessions/high", "12")
	s.HoldsFor(false, 5)

	s.Set("suspend_watermarks/number_of_sessions/high", "8")
	n := s.AwaitSuspended(true)
	t.Logf("suspended %v cycles after the high watermark went under the session count", n)

	harness.WantRefused(t, "new INVITE while suspended", ua.Invite())
	harness.WantRefused(t, "new REGISTER while suspended", ua.Register(harness.NewID()+"@reg", 1))
	if m := ua.Register(regID, 2); m.Code != 200 {
		t.Errorf("re-REGISTER of a live binding while suspended: want 200, have %d\n%s", m.Code, m.Raw)
	}
	if c := s.Status("/readyz"); c != http.StatusServiceUnavailable {
		t.Errorf("/readyz while suspended: want 503, have %d", c)
	}
	if c := s.Status("/healthz"); c != http.StatusOK {
		t.Errorf("/healthz while suspended: want 200, have %d", c)
	}
	st := s.Stats()
	if !strings.Contains(st.Warning, "suspended due to high resource usage") || !strings.Contains(st.Warning, "number_of_sessions") {
		t.Errorf("want the warning to name number_of_sessions, have %q", st.Warning)
	}
	out, _ := s.Ctl("stats")
	if !strings.Contains(out, "not accepting new sessions") || !strings.Contains(out, "number_of_sessions") {
		t.Errorf("ctl stats while suspended: want the not-accepting state and its reason, have\n%s", out)
	}
	if v := s.Metric("sipvisor_frontdoor_refused_sessions_total", `reason="suspended"`); v != 2 {
		t.Errorf("refused_sessions_total{reason=suspended}: want 2, have %v", v)
	}
	if v := s.Metric("sipvisor_overload_suspended"); v != 1 {
		t.Errorf("sipvisor_overload_suspended: want 1, have %v", v)
	}

	// Over the low watermark and under the high one a suspended server
	// stays suspended.
	s.Set("suspend_watermarks/number_of_sessions/high", "20")
	s.HoldsFor(true, 5)

	hangUp(t, ua, up, "calls up before the suspension")

	// Their BYEs end the calls: the count falls to none (the binding is
	// no session), under the low watermark, and the server resumes by
	// itself.
	s.AwaitResource("number_of_sessions", 0)
	n = s.AwaitSuspended(false)
	t.Logf("resumed %v cycles after the calls ended", n)
	if m := ua.Invite(); m.Code != 200 {
		t.Fatalf("new INVITE after resuming: want 200, have %d\n%s", m.Code, m.Raw)
	}
	if c := s.Status("/readyz"); c != http.StatusOK {
		t.Errorf("/readyz after resuming: want 200, have %d", c)
	}
	if v := s.Metric("sipvisor_overload_suspensions_total", `reason="number_of_sessions"`); v != 1 {
		t.Errorf("suspensions_total{reason=number_of_sessions}: want 1, have %v", v)
	}
}

// A high watermark under the machine's memory use suspends the server; the
// defaults back resume it.
func TestSuspendOnSystemMemoryWatermark(t *testing.T) {
	t.Parallel()
	s := harness.Start(t, harness.OverloadCfg(harness.SIPpUAS(t).Port, ""))
	sip := s.SIPPort("udp")
	ua := harness.NewUA(t, sip)

	mem := s.Resource("system_memory_usage").Value
	if mem < 0.5 {
		t.Skipf("system memory use %.2f%% leaves no room for a watermark under it", mem)
	}
	low, high := fmt.Sprintf("%.2f", mem/4), fmt.Sprintf("%.2f", mem/2)
	s.Set("suspend_watermarks/system_memory_usage/low", low)
	s.Set("suspend_watermarks/system_memory_usage/high", high)
	s.AwaitSuspended(true)
	st := s.Stats()
	if len(st.SuspendReasons) == 0 || !strings.Contains(st.SuspendReasons[0], "system_memory_usage") {
		t.Errorf("want system_memory_usage as the reason, have %v", st.SuspendReasons)
	}
	if !s.Resource("system_memory_usage").Over {
		t.Errorf("resource-monitor: want system_memory_usage marked over its threshold")
	}
	harness.WantRefused(t, "new INVITE while suspended", ua.Invite())
	if c := s.Status("/readyz"); c != http.StatusServiceUnavailable {
		t.Errorf("/readyz while suspended: want 503, have %d", c)
	}

	s.Set("suspend_watermarks/system_memory_usage/high", "85")
	s.Set("suspend_watermarks/system_memory_usage/low", "70")
	s.AwaitSuspended(false)
	if m := ua.Invite(); m.Code != 200 {
		t.Fatalf("new INVITE after resuming: want 200, have %d\n%s", m.Code, m.Raw)
	}
}

// Refused control input changes nothing: the whole settings tree reads the
// same afterwards. With http_token set, requests without it or with another
// one are refused with 401.
func TestBadControlInputChangesNothing(t *testing.T) {
	t.Parallel()
	const tok = "e2e-token-1"
	// No call is made: the callee is a socket that answers nothing.
	s := harness.Start(t, harness.OverloadCfg(harness.NewPeer(t).Port(), `http_token = "`+tok+`"`))
	withToken := func(args ...string) (string, error) { return s.Ctl(append([]string{"-token", tok}, args...)...) }

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
			req, _ := http.NewRequest(r.method, "http://"+s.HTTP+r.path, nil)
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
		if out, err := s.Ctl(args...); err == nil || !strings.Contains(out, "token") {
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
	if c := s.Status("/readyz"); c != http.StatusOK {
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
	t.Parallel()
	s := harness.Start(t, harness.OverloadCfg(harness.SIPpUAS(t).Port, "max_calls = 3"))
	sip := s.SIPPort("udp")
	ua := harness.NewUA(t, sip)

	up := dialCalls(t, ua, 3)
	s.AwaitResource("max_calls", 3)
	if !s.Resource("max_calls").Over {
		t.Errorf("resource-monitor: want max_calls marked at its limit")
	}
	harness.WantRefused(t, "call over max_calls", ua.Invite())
	if v := s.Metric("sipvisor_frontdoor_refused_sessions_total", `reason="limit"`); v != 1 {
		t.Errorf("refused_sessions_total{reason=limit}: want 1, have %v", v)
	}
	if m := ua.Register(harness.NewID()+"@reg", 1); m.Code != 200 {
		t.Errorf("REGISTER with calls at their limit: want 200, have %d", m.Code)
	}
	if c := s.Status("/readyz"); c != http.StatusOK {
		t.Errorf("/readyz at a session limit: want 200 (not suspended), have %d", c)
	}

	s.Set("limits/max_calls", "5")
	if m := ua.Invite(); m.Code != 200 {
		t.Errorf("call under a raised max_calls: want 200, have %d\n%s", m.Code, m.Raw)
	}
	hangUp(t, ua, up, "calls under the limit")
	s.AwaitResource("max_calls", 0)
}

// dialCalls sets up n calls through ua and leaves them up.
func dialCalls(t *testing.T, ua *harness.UA, n int) []harness.Call {
	t.Helper()
	var up []harness.Call
	for i := range n {
		m, c := ua.Dial()
		if m.Code != 200 {
			t.Fatalf("call %d of %d: want 200, have %d\n%s", i+1, n, m.Code, m.Raw)
		}
		up = append(up, c)
	}
	return up
}

// hangUp ends the calls; each BYE must be answered 200.
func hangUp(t *testing.T, ua *harness.UA, calls []harness.Call, what string) {
	t.Helper()
	for i, c := range calls {
		if bye := ua.HangUp(c); bye.Code != 200 {
			t.Fatalf("%s: BYE of call %d: want 200, have %d\n%s", what, i+1, bye.Code, bye.Raw)
		}
	}
}

// A call counts as a session from its INVITE to its BYE however long it
// stays silent: three calls held over a minute with no message between ACK
// and BYE keep max_calls = 3 full the whole time, past the 32 s Call-ID
// affinity lasts and past a minute; OPTIONS outside a dialog are no session
// at all.
func TestMaxCallsCountsSilentCalls(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("calls held for over a minute")
	}
	s := harness.Start(t, harness.OverloadCfg(harness.SIPpUAS(t).Port, "max_calls = 3"))
	sip := s.SIPPort("udp")
	ua := harness.NewUA(t, sip)

	const probes = 50
	for range probes {
		ua.Send("OPTIONS", "sip:bob@example.com", harness.NewID()+"@opt", 1, "<sip:bob@example.com>")
	}
	s.AwaitPortDatagrams(probes, 10*time.Second)
	if v := s.Metric("sipvisor_frontdoor_sessions"); v != 0 {
		t.Errorf("sessions after %d OPTIONS: want 0, have %v", probes, v)
	}
	if r := s.Resource("number_of_sessions"); r.Value != 0 {
		t.Errorf("number_of_sessions after %d OPTIONS: want 0, have %v", probes, r.Value)
	}

	silent := dialCalls(t, ua, 3)
	s.AwaitResource("max_calls", 3)
	up := time.Now()
	for _, at := range []time.Duration{40 * time.Second, 62 * time.Second} {
		time.Sleep(time.Until(up.Add(at))) // the passing time is what is tested: silence past affinity and past a minute
		if r := s.Resource("max_calls"); r.Value != 3 || !r.Over {
			t.Errorf("%v into silent calls: want max_calls at 3 and at its limit, have %v (over %v)", at, r.Value, r.Over)
		}
		harness.WantRefused(t, fmt.Sprintf("a fourth call %v into three silent ones", at), ua.Invite())
	}
	hangUp(t, ua, silent, "the silent calls")
	s.AwaitResource("max_calls", 0)
}

// A group whose queue is fuller than queue_admission_threshold takes no new
// sessions. The worker is stopped (SIGSTOP) so that its queue fills exactly
// as far as the test sends, then continued.
func TestQueueAdmissionThreshold(t *testing.T) {
	t.Parallel()
	// No RTT throttle (OverloadCfg): a stopped worker's echo would trip it too.
	s := harness.Start(t, harness.OverloadCfg(harness.SIPpUAS(t).Port, ""))
	sip := s.SIPPort("udp")
	ua := harness.NewUA(t, sip)
	s.Set("limits/queue_admission_threshold", "1")
	group := "udp:127.0.0.1:" + strconv.Itoa(sip)

	var pid int
	for _, g := range s.PS() {
		if g.Name == group && len(g.Workers) == 1 {
			pid = g.Workers[0].Pid
		}
	}
	if pid == 0 {
		t.Fatalf("no single worker in group %s: %+v", group, s.PS())
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	cont := func() { syscall.Kill(pid, syscall.SIGCONT) }
	defer cont()

	// 1% of the worker's queue is 41 frames. OPTIONS are not new sessions
	// and are queued whatever the threshold; with Max-Forwards 0 the script
	// answers them statelessly, so no transaction outlives the test.
	// With direct reads (udp_direct_reads) the worker's queue is its socket,
	// 1% of whose buffer takes more of them: they are sent until the
	// threshold is passed, 3,000 at most.
	// They come from a socket of their own, whose answers nobody reads: the
	// INVITEs' answers must not be lost among them.
	flood := harness.NewUA(t, sip)
	sent := 0
	over := func() bool { return s.Resource("queue_admission/" + group).Over }
	for sent < 3000 && (sent < 100 || !over()) {
		for range 100 {
			flood.Send("OPTIONS", "sip:bob@example.com", harness.NewID()+"@opt", 1, "<sip:bob@example.com>", "Max-Forwards: 0")
		}
		sent += 100
	}
	harness.WaitFor(t, "queue usage over 1%", 20*time.Second, over)
	s.AwaitDoorDecides()
	harness.WantRefused(t, "INVITE to a group over its queue admission threshold", ua.Invite())
	if v := s.Metric("sipvisor_frontdoor_refused_sessions_total", `reason="queue"`); v != 1 {
		t.Errorf("refused_sessions_total{reason=queue}: want 1, have %v", v)
	}
	cont()

	harness.WaitFor(t, "the continued worker's queue emptied", 20*time.Second, func() bool { return !s.Resource("queue_admission/" + group).Over })
	if m := ua.Invite(); m.Code != 200 {
		t.Fatalf("INVITE once the queue emptied: want 200, have %d\n%s", m.Code, m.Raw)
	}
}

// ctl suspend refuses new sessions whatever the monitors say, keeps
// refreshes of bindings working, and ctl resume lifts it; resume with no
// operator suspension is refused and changes nothing.
func TestManualSuspendResume(t *testing.T) {
	t.Parallel()
	s := harness.Start(t, harness.OverloadCfg(harness.SIPpUAS(t).Port, ""))
	sip := s.SIPPort("udp")
	ua := harness.NewUA(t, sip)
	regID := harness.NewID() + "@reg"
	if m := ua.Register(regID, 1); m.Code != 200 {
		t.Fatalf("want 200 to the first REGISTER, have %d", m.Code)
	}
	s.AwaitResource("max_registrations", 1)

	out, err := s.Ctl("suspend")
	if err != nil || !strings.Contains(out, "suspended") {
		t.Fatalf("ctl suspend: %v: %s", err, out)
	}
	st := s.Stats()
	if !st.Suspended || !st.SuspendedManually {
		t.Fatalf("after ctl suspend: want suspended by the operator, have %+v", st)
	}
	harness.WantRefused(t, "new INVITE while suspended by the operator", ua.Invite())
	harness.WantRefused(t, "new REGISTER while suspended by the operator", ua.Register(harness.NewID()+"@reg", 1))
	if m := ua.Register(regID, 2); m.Code != 200 {
		t.Errorf("re-REGISTER while suspended by the operator: want 200, have %d", m.Code)
	}
	if c := s.Status("/readyz"); c != http.StatusServiceUnavailable {
		t.Errorf("/readyz while suspended by the operator: want 503, have %d", c)
	}
	if c := s.Status("/healthz"); c != http.StatusOK {
		t.Errorf("/healthz while suspended by the operator: want 200, have %d", c)
	}
	// No monitor is over its watermark, yet cycles do not lift it.
	s.HoldsFor(true, 3)

	if out, err := s.Ctl("resume"); err != nil || !strings.Contains(out, "running") {
		t.Fatalf("ctl resume: %v: %s", err, out)
	}
	if s.Stats().Suspended {
		t.Fatal("still suspended after ctl resume")
	}
	if m := ua.Invite(); m.Code != 200 {
		t.Fatalf("new INVITE after ctl resume: want 200, have %d\n%s", m.Code, m.Raw)
	}
	if out, err := s.Ctl("resume"); err == nil {
		t.Errorf("ctl resume when running: want refused, have %s", out)
	}
	if s.Stats().Suspended {
		t.Error("a refused resume changed the state")
	}
	if v := s.Metric("sipvisor_overload_suspensions_total", `reason="operator"`); v != 1 {
		t.Errorf("suspensions_total{reason=operator}: want 1, have %v", v)
	}
}
