package load

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// OpenSIPS's scaling experiment, smaller: OPTIONS that each cost 10 ms of
// script time, from SIPp in its default mode (retransmitted over UDP from
// 500 ms, given up after its retransmissions run out), at 1.25 times what
// a group of 2 workers answers, which grows to 3 under the load. The worker
// the group grows by must take its share of the OPTIONS at once, and every
// OPTIONS must be answered: those that queued while the group was too small
// are answered late, none is lost to the client's timeout.
func TestScaleUpUnderOptionsAnswersEvery(t *testing.T) {
	if testing.Short() {
		t.Skip("a 20-second overload that grows a group")
	}
	const (
		costUS = 10000
		rate   = 250 // 2 workers answer 200/s, 3 answer 300/s
		secs   = 20
	)
	s := harness.Start(t, fmt.Sprintf(`
auto_scaling_profile = P
	scale up to 3 on 70%% for 2 cycles within 3
auto_scaling_cycle = 0.5
socket = udp:127.0.0.1:0
udp_workers = 2 use_auto_scaling_profile P
tcp_workers = 1
http_listen = 127.0.0.1:0
route {
	if (is_method("OPTIONS")) {
		usleep(%d);
		sl_send_reply(200, "OK");
		exit;
	}
	sl_send_reply(404, "Not Here");
}
`, costUS))
	group := "udp:" + s.SIPAddr("udp")
	first := map[int]bool{}
	for _, g := range s.PS() {
		if g.Name == group {
			for _, w := range g.Workers {
				first[w.ID] = true
			}
		}
	}
	if len(first) != 2 {
		t.Fatalf("want 2 workers before the load, have %v", first)
	}
	start := time.Now()
	run := harness.StartSIPp(t, (secs+60)*time.Second, "-sf", harness.Testdata("options_uac.xml"), s.SIPAddr("udp"),
		"-i", "127.0.0.1", "-r", strconv.Itoa(rate), "-m", strconv.Itoa(rate*secs), "-l", strconv.Itoa(rate*40))

	// The third worker, once the group has grown, must be busy with
	// OPTIONS like the first two, while SIPp still sends them.
	var grown string
	busy := false
	for !busy && time.Since(start) < secs*time.Second {
		time.Sleep(100 * time.Millisecond) // polling ctl ps, bounded by the SIPp run
		for _, g := range s.PS() {
			if g.Name != group {
				continue
			}
			for _, w := range g.Workers {
				if !first[w.ID] && w.State == "ready" {
					grown = fmt.Sprintf("worker %d: load %.0f %% over 1 s, %d handled", w.ID, w.Load.Second, w.Handled)
					busy = busy || w.Load.Second >= 50
				}
			}
		}
	}
	res := run.Wait()
	ups := s.MetricAbsentAs0("sipvisor_profile_scalings_total", `direction="up"`, `group="`+group+`"`)
	stale := s.Metric("sipvisor_pool_stale_requests_dropped_total", `group="`+group+`"`)
	t.Logf("%d of %d OPTIONS answered, %d failed; %v scale-ups; %v requests dropped after waiting past max_queue_wait; %s",
		res.Successful, rate*secs, res.Failed, ups, stale, grown)
	if ups != 1 {
		t.Errorf("want the group grown once, to 3 workers, have %v scale-ups", ups)
	}
	if !busy {
		t.Errorf("the worker the group grew by took no share of the OPTIONS while SIPp sent them (%s)\n%s",
			grown, harness.Tail(s.Log.String(), 20))
	}
	if res.Failed != 0 || res.Successful != rate*secs {
		t.Errorf("want every one of %d OPTIONS answered, have %d answered and %d failed\n%s",
			rate*secs, res.Successful, res.Failed, harness.Tail(res.Out, 30))
	}
}
