package load

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// A worker whose script blocks 40 ms on each INVITE gets a burst of new
// calls: admission by queue delay (the default 250 ms) lets in what the
// worker can answer within it and refuses the rest with 503, by reason
// "queue"; turned off, the whole burst queues.
func TestQueueDelayAdmission(t *testing.T) {
	s := harness.Start(t, `
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 1
auto_scaling_cycle = 0.2
# The echo throttle would refuse too; this test is about the queue.
throttle_enable = no
route {
	if (is_method("INVITE"))
		usleep(40000);
	sl_send_reply(486, "Busy Here");
}
`)
	caller := harness.NewPeer(t)
	proxy := harness.Local(s.SIPPort("udp"))
	invite := func(id string) string {
		return fmt.Sprintf("INVITE sip:bob@127.0.0.1 SIP/2.0\r\n"+
			"Via: SIP/2.0/UDP 127.0.0.1:%[1]d;branch=z9hG4bK-%[2]s\r\n"+
			"Max-Forwards: 70\r\n"+
			"From: <sip:alice@127.0.0.1>;tag=%[2]s\r\n"+
			"To: <sip:bob@127.0.0.1>\r\n"+
			"Call-ID: %[2]s\r\n"+
			"CSeq: 1 INVITE\r\n"+
			"Content-Length: 0\r\n\r\n", caller.Port(), id)
	}
	// burst sends n INVITEs at once and counts the answers by code, one per
	// call: the caller sends no ACK, so the worker retransmits its 486s, and
	// those of an earlier burst must not count as answers to this one.
	burst := func(name string, n int) map[int]int {
		t.Helper()
		prefix := fmt.Sprintf("%s-%d-", name, time.Now().UnixNano())
		for i := 0; i < n; i++ {
			caller.Send(proxy, invite(fmt.Sprintf("%s%d", prefix, i)))
		}
		codes := map[int]int{}
		answered := map[string]bool{}
		for len(answered) < n {
			m, ok := caller.Recv(30 * time.Second)
			if !ok {
				t.Fatalf("%s: want %d answers, have %v", name, n, codes)
			}
			id := m.Header("Call-ID")
			if !strings.HasPrefix(id, prefix) || answered[id] {
				continue
			}
			answered[id] = true
			codes[m.Status()]++
		}
		return codes
	}
	// The estimate needs a cycle that saw the worker at work.
	if codes := burst("warm-up", 3); codes[486] != 3 {
		t.Fatalf("warm-up: want 3 × 486, have %v", codes)
	}
	s.AwaitCycles(2)

	// 30 INVITEs of 40 ms each are 1.2 s of work: well past 250 ms.
	codes := burst("burst", 30)
	if codes[486]+codes[503] != 30 || codes[503] < 10 || codes[486] < 3 {
		t.Errorf("burst of 30: want most refused with 503 and the first few served, have %v", codes)
	}
	if v := s.Metric("sipvisor_frontdoor_refused_sessions_total", `reason="queue"`); v != float64(codes[503]) {
		t.Errorf("refused_sessions_total{reason=queue}: want %d, have %v", codes[503], v)
	}

	group := "udp:" + s.SIPAddr("udp")
	if r := s.Resource("queue_delay/" + group); r.High != 0.25 || r.Unit != "s" {
		t.Errorf("resource-monitor queue_delay/%s: want a 0.25 s threshold, have %+v", group, r)
	}
	s.Set("limits/queue_delay_admission", "0")
	if codes := burst("unlimited", 30); codes[486] != 30 {
		t.Errorf("queue delay admission off: want all 30 served, have %v", codes)
	}
}
