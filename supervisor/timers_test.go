package supervisor

import (
	"os"
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
	// Workers count echo frames as handled too, so the jobs are counted
	// where they are sent, and handled ones are waited for on top.
	waitFor(t, "10 timer jobs sent", 20*time.Second, func() bool {
		return counterValue(t, st.s, "sipvisor_supervisor_timer_jobs_total", "result", "sent") >= 10
	})
	waitFor(t, "timer jobs handled", 20*time.Second, func() bool {
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
	sent := func() float64 {
		return counterValue(t, st.s, "sipvisor_supervisor_timer_jobs_total", "result", "sent")
	}
	time.Sleep(200 * time.Millisecond)
	if v := sent(); v != 0 {
		t.Fatalf("want no job sent before the reload, have %v", v)
	}
	if err := os.WriteFile(st.path, []byte(cfg("timer_route[slow, 0.05] { exit; }\ntimer_route[fresh, 0.05] { exit; }")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := st.s.Reload(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	// Two jobs every 50 ms: 20 jobs within a second or so, not in 100 s.
	waitFor(t, "20 timer jobs sent after the reload", 20*time.Second, func() bool { return sent() >= 20 })

	// Back to no timer_route at all: the loop stops sending.
	if err := os.WriteFile(st.path, []byte(cfg("")), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := st.s.Reload(); err != nil {
		t.Fatalf("reload: %v", err)
	}
	// Jobs sent every 50 ms would change the count between any two reads
	// 200 ms apart; once the loop has taken the reload, it stays.
	var last float64 = -1
	waitFor(t, "the timer jobs to stop after the reload", 20*time.Second, func() bool {
		v := sent()
		time.Sleep(200 * time.Millisecond)
		last = sent()
		return v == last
	})
	time.Sleep(500 * time.Millisecond)
	if v := sent(); v != last {
		t.Fatalf("want no job sent once the timer_route blocks are gone, have %v then %v", last, v)
	}
}
