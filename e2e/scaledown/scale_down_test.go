package scaledown

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/ctl"
	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// While a group drains from 4 workers to 2 under a steady call load, no
// call fails: a draining worker keeps the messages of the calls it holds
// (their ACKs, BYEs and retransmissions) until its transactions end.
//
// The cooldown (25 cycles of 0.2 s) keeps the group at 4 until SIPp is
// well under way; 20 calls/s of 2 s each means about 40 calls are up when
// each worker is drained. SIPp places calls until both drained workers
// have exited, then lets the calls in progress end.
func TestScaleDownUnderCallsLosesNoCall(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("scales a group down under calls")
	}
	t.Run("through the supervisor", func(t *testing.T) { t.Parallel(); testScaleDownUnderCalls(t, "") })
	// A draining worker's reply socket stays open until it exits: the
	// responses of the calls it holds still reach it.
	t.Run("reply sockets", func(t *testing.T) { t.Parallel(); testScaleDownUnderCalls(t, "worker_reply_sockets = yes") })
}

func testScaleDownUnderCalls(t *testing.T, extra string) {
	s := harness.Start(t, harness.ProxyCfg(harness.SIPpUAS(t).Port, `
auto_scaling_profile = P
	scale up to 4 on 50% for 2 cycles within 3
	scale down to 2 on 30% for 3 cycles
auto_scaling_cycle = 0.2
auto_scaling_cooldown = 25
udp_workers = 4 use_auto_scaling_profile P
tcp_workers = 1
`+extra))
	group := "udp:" + s.SIPAddr("udp")
	if n, all := harness.Live(s.PS(), group); n != 4 {
		t.Fatalf("want 4 workers before the load, have %v", all)
	}
	// Each direction's series appears with its first scaling; a renamed
	// metric fails the check of the two scale-downs below.
	if v := s.MetricAbsentAs0("sipvisor_profile_scalings_total", `direction="down"`); v != 0 {
		t.Fatalf("want no scale-down before the calls start, have %v: the machine is too slow for this test's cooldown", v)
	}

	// Watch the draining workers: the messages they handle after their drain
	// began (ACKs, BYEs, replies of the calls they hold) are what a drain
	// that dropped them would lose.
	stop := make(chan struct{})
	watched := make(chan map[int][2]uint64, 1)
	go func() {
		seen := map[int][2]uint64{} // pid: handled when first seen draining, and last
		defer func() { watched <- seen }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			out, err := s.Ctl("ps", "--json")
			if err != nil {
				continue
			}
			var gs []ctl.Group
			if json.Unmarshal([]byte(out), &gs) != nil {
				continue
			}
			for _, g := range gs {
				for _, w := range g.Workers {
					if g.Name != group || w.State != "draining" {
						continue
					}
					h, ok := seen[w.Pid]
					if !ok {
						h[0] = w.Handled
					}
					h[1] = w.Handled
					seen[w.Pid] = h
				}
			}
		}
	}()
	// -m is more calls than the run places: it ends with Quit.
	sipp := harness.StartSIPp(t, 150*time.Second, "-sn", "uac", s.SIPAddr("udp"), "-i", "127.0.0.1",
		"-r", "20", "-m", "2400", "-d", "2000", "-timeout", "140", "-timeout_error", "-recv_timeout", "40000")
	s.AwaitMetricAtLeast(2, 60*time.Second, "sipvisor_pool_worker_exits_total", `reason="clean"`)
	sipp.Quit()
	r := sipp.Wait()
	close(stop)
	seen := <-watched
	log := s.Log.String()
	var afterDrain uint64
	for _, h := range seen {
		afterDrain += h[1] - h[0]
	}
	t.Logf("messages handled by draining workers after their drain began: %d (workers seen draining: %d)", afterDrain, len(seen))
	if afterDrain == 0 {
		t.Errorf("want draining workers to handle the messages of calls they hold, have none handled after the drain began (seen %v)", seen)
	}
	t.Logf("%d calls placed across the scale-down", r.Created)
	if r.Created < 100 || r.Successful != r.Created || r.Failed != 0 {
		t.Errorf("want every call placed across the scale-down (100 or more) successful and none failed, have %d placed, %d/%d (exit %d)\n%s\n%s",
			r.Created, r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 60), scalingLines(log))
	}
	if v := s.Metric("sipvisor_profile_scalings_total", `direction="down"`); v != 2 {
		t.Errorf("want 2 scale-downs (4 to 2), have %v\n%s", v, scalingLines(log))
	}
	if v := s.MetricAbsentAs0("sipvisor_profile_scalings_total", `direction="up"`); v != 0 {
		t.Errorf("want no scale-up at this load, have %v\n%s", v, scalingLines(log))
	}
	s.WaitWorkers(group, 2, 30*time.Second)
	if v := s.Metric("sipvisor_pool_worker_exits_total", `reason="clean"`); v != 2 {
		t.Errorf("want 2 clean exits of drained workers, have %v\n%s", v, scalingLines(s.Log.String()))
	}
	for _, reason := range []string{"killed", "crash"} {
		if v := s.MetricAbsentAs0("sipvisor_pool_worker_exits_total", `reason="`+reason+`"`); v != 0 {
			t.Errorf("want no %s exit, have %v\n%s", reason, v, scalingLines(s.Log.String()))
		}
	}
	if v := s.Metric("sipvisor_frontdoor_admitted_sessions_total", `kind="call"`); v != float64(r.Created) {
		t.Errorf("want the %d calls placed admitted at the front door, have %v", r.Created, v)
	}
}

// scalingLines keeps the log lines about scaling and worker exits, for
// failure messages.
func scalingLines(log string) string {
	var keep []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "scaling") || strings.Contains(line, "exited") || strings.Contains(line, "drain") ||
			strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}
