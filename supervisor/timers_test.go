package supervisor

import (
	"fmt"
	"os"
	"testing"

	"github.com/sipvisor/sipvisor/internal/testkit"
)

// timer_route jobs run on the timer group, on their schedule.
func TestTimerRoutesRunOnTimerWorkers(t *testing.T) {
	t.Parallel()
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
	// Workers count echo frames as handled too, so the jobs are counted
	// where they are sent, and handled ones are waited for on top.
	testkit.WaitFor(t, patience, "10 timer jobs sent", func() bool {
		// The series appears with the first job sent.
		return testkit.MetricOrZero(t, st.metrics(t), "sipvisor_supervisor_timer_jobs_total", `result="sent"`) >= 10
	})
	testkit.WaitFor(t, patience, "timer jobs handled", func() bool {
		var n uint64
		for _, w := range timer.Workers() {
			n += w.Handled()
		}
		return n >= 10
	})
}

// A reload reschedules timer_route blocks at once: one due only in 100 s
// runs every 50 ms after the file says so, and a block the reload adds runs
// too. Before, the schedule changed only on a restart.
func TestReloadReschedulesTimerRoutes(t *testing.T) {
	t.Parallel()
	cfg := func(timers string) string {
		return cfgf(`
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 1
timer_workers = 1
route { exit; }
%s
`, timers)
	}
	st := startSupervisor(t, cfg(`timer_route[slow, 100] { exit; }`), costWorker(0), nil)
	// The series appears with the first job sent: none is one sent.
	sent := func() float64 {
		return testkit.MetricOrZero(t, st.metrics(t), "sipvisor_supervisor_timer_jobs_total", `result="sent"`)
	}
	// taken waits until the timer loop has taken its nth schedule.
	taken := func(n int64) {
		t.Helper()
		testkit.WaitFor(t, patience, fmt.Sprintf("the timer loop's schedule %d", n), func() bool { return st.s.timerPlans.Load() >= n })
	}
	reload := func(timers string) {
		t.Helper()
		if err := os.WriteFile(st.path, []byte(cfg(timers)), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := st.s.Reload(); err != nil {
			t.Fatalf("reload: %v", err)
		}
	}
	taken(1)
	if v := sent(); v != 0 {
		t.Fatalf("want no job sent before the reload, have %v", v)
	}
	reload("timer_route[slow, 0.05] { exit; }\ntimer_route[fresh, 0.05] { exit; }")
	taken(2)
	// Two jobs every 50 ms: 20 jobs within a second or so, not in 100 s.
	testkit.WaitFor(t, patience, "20 timer jobs sent after the reload", func() bool { return sent() >= 20 })

	// Back to no timer_route at all: the loop stops sending. Jobs are sent
	// by the loop alone, so once it has taken the empty schedule the count
	// is final; the loop taking a later schedule (a job due only in 100 s)
	// shows it went on running meanwhile without sending any.
	reload("")
	taken(3)
	last := sent()
	reload("timer_route[slow, 100] { exit; }")
	taken(4)
	if v := sent(); v != last {
		t.Fatalf("want no job sent once the timer_route blocks are gone, have %v then %v", last, v)
	}
}
