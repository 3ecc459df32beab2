package registrar

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// registerPhones registers n phones with SIPp, each an AOR of its own
// (storm1, storm2, ...), retrying a 503 after its Retry-After, and fails
// the test unless every one got its 200.
func registerPhones(t *testing.T, s *harness.Server, n, rate int) {
	t.Helper()
	r := harness.RunSIPp(t, 120*time.Second, "-sf", harness.Testdata("register_retry_uac.xml"), s.SIPAddr("udp"), "-i", "127.0.0.1",
		"-cid_str", "phone-%u-"+harness.NewID()+"@127.0.0.1", "-key", "expires", "3600",
		"-m", strconv.Itoa(n), "-l", strconv.Itoa(n), "-r", strconv.Itoa(rate), "-timeout", "100", "-timeout_error")
	if r.Exit != 0 || r.Successful != n || r.Failed != 0 {
		t.Fatalf("want %d phones registered, have %d/%d (exit %d)\n%s", n, r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 40))
	}
}

// withSettings puts settings into the registrar's config.
func withSettings(settings string) string {
	return strings.Replace(harness.RegistrarCfg(), "tcp_workers = 1\n", "tcp_workers = 1\n"+settings, 1)
}

// A registrar of 200 phones with the session watermark at 50: bindings are
// no sessions, so the server does not suspend, and calls to a registered
// user go through.
func TestPhonesAreNoSessions(t *testing.T) {
	t.Parallel()
	s := harness.Start(t, withSettings("auto_scaling_cycle = 0.2\nsuspend_number_of_sessions_high = 50\nsuspend_number_of_sessions_low = 40\n"))
	target := s.SIPAddr("udp")
	uas := harness.SIPpUAS(t).Port

	const phones = 200
	registerPhones(t, s, phones, 100)
	r := harness.RunSIPp(t, 30*time.Second, "-sf", harness.Testdata("register.xml"), target, "-s", "alice", "-key", "contact_port", strconv.Itoa(uas),
		"-i", "127.0.0.1", "-m", "1", "-timeout", "20", "-timeout_error")
	if r.Exit != 0 || r.Successful != 1 {
		t.Fatalf("alice's registration: want 200, have %d/%d (exit %d)\n%s", r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 40))
	}
	s.AwaitMetric(phones+1, "sipvisor_location_bindings")
	// A cycle that sampled the 201 bindings, and a few more.
	s.AwaitCycles(5)
	if v := s.Resource("number_of_sessions").Value; v != 0 {
		t.Errorf("number_of_sessions with %d bindings and no call: want 0, have %v", phones+1, v)
	}

	r = harness.RunSIPp(t, 60*time.Second, "-sn", "uac", target, "-s", "alice", "-i", "127.0.0.1",
		"-r", "10", "-m", "20", "-d", "200", "-timeout", "40", "-timeout_error")
	if r.Exit != 0 || r.Successful != 20 || r.Failed != 0 {
		t.Fatalf("want 20 calls to alice among %d registered phones to succeed, have %d/%d (exit %d)\n%s\n%s",
			phones, r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 40), harness.Tail(s.Log.String(), 20))
	}
	if v := s.Metric("sipvisor_overload_suspensions_total"); v != 0 {
		t.Errorf("suspensions: want none, have %v", v)
	}
	if v := s.Metric("sipvisor_overload_suspended"); v != 0 {
		t.Errorf("suspended: want 0, have %v", v)
	}
}

// With max_registrations = 100 and 100 bindings, a REGISTER that would add
// the 101st gets 503 with Retry-After, counted and logged; a refresh of a
// live binding and a removal still pass.
func TestMaxRegistrations(t *testing.T) {
	t.Parallel()
	s := harness.Start(t, withSettings("auto_scaling_cycle = 0.2\nmax_registrations = 100\n"))
	const limit = 100
	registerPhones(t, s, limit-1, 100)
	s.AwaitMetric(limit-1, "sipvisor_location_bindings")
	if v := s.Metric("sipvisor_location_max_bindings"); v != limit {
		t.Errorf("sipvisor_location_max_bindings: want %d, have %v", limit, v)
	}

	ua := harness.NewUA(t, s.SIPPort("udp"))
	regID := harness.NewID() + "@reg"
	if m := ua.Register(regID, 1); m.Code != 200 {
		t.Fatalf("the %dth binding: want 200, have %d\n%s", limit, m.Code, m.Raw)
	}
	// Counted, the bound is reached and the binding's Call-ID known.
	s.AwaitResource("max_registrations", limit)
	if !s.Resource("max_registrations").Over {
		t.Errorf("resource-monitor: want max_registrations marked at its bound")
	}

	newID := harness.NewID() + "@new"
	ua.Send("REGISTER", "sip:example.com", newID, 1, "<sip:p101@example.com>", "Expires: 3600")
	harness.WantRefused(t, "the REGISTER of a 101st binding", ua.Final(newID, "REGISTER"))
	// A worker that reads its own socket counts a refusal in its page after
	// it has answered.
	s.AwaitMetric(1, "sipvisor_frontdoor_refused_sessions_total", `reason="max_registrations"`)
	if !strings.Contains(s.Log.String(), "event=registrations_full") {
		t.Errorf("want the refusal logged (event=registrations_full)\n%s", harness.Tail(s.Log.String(), 20))
	}

	if m := ua.Register(regID, 2); m.Code != 200 {
		t.Errorf("a refresh of a live binding at the bound: want 200, have %d\n%s", m.Code, m.Raw)
	}
	// A removal under a Call-ID of its own (RFC 3261 10.3: the binding
	// goes all the same), which the door cannot tell from a new phone but
	// by its Expires: 0.
	rmID := harness.NewID() + "@rm"
	ua.Send("REGISTER", "sip:example.com", rmID, 1, "<sip:alice@example.com>", "Expires: 0")
	if m := ua.Final(rmID, "REGISTER"); m.Code != 200 {
		t.Errorf("a removal at the bound: want 200, have %d\n%s", m.Code, m.Raw)
	}
	s.AwaitMetric(limit-1, "sipvisor_location_bindings")
	if v := s.Metric("sipvisor_frontdoor_refused_sessions_total", `reason="max_registrations"`); v != 1 {
		t.Errorf("refused_sessions_total{reason=max_registrations}: want 1, have %v", v)
	}
	if v := s.Metric("sipvisor_overload_suspended"); v != 0 {
		t.Errorf("suspended at max_registrations: want 0 (a bound, not a suspension), have %v", v)
	}
}
