package transport

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
	"github.com/sipvisor/sipvisor/internal/testkit"
)

// directServer starts a proxy whose two UDP workers read the SIP port
// themselves, and waits until the kernel places datagrams on both.
func directServer(t *testing.T, uas int, extra string) *harness.Server {
	t.Helper()
	s := harness.Start(t, harness.ProxyCfg(uas, "udp_workers = 2\ntcp_workers = 1\nudp_direct_reads = yes\n"+extra))
	s.AwaitMetric(2, "sipvisor_frontdoor_direct_workers", "")
	return s
}

// With udp_direct_reads, SIPp's calls complete while nearly every datagram,
// the UAC's requests and the UAS's responses alike, reaches a worker
// without the supervisor: the kernel places each on the worker of its
// Call-ID, and the workers' doors admit and follow the calls.
func TestSIPpCallsOverUDPDirectReads(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("hundreds of SIPp calls")
	}
	uas := harness.SIPpUAS(t).Port
	s := directServer(t, uas, "")
	r := harness.RunSIPp(t, 90*time.Second, "-sn", "uac", s.SIPAddr("udp"), "-i", "127.0.0.1",
		"-r", "50", "-m", "300", "-d", "200", "-timeout", "60", "-timeout_error")
	if r.Exit != 0 || r.Successful != 300 || r.Failed != 0 {
		t.Fatalf("want 300 successful calls and 0 failed, have %d/%d (exit %d)\n%s\n%s", r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 40), harness.Tail(s.Log.String(), 30))
	}
	// INVITE, ACK and BYE of each call, and the UAS's 180, 200 and 200 to
	// the BYE: 1,800 datagrams and a few retransmissions.
	direct := s.Metric("sipvisor_frontdoor_direct_datagrams_total", "")
	door := s.Metric("sipvisor_frontdoor_datagrams_received_total", "")
	if direct < 1700 || door > 50 {
		t.Errorf("want nearly all of 1,800 datagrams read by the workers, have %v by the workers and %v by the door", direct, door)
	}
	// No new session of a bucket went elsewhere before: the workers pass
	// the door nothing, or the odd retransmission.
	if passed := s.Metric("sipvisor_frontdoor_datagrams_passed_total", ""); passed > 30 {
		t.Errorf("want next to nothing passed to the door, have %v", passed)
	}
	if v := s.Metric("sipvisor_frontdoor_admitted_sessions_total", `kind="call"`); v != 300 {
		t.Errorf("want 300 calls admitted, have %v", v)
	}
	// Every call ended: the workers' doors saw each BYE.
	s.AwaitMetric(0, "sipvisor_frontdoor_sessions", `kind="call"`)
	s.StopDrained()
}

// A suspended server's workers keep reading the SIP port and refuse new
// sessions themselves, with the door's 503 and Retry-After, without the
// supervisor's hop: SIPp's INVITEs are answered 503 and its ACKs absorbed,
// every datagram read by a worker. Calls come back on resume.
func TestDirectReadsFollowAdmission(t *testing.T) {
	t.Parallel()
	s := directServer(t, harness.SIPpUAS(t).Port, "")
	ua := harness.NewUA(t, s.SIPPort("udp"))
	if m := ua.Invite(); m.Code != 200 {
		t.Fatalf("INVITE with direct reads: want 200, have %d\n%s", m.Code, m.Raw)
	}
	if out, err := s.Ctl("suspend"); err != nil || !strings.Contains(out, "suspended") {
		t.Fatalf("ctl suspend: %v: %s", err, out)
	}
	direct0 := s.Metric("sipvisor_frontdoor_direct_datagrams_total", "")
	door0 := s.Metric("sipvisor_frontdoor_datagrams_received_total", "")
	const calls = 20
	r := harness.RunSIPp(t, 60*time.Second, "-sf", harness.Testdata("overload_refused_uac.xml"), s.SIPAddr("udp"),
		"-i", "127.0.0.1", "-r", "20", "-m", strconv.Itoa(calls), "-timeout", "40", "-timeout_error")
	if r.Exit != 0 || r.Successful != calls || r.Failed != 0 {
		t.Fatalf("while suspended: want %d INVITEs refused 503 and acknowledged, have %d/%d (exit %d)\n%s\n%s",
			calls, r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 40), harness.Tail(s.Log.String(), 30))
	}
	harness.WantRefused(t, "a new INVITE while suspended", ua.Invite())
	if v := s.Metric("sipvisor_frontdoor_direct_workers", ""); v != 2 {
		t.Errorf("while suspended: want both workers reading, have %v", v)
	}
	// Each refused INVITE and its ACK, read by a worker; a retransmission
	// or two may reach the door in a busy machine's bucket moves, no more.
	if d := s.Metric("sipvisor_frontdoor_direct_datagrams_total", "") - direct0; d < 2*calls {
		t.Errorf("while suspended: want the %d INVITEs and their ACKs read by the workers, have %v", calls, d)
	}
	if d := s.Metric("sipvisor_frontdoor_datagrams_received_total", "") - door0; d > 4 {
		t.Errorf("while suspended: want next to nothing through the supervisor's door, have %v datagrams", d)
	}
	// A retransmitted INVITE is answered again, not counted again; only a
	// slow machine makes SIPp retransmit, so this is a floor.
	if v := s.Metric("sipvisor_frontdoor_refused_sessions_total", `reason="suspended"`); v < calls+1 {
		t.Errorf("want %d sessions refused as suspended, have %v", calls+1, v)
	}
	if out, err := s.Ctl("resume"); err != nil || !strings.Contains(out, "running") {
		t.Fatalf("ctl resume: %v: %s", err, out)
	}
	// The workers read the gate's word within a refresh of the resume.
	testkit.WaitFor(t, 10*time.Second, "an INVITE admitted after resume", func() bool {
		m := ua.Invite()
		return m.Code == 200
	})
	before := s.Metric("sipvisor_frontdoor_direct_datagrams_total", "")
	if m := ua.Invite(); m.Code != 200 {
		t.Fatalf("INVITE after resume: want 200, have %d\n%s", m.Code, m.Raw)
	}
	if after := s.Metric("sipvisor_frontdoor_direct_datagrams_total", ""); after < before+3 {
		t.Errorf("after resume: want the call's INVITE, ACK and BYE read by a worker, have %v more datagrams read directly", after-before)
	}
}

// A quiet server's supervisor writes admission into the workers' pages
// once a second, not ten times; a session limit set then binds the
// workers at once, and the writes keep to a tenth of a second while it is
// set, since every session moves the quotas.
func TestLimitSetOnAQuietServer(t *testing.T) {
	t.Parallel()
	s := directServer(t, harness.SIPpUAS(t).Port, "")
	const refresh = "sipvisor_frontdoor_direct_refresh_seconds"
	s.AwaitMetric(1, refresh)
	ua := harness.NewUA(t, s.SIPPort("udp"))
	s.Set("limits/max_calls", "1")
	if v := s.Metric(refresh, ""); v != 0.1 {
		t.Errorf("with max_calls set: want a refresh every 0.1 s, have %v", v)
	}
	m, call := ua.Dial()
	if m.Code != 200 {
		t.Fatalf("the first call under max_calls = 1: want 200, have %d\n%s", m.Code, m.Raw)
	}
	harness.WantRefused(t, "a second call over max_calls = 1", ua.Invite())
	// A worker counts a refusal in its page after it has answered.
	s.AwaitMetric(1, "sipvisor_frontdoor_refused_sessions_total", `reason="limit"`)
	if bye := ua.HangUp(call); bye.Code != 200 {
		t.Fatalf("BYE: want 200, have %d\n%s", bye.Code, bye.Raw)
	}
	s.Set("limits/max_calls", "0")
	s.AwaitMetric(1, refresh)
	if m := ua.Invite(); m.Code != 200 {
		t.Errorf("a call with the limit lifted: want 200, have %d\n%s", m.Code, m.Raw)
	}
}
