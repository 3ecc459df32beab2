package overload

import (
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// tcpSlowConfig answers every request itself; a request to sip:slow@ holds
// the worker for 1.5 s, as a slow script or database would.
func tcpSlowConfig(extra string) string {
	return harness.Sockets0 + `udp_workers = 1
tcp_workers = 1
retry_after = 7
echo_interval = 200ms
# The slow request raises the echo round trip past the throttle's
# threshold; this test is about the other two guards.
throttle_enable = no
` + extra + `
route {
	if ($rU == "slow") { usleep(1500000); sl_send_reply(200, "OK"); exit; }
	if (is_method("INVITE")) { sl_send_reply(486, "Busy Here"); exit; }
	sl_send_reply(200, "OK");
}
`
}

// slowThen sends the request that holds the TCP worker and, on the same
// connection so that they are read after it and wait behind it, a new
// INVITE and a BYE of a call that is up; it returns their final answers
// once the slow request is answered.
func slowThen(ua *harness.TCPUA) (invite, bye harness.Resp) {
	ua.T.Helper()
	slow := harness.NewID() + "@slow"
	ua.SendTo("slow", "OPTIONS", slow, 1, "<sip:slow@example.com>")
	call, up := harness.NewID()+"@behind", harness.NewID()+"@up"
	ua.Send("INVITE", call, 1, "<sip:bob@example.com>")
	ua.Send("BYE", up, 2, "<sip:bob@example.com>;tag=up")
	if m := ua.Final(slow, "OPTIONS"); m.Code != 200 {
		ua.T.Fatalf("the slow request: want 200, have %d\n%s", m.Code, m.Raw)
	}
	return ua.Final(call, "INVITE"), ua.Final(up, "BYE")
}

// A TCP request that waited longer than max_queue_wait behind a slow one is
// refused with 503 and Retry-After (its client will not retransmit, so it
// is not dropped), counted as such; and queue-delay admission weighs how
// long a TCP worker takes to come to new work. Neither holds on once the
// worker is prompt again.
func TestTCPWaitBounds(t *testing.T) {
	t.Parallel()
	s := harness.Start(t, tcpSlowConfig("max_queue_wait = 500ms\nqueue_delay_admission = 0\n"))
	ua := harness.NewTCPUA(t, s.SIPPort("tcp"))

	m, bye := slowThen(ua)
	harness.WantRefused(t, "an INVITE that waited 1.5 s over TCP, max_queue_wait 500ms", m)
	if bye.Code != 200 {
		t.Errorf("the BYE of a call up, as late: want it handled (the script's 200), have %d\n%s", bye.Code, bye.Raw)
	}
	if ra := m.Header("Retry-After"); ra != "7" {
		t.Errorf("Retry-After: want 7, have %q", ra)
	}
	if v := s.Metric("sipvisor_pool_stale_requests_refused_total", `group="tcp"`); v != 1 {
		t.Errorf("stale requests refused over TCP: want 1, have %v", v)
	}
	if m, _ := ua.Invite(harness.NewID() + "@prompt"); m.Code != 486 {
		t.Fatalf("a new INVITE once the worker is prompt: want the script's 486, have %d\n%s", m.Code, m.Raw)
	}

	// Queue-delay admission: a worker that took 1.5 s to come to new work
	// reads as 1.5 s of queue, over the 300 ms allowed.
	s.Set("limits/max_queue_wait", "10")
	s.Set("limits/queue_delay_admission", "0.3")
	m, bye = slowThen(ua)
	harness.WantRefused(t, "an INVITE over TCP behind 1.5 s of work, queue_delay_admission 300ms", m)
	if bye.Code != 200 {
		t.Errorf("the BYE of a call up, behind the same work: want it handled, have %d\n%s", bye.Code, bye.Raw)
	}
	if v := s.Metric("sipvisor_frontdoor_refused_sessions_total", `group="tcp"`, `reason="queue"`); v != 1 {
		t.Errorf("refused over TCP for queue delay: want 1, have %v", v)
	}
	// Recovery: within a few echo intervals the group takes new calls.
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, _ := ua.Invite(harness.NewID() + "@after")
		if m.Code == 486 {
			break
		}
		if m.Code != 503 || time.Now().After(deadline) {
			t.Fatalf("after the slow request: want the script's 486 within 10 s, have %d\n%s", m.Code, m.Raw)
		}
		time.Sleep(100 * time.Millisecond) // retrying until the group is prompt again, bounded by the deadline
	}
	if out, err := s.Ctl("stats"); err != nil || !strings.Contains(out, "stale_refused") {
		t.Errorf("ctl stats lacks stale_refused: %v\n%s", err, out)
	}
}
