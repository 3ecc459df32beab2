package pool

import "time"

// gcWindowSpan is the shortest span GC's share of a worker's CPU is taken
// over: a collection is a burst, and at 1,000 calls/s a worker collects
// every second or two, so a share over one sample reads 0 or several
// times the mean.
const gcWindowSpan = 10 * time.Second

// gcWindow turns a worker's cumulative GC and process CPU times into GC's
// percent of its CPU over the last gcWindowSpan to twice that: it keeps
// two checkpoints, the older the base, and moves them on once the newer
// one is a span old. Until a checkpoint is a span old, the base is the
// worker's start (both times 0).
type gcWindow struct {
	at      [2]int64 // ns; 0: not taken
	gc, cpu [2]float64
}

// add takes the times at now and returns the share; ok is false while the
// window holds no CPU time (nothing to divide by).
func (w *gcWindow) add(now int64, gc, cpu float64) (pct float64, ok bool) {
	switch {
	case w.at[1] == 0:
		w.at[1], w.gc[1], w.cpu[1] = now, gc, cpu
	case now-w.at[1] >= int64(gcWindowSpan):
		w.at[0], w.gc[0], w.cpu[0] = w.at[1], w.gc[1], w.cpu[1]
		w.at[1], w.gc[1], w.cpu[1] = now, gc, cpu
	}
	// A base ahead of now is a worker that restarted its counts (it
	// cannot: one process each), or a reading torn across the page's
	// words: start over rather than divide by a negative.
	if gc < w.gc[0] || cpu < w.cpu[0] {
		*w = gcWindow{}
		return 0, false
	}
	d := cpu - w.cpu[0]
	if d <= 0 {
		return 0, false
	}
	return min(100, max(0, 100*(gc-w.gc[0])/d)), true
}
