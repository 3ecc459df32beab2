package profile

import (
	"math"
	"testing"
)

// FuzzDecide feeds any profile, state and history to Decide: it must never
// panic, act outside its limits, or drain into the up threshold.
func FuzzDecide(f *testing.F) {
	f.Add(6, 70, 4, 5, 2, 18, 10, 0, 4, int64(200), int64(0), []byte{80, 90, 75, 60, 85})
	f.Add(6, 25, 2, 3, 1, 18, 3, 0, 3, int64(200), int64(0), []byte{17, 17, 17})
	f.Add(0, 0, 0, 0, 0, 0, 0, 0, 0, int64(0), int64(0), []byte{})
	f.Add(-1, -5, -3, -2, -1, 200, -7, -9, -4, int64(-5), int64(9), []byte{255, 0})
	f.Fuzz(func(t *testing.T, upTo, upLoad, upCycles, window, downTo, downLoad, downCycles, cooldown, workers int,
		cycle, lastFork int64, raw []byte) {
		p := Profile{UpTo: upTo, UpLoad: upLoad, UpCycles: upCycles, Window: window,
			DownTo: downTo, DownLoad: downLoad, DownCycles: downCycles, Cooldown: cooldown}
		h := make([]float64, len(raw))
		for i, b := range raw {
			h[i] = float64(b) / 2
		}
		d := Decide(p, State{Workers: workers, History: h, Cycle: cycle, LastFork: lastFork})
		switch d.Action {
		case Up:
			if workers >= upTo {
				t.Errorf("up with %d workers, limit %d", workers, upTo)
			}
		case Down:
			if d.Reason == ReasonLoadLow && (workers <= downTo || !(d.EstimatedLoad < float64(upLoad))) {
				t.Errorf("down to %d workers (floor %d), estimated %v%% with up at %d%%", workers-1, downTo, d.EstimatedLoad, upLoad)
			}
			if d.Reason == ReasonAboveUpTo && workers <= upTo {
				t.Errorf("down for the limit with %d workers, limit %d", workers, upTo)
			}
		}
		if math.IsNaN(d.EstimatedLoad) {
			t.Errorf("estimated load NaN from %v", h)
		}
	})
}
