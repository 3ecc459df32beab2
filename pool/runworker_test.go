package pool

import (
	"testing"
	"time"
)

type fixedTimer struct {
	at time.Time
	ok bool
}

func (f fixedTimer) NextTimer() (time.Time, bool) { return f.at, f.ok }

func TestNextTick(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, c := range []struct {
		name  string
		timer Timed
		want  time.Duration // after now
	}{
		{"no timer: sleep the idle tick", fixedTimer{}, idleTick},
		{"timer in 300 ms", fixedTimer{now.Add(300 * time.Millisecond), true}, 300 * time.Millisecond},
		{"timer overdue: one grain on", fixedTimer{now.Add(-time.Second), true}, tickEvery},
		{"timer within the grain: the grain", fixedTimer{now.Add(10 * time.Millisecond), true}, tickEvery},
		{"timer beyond the idle tick: the idle tick", fixedTimer{now.Add(time.Minute), true}, idleTick},
		{"handler without timers: every grain", tickTimed{}, tickEvery},
	} {
		w := &workerLoop{timed: c.timer}
		if have := w.nextTick(now).Sub(now); have != c.want {
			t.Errorf("%s: want %v, have %v", c.name, c.want, have)
		}
	}
}

func TestFrameCost(t *testing.T) {
	for _, c := range []struct {
		name    string
		busy    int64
		handled uint64
		last    int64
		want    int64
	}{
		{"busy time per frame", 30_000_000, 3, 0, 10_000_000},
		{"idle keeps the last cost", 0, 0, 7_000, 7_000},
		{"only echoes handled: idle", 0, 2, 7_000, 7_000},
		{"stuck on one frame: at least its time so far", 1_000_000_000, 0, 10_000_000, 1_000_000_000},
		{"stuck, but cost more before", 5_000_000, 0, 10_000_000, 10_000_000},
		{"fast frames replace a slow past", 3_000, 100, 10_000_000, 30},
	} {
		if have := frameCost(c.busy, c.handled, c.last); have != c.want {
			t.Errorf("%s: want %d, have %d", c.name, c.want, have)
		}
	}
}

// A worker reports its heap and its GC's CPU time on the stats page, and a
// sample carries them.
func TestWorkerReportsHeapAndGCCPU(t *testing.T) {
	fx := newFixture(t, GroupOptions{Initial: 1, Command: testCommand("gc", 0)})
	waitFor(t, "a ready worker", 10*time.Second, func() bool { return len(fx.g.Routable()) == 1 })
	w := fx.g.Routable()[0]
	waitFor(t, "the heap reported", 5*time.Second, func() bool { return w.HeapBytes() > 0 })
	for i := range 3 {
		if err := fx.send(w, i); err != nil {
			t.Fatal(err)
		}
	}
	if got := fx.receive(3, 10*time.Second); len(got) != 3 {
		t.Fatalf("want 3 replies, have %d", len(got))
	}
	waitFor(t, "the GC's CPU time reported", 5*time.Second, func() bool { return w.GCCPUSeconds() > 0 })
	_, _, ws := fx.g.Sample(time.Now())
	if len(ws) != 1 || ws[0].Heap == 0 || ws[0].GCCPU <= 0 {
		t.Fatalf("want a sample with heap and GC CPU time, have %+v", ws)
	}
}
