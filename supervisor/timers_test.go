package supervisor

import (
	"testing"
	"time"
)

// timer_route jobs run on the timer group, on their schedule.
func TestTimerRoutesRunOnTimerWorkers(t *testing.T) {
	st := startSupervisor(t, cfgf(`
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 1
timer_workers = 2
route { exit; }
timer_route[tick, 0.05] { exit; }
`), costWorker(0), nil)
	var timer = st.s.Groups()[1]
	if timer.Name() != "timer" {
		t.Fatalf("want the timer group second, have %s", timer.Name())
	}
	waitFor(t, "timer jobs handled", 20*time.Second, func() bool {
		var n uint64
		for _, w := range timer.Workers() {
			n += w.Handled()
		}
		return n >= 10
	})
	if v := counterValue(t, st.s, "sipvisor_supervisor_timer_jobs_total", "result", "sent"); v < 10 {
		t.Fatalf("want at least 10 jobs sent, have %v", v)
	}
}
