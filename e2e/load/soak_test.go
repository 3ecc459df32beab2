package load

import (
	"strconv"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// A short soak: steady zero-length calls through one worker whose memory
// limit is low enough that keeping anything per finished call shows within
// the run. A worker that kept each call for two minutes after its end (5 KB
// a call) reached the heap watermark within 20 s here and suspended the
// server, which refused every new call from then on. The heap must follow
// the calls in progress: none refused, none failed, the heap monitor well
// under its watermark to the end.
func TestSoakMemoryFollowsCallsInProgress(t *testing.T) {
	if testing.Short() {
		t.Skip("a 45-second soak")
	}
	const rate, secs = 200, 45
	// The test is about memory: admission by queue delay is held off (2 s),
	// as the one worker shares two cores with the test packages that run
	// beside this one, and a worker that waits for the CPU with datagrams
	// behind it refuses new calls (e2e/load TestQueueDelayAdmission).
	s := harness.Start(t, harness.ProxyCfg(harness.SIPpUAS(t).Port, `udp_workers = 1
tcp_workers = 1
worker_memory_limit = 24MiB
queue_delay_admission = 2s
`))
	sipp := harness.StartSIPp(t, (secs+60)*time.Second, "-sn", "uac", s.SIPAddr("udp"),
		"-i", "127.0.0.1", "-r", strconv.Itoa(rate), "-m", strconv.Itoa(rate*secs),
		"-l", strconv.Itoa(rate*10), "-timeout", strconv.Itoa(secs+50), "-timeout_error")

	// Sample the heap monitor while the calls run: its peak is the figure.
	done := make(chan harness.SIPpResult, 1)
	go func() { done <- sipp.Wait() }()
	var peak, sessions float64
	var r harness.SIPpResult
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
sampling:
	for {
		select {
		case r = <-done:
			break sampling
		case <-tick.C:
			peak = max(peak, s.Metric("sipvisor_overload_monitor_value", `monitor="heap_usage"`))
			sessions = max(sessions, s.Metric("sipvisor_overload_monitor_value", `monitor="number_of_sessions"`))
		}
	}
	if r.Exit != 0 || r.Successful != rate*secs || r.Failed != 0 {
		refused := map[string]float64{}
		for _, why := range []string{"suspended", "limit", "queue", "throttle", "no_worker"} {
			refused[why] = s.MetricAbsentAs0("sipvisor_frontdoor_refused_sessions_total", `reason="`+why+`"`)
		}
		t.Fatalf("want %d successful calls and 0 failed, have %d/%d (exit %d), heap peak %.0f %%, refused %v, stale %v\n%s\n%s",
			rate*secs, r.Successful, r.Failed, r.Exit, peak, refused, s.MetricAbsentAs0("sipvisor_pool_stale_requests_dropped_total"),
			harness.Tail(r.Out, 40), harness.Tail(s.Log.String(), 20))
	}
	if v := s.Metric("sipvisor_overload_suspended"); v != 0 {
		t.Errorf("suspended at the end: want 0, have %v", v)
	}
	// Its series appear with the first suspension, by reason.
	if v := s.MetricAbsentAs0("sipvisor_overload_suspensions_total"); v != 0 {
		t.Errorf("suspensions during the run: want 0, have %v", v)
	}
	// Calls hold about 900 bytes each while their transactions linger
	// (5 s) as settled records (TestCallMemory, growth included): about
	// 1 MB at this rate; the monitor reads the heap with its garbage, which
	// the collector lets grow to about three times that. The peak read 31 %
	// (49 % while lingering calls kept their transaction pairs).
	if peak >= 75 {
		t.Errorf("heap monitor peak: want under 75 %% of worker_memory_limit, have %.0f %%", peak)
	}
	// A zero-length call is in progress for a few milliseconds: at 200 calls
	// a second, a handful, and a few hundred while the one worker waits a
	// second for the CPU beside the other test packages (267 seen). Counted
	// by Call-ID affinity, which lapses 32 s after a call's last message, it
	// read about 6,400.
	if sessions > 2*rate {
		t.Errorf("number_of_sessions peak: want near the calls in progress (a handful), have %.0f", sessions)
	}
	t.Logf("%d calls at %d/s through one worker: heap monitor peak %.0f %% of 24 MiB, number_of_sessions peak %.0f",
		rate*secs, rate, peak, sessions)
}
