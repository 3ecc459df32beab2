package e2e

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

// tcpSlowConfig answers every request itself; a request to sip:slow@ holds
// the worker for 1.5 s, as a slow script or database would.
func tcpSlowConfig(sip int, extra string) string {
	return `
socket = udp:127.0.0.1:` + strconv.Itoa(sip) + `
socket = tcp:127.0.0.1:` + strconv.Itoa(sip) + `
http_listen = 127.0.0.1:HTTP_PORT
udp_workers = 1
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
func slowThen(ua *tcpUA) (invite, bye ovResp) {
	ua.t.Helper()
	slow := ovID() + "@slow"
	ua.sendTo("slow", "OPTIONS", slow, 1, "<sip:slow@example.com>")
	call, up := ovID()+"@behind", ovID()+"@up"
	ua.send("INVITE", call, 1, "<sip:bob@example.com>")
	ua.send("BYE", up, 2, "<sip:bob@example.com>;tag=up")
	if m := ua.final(slow, "OPTIONS"); m.code != 200 {
		ua.t.Fatalf("the slow request: want 200, have %d\n%s", m.code, m.raw)
	}
	return ua.final(call, "INVITE"), ua.final(up, "BYE")
}

// A TCP request that waited longer than max_queue_wait behind a slow one is
// refused with 503 and Retry-After (its client will not retransmit, so it
// is not dropped), counted as such; and queue-delay admission weighs how
// long a TCP worker takes to come to new work. Neither holds on once the
// worker is prompt again.
func TestTCPWaitBounds(t *testing.T) {
	sip := freePort(t)
	s := ovServer{startServer(t, tcpSlowConfig(sip, "max_queue_wait = 500ms\nqueue_delay_admission = 0\n"))}
	ua := newTCPUA(t, sip)

	m, bye := slowThen(ua)
	ovWantRefused(t, "an INVITE that waited 1.5 s over TCP, max_queue_wait 500ms", m)
	if bye.code != 200 {
		t.Errorf("the BYE of a call up, as late: want it handled (the script's 200), have %d\n%s", bye.code, bye.raw)
	}
	if ra := m.header("Retry-After"); ra != "7" {
		t.Errorf("Retry-After: want 7, have %q", ra)
	}
	if v := s.mustMetric("sipvisor_pool_stale_requests_refused_total", `group="tcp"`); v != 1 {
		t.Errorf("stale requests refused over TCP: want 1, have %v", v)
	}
	if m, _ := ua.invite(ovID() + "@prompt"); m.code != 486 {
		t.Fatalf("a new INVITE once the worker is prompt: want the script's 486, have %d\n%s", m.code, m.raw)
	}

	// Queue-delay admission: a worker that took 1.5 s to come to new work
	// reads as 1.5 s of queue, over the 300 ms allowed.
	s.set("limits/max_queue_wait", "10")
	s.set("limits/queue_delay_admission", "0.3")
	m, bye = slowThen(ua)
	ovWantRefused(t, "an INVITE over TCP behind 1.5 s of work, queue_delay_admission 300ms", m)
	if bye.code != 200 {
		t.Errorf("the BYE of a call up, behind the same work: want it handled, have %d\n%s", bye.code, bye.raw)
	}
	if v := s.mustMetric("sipvisor_frontdoor_refused_sessions_total", `group="tcp"`, `reason="queue"`); v != 1 {
		t.Errorf("refused over TCP for queue delay: want 1, have %v", v)
	}
	// Recovery: within a few echo intervals the group takes new calls.
	deadline := time.Now().Add(10 * time.Second)
	for {
		m, _ := ua.invite(ovID() + "@after")
		if m.code == 486 {
			break
		}
		if m.code != 503 || time.Now().After(deadline) {
			t.Fatalf("after the slow request: want the script's 486 within 10 s, have %d\n%s", m.code, m.raw)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if out, err := s.ctl("stats"); err != nil || !strings.Contains(out, "stale_refused") {
		t.Errorf("ctl stats lacks stale_refused: %v\n%s", err, out)
	}
}
