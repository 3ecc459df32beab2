package overload

import (
	"strconv"
	"testing"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// New sessions over TCP pass the same guards as over UDP and get the same
// 503 with Retry-After, while a call already up over TCP goes on: the
// server suspended, then a session limit.
func TestTCPNewSessionsPassTheGuards(t *testing.T) {
	t.Parallel()
	// The callee over TCP too: a TCP caller's call to a UDP callee is
	// another matter (the callee's answers reach a UDP worker).
	uas := harness.SIPpUAS(t, "-t", "t1").Port
	s := harness.Start(t, harness.ProxyConfig("sip:127.0.0.1:"+strconv.Itoa(uas)+";transport=tcp",
		"udp_workers = 1\ntcp_workers = 1\nauto_scaling_cycle = 0.2\nretry_after = 7\n"+harness.GuardsOff, true))
	ua := harness.NewTCPUA(t, s.SIPPort("tcp"))

	up := harness.NewID() + "@tcp-up"
	m, upTo := ua.Invite(up)
	if m.Code != 200 {
		t.Fatalf("a call over TCP: want 200, have %d\n%s", m.Code, m.Raw)
	}
	tcpCalls := []string{`group="tcp"`, `kind="call"`}
	s.AwaitMetric(1, "sipvisor_frontdoor_sessions", tcpCalls...)

	if out, err := s.Ctl("suspend"); err != nil {
		t.Fatalf("ctl suspend: %v: %s", err, out)
	}
	refused, _ := ua.Invite(harness.NewID() + "@tcp-new")
	harness.WantRefused(t, "a new INVITE over TCP while suspended", refused)
	if ra := refused.Header("Retry-After"); ra != "7" {
		t.Errorf("Retry-After over TCP: want 7, have %q", ra)
	}
	ua.Send("BYE", up, 2, upTo)
	if bye := ua.Final(up, "BYE"); bye.Code != 200 {
		t.Fatalf("BYE of the call up over TCP while suspended: want 200, have %d\n%s", bye.Code, bye.Raw)
	}
	s.AwaitMetric(0, "sipvisor_frontdoor_sessions", tcpCalls...)
	if out, err := s.Ctl("resume"); err != nil {
		t.Fatalf("ctl resume: %v: %s", err, out)
	}

	// One call up over UDP fills max_calls = 1: a new one over TCP is
	// refused as one over UDP would be.
	s.Set("limits/max_calls", "1")
	udp := harness.NewUA(t, s.SIPPort("udp"))
	m, udpCall := udp.Dial()
	if m.Code != 200 {
		t.Fatalf("a call over UDP under max_calls: want 200, have %d\n%s", m.Code, m.Raw)
	}
	s.AwaitResource("max_calls", 1)
	refused, _ = ua.Invite(harness.NewID() + "@tcp-limit")
	harness.WantRefused(t, "a new INVITE over TCP at max_calls", refused)
	if bye := udp.HangUp(udpCall); bye.Code != 200 {
		t.Fatalf("BYE of the call over UDP: want 200, have %d\n%s", bye.Code, bye.Raw)
	}
	for _, reason := range []string{"suspended", "limit"} {
		if v := s.Metric("sipvisor_frontdoor_refused_sessions_total", `group="tcp"`, `reason="`+reason+`"`); v != 1 {
			t.Errorf("refused over TCP, %s: want 1, have %v", reason, v)
		}
	}
	s.AwaitResource("max_calls", 0)
	after := harness.NewID() + "@tcp-after"
	m, afterTo := ua.Invite(after)
	if m.Code != 200 {
		t.Fatalf("a new call over TCP under the limit: want 200, have %d\n%s", m.Code, m.Raw)
	}
	// A call up over TCP counts as a session as one over UDP does, and
	// fills max_calls in turn.
	s.AwaitResource("max_calls", 1)
	refused, _ = ua.Invite(harness.NewID() + "@tcp-limit-2")
	harness.WantRefused(t, "a new INVITE over TCP while a TCP call fills max_calls", refused)
	ua.Send("BYE", after, 2, afterTo)
	if bye := ua.Final(after, "BYE"); bye.Code != 200 {
		t.Fatalf("BYE over TCP: want 200, have %d\n%s", bye.Code, bye.Raw)
	}
	s.AwaitResource("max_calls", 0)
	s.AwaitMetric(0, "sipvisor_frontdoor_sessions", tcpCalls...)
}
