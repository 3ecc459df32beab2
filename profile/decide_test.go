package profile

import (
	"math"
	"testing"
	"time"
)

func loads(v ...float64) []float64 { return v }

// repeat is n samples of the same load.
func repeat(load float64, n int) []float64 {
	h := make([]float64, n)
	for i := range h {
		h[i] = load
	}
	return h
}

func cat(hs ...[]float64) []float64 {
	var h []float64
	for _, x := range hs {
		h = append(h, x...)
	}
	return h
}

// profileA is the seed's
// `scale up to 6 on 70% for 4 cycles within 5 scale down to 2 on 18% for 10 cycles`.
var profileA = Profile{Name: "PROFILE_A", UpTo: 6, UpLoad: 70, UpCycles: 4, Window: 5,
	DownTo: 2, DownLoad: 18, DownCycles: 10}

// upOnly is profileA without its optional scale-down part.
var upOnly = Profile{Name: "UP_ONLY", UpTo: 6, UpLoad: 70, UpCycles: 4, Window: 5}

// tight is `scale up to 6 on 25% for 2 cycles within 3 scale down to 1 on 18% for 3 cycles`,
// where a drain from 3 workers at 17% would give 25.5%, over the up threshold.
var tight = Profile{Name: "TIGHT", UpTo: 6, UpLoad: 25, UpCycles: 2, Window: 3,
	DownTo: 1, DownLoad: 18, DownCycles: 3}

// eager is `scale up to 6 on 70% for 4 cycles within 5 scale down to 2 on 18% for 1 cycles`:
// its down run is short enough for both conditions to hold in one history.
var eager = Profile{Name: "EAGER", UpTo: 6, UpLoad: 70, UpCycles: 4, Window: 5,
	DownTo: 2, DownLoad: 18, DownCycles: 1}

// late is far past any cooldown.
const late = 100000

func TestDecide(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		p       Profile
		history []float64
		workers int
		cycle   int64
		fork    int64
		want    Action
		reason  string
	}{
		{"4 of 5 above 70%", profileA, loads(80, 90, 75, 60, 85), 3, late, 0, Up, ReasonLoadHigh},
		{"only 3 of 5 above 70%", profileA, loads(80, 90, 60, 60, 85), 3, late, 0, Hold, ReasonSteady},
		{"4 of last 5, older sample ignored", profileA, loads(10, 80, 90, 75, 60, 85), 3, late, 0, Up, ReasonLoadHigh},
		{"3 of last 5, older high ignored", profileA, loads(95, 95, 90, 60, 60, 85), 3, late, 0, Hold, ReasonSteady},
		{"exactly 70% is not above", profileA, loads(70, 70, 70, 70, 70), 3, late, 0, Hold, ReasonSteady},
		{"5 of 5 above 70% at the ceiling", profileA, loads(85, 85, 85, 85, 85), 6, late, 0, Hold, ReasonAtUpTo},
		{"fewer samples than the window", profileA, loads(90, 90, 90, 90), 3, late, 0, Hold, ReasonFewSamples},
		{"no samples", profileA, nil, 3, late, 0, Hold, ReasonFewSamples},
		{"10 cycles below 18%", profileA, repeat(7, 10), 4, late, 0, Down, ReasonLoadLow},
		{"only 9 cycles below 18%", profileA, repeat(7, 9), 4, late, 0, Hold, ReasonFewSamples},
		{"9 below after one at 20%", profileA, cat(loads(20), repeat(7, 9)), 4, late, 0, Hold, ReasonSteady},
		{"exactly 18% is not below", profileA, cat(repeat(7, 9), loads(18)), 4, late, 0, Hold, ReasonSteady},
		{"10 below at the floor", profileA, repeat(7, 10), 2, late, 0, Hold, ReasonAtDownTo},
		{"no down clause, idle 100 cycles", upOnly, repeat(0, 100), 4, late, 0, Hold, ReasonSteady},
		{"low but 1 cycle before cooldown ends", profileA, repeat(7, 10), 4, 99, 0, Hold, ReasonCooldown},
		{"low as cooldown ends", profileA, repeat(7, 10), 4, 100, 0, Down, ReasonLoadLow},
		{"low, cooldown restarted by a fork", profileA, repeat(7, 10), 4, 150, 60, Hold, ReasonCooldown},
		{"low, explicit cooldown of 5 over", Profile{UpTo: 6, UpLoad: 70, UpCycles: 4, Window: 5,
			DownTo: 2, DownLoad: 18, DownCycles: 10, Cooldown: 5}, repeat(7, 10), 4, 65, 60, Down, ReasonLoadLow},
		{"3 workers at 17% would give 25.5%", tight, loads(17, 17, 17), 3, late, 0, Hold, ReasonDrainOverload},
		{"4 workers at 17% give 22.7%", tight, loads(17, 17, 17), 4, late, 0, Down, ReasonLoadLow},
		{"up and down both met, below the ceiling", eager, loads(80, 90, 75, 85, 10), 5, late, 0, Up, ReasonLoadHigh},
		{"up and down both met at the ceiling", eager, loads(80, 90, 75, 85, 10), 6, late, 0, Hold, ReasonAtUpTo},
		{"more workers than up-to after a reload", profileA, loads(50, 50, 50, 50, 50), 8, late, late, Down, ReasonAboveUpTo},
		{"fewer workers than down-to after a reload", profileA, loads(50, 50, 50, 50, 50), 1, late, 0, Up, ReasonBelowFloor},
		{"no workers", upOnly, nil, 0, late, 0, Up, ReasonBelowFloor},
		{"no up part never forks", Profile{UpTo: 6, UpLoad: 70}, repeat(100, 10), 3, late, 0, Hold, ReasonSteady},
		{"NaN samples never act", profileA, repeat(math.NaN(), 10), 4, late, 0, Hold, ReasonSteady},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.p, State{Workers: tc.workers, History: tc.history, Cycle: tc.cycle, LastFork: tc.fork})
			if d.Action != tc.want || d.Reason != tc.reason {
				t.Errorf("want %v (%s), have %v (%s)", tc.want, tc.reason, d.Action, d.Reason)
			}
		})
	}
}

func TestDecideEstimatedLoad(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		p       Profile
		history []float64
		workers int
		want    float64
	}{
		{"up: mean of window × 4/5", profileA, loads(80, 90, 75, 60, 85), 4, 78 * 4.0 / 5},
		{"down: mean of run × 4/3", profileA, repeat(6, 10), 4, 8},
		{"refused drain: × 3/2", tight, loads(17, 17, 17), 3, 25.5},
		{"hold: mean of window", profileA, loads(99, 40, 50, 60, 40, 60), 3, 50},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := Decide(tc.p, State{Workers: tc.workers, History: tc.history, Cycle: late})
			if math.Abs(d.EstimatedLoad-tc.want) > 1e-9 {
				t.Errorf("want %v, have %v", tc.want, d.EstimatedLoad)
			}
		})
	}
}

func TestRescale(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		history  []float64
		from, to int
		want     []float64
	}{
		{"after a fork 3 → 4", loads(80, 40), 3, 4, loads(60, 30)},
		{"after a drain 2 → 1", loads(80, 40), 2, 1, loads(160, 80)},
		{"same size", loads(80, 40), 3, 3, loads(80, 40)},
		{"no workers before", loads(80, 40), 0, 1, loads(80, 40)},
		{"negative size", loads(80, 40), 3, -1, loads(80, 40)},
		{"empty", nil, 3, 4, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			have := Rescale(tc.history, tc.from, tc.to)
			if !equal(have, tc.want) {
				t.Errorf("want %v, have %v", tc.want, have)
			}
		})
	}
}

func equal(a, b []float64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if math.Abs(a[i]-b[i]) > 1e-9 {
			return false
		}
	}
	return true
}

func TestActionString(t *testing.T) {
	t.Parallel()
	for a, want := range map[Action]string{Hold: "hold", Up: "up", Down: "down", Action(7): "unknown"} {
		if have := a.String(); have != want {
			t.Errorf("want %v, have %v", want, have)
		}
	}
}

// Not parallel: it measures the process's allocations.
func TestNoAllocations(t *testing.T) {
	h := NewHistory(profileA.HistoryLen())
	v, err := NewViews(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]float64, 0, profileA.HistoryLen())
	s := State{Workers: 4, Cycle: late}
	allocs := testing.AllocsPerRun(1000, func() {
		h.Add(7)
		v.Add(7)
		s.History = h.Values(buf)
		d := Decide(profileA, s)
		if d.Action != Hold {
			h.Rescale(s.Workers, s.Workers-1)
		}
		_ = v.Loads()
	})
	if allocs != 0 {
		t.Errorf("want %v, have %v allocations per cycle", 0, allocs)
	}
}

func BenchmarkDecide(b *testing.B) {
	s := State{Workers: 4, History: cat(loads(80, 90, 75, 60, 85), repeat(7, 10)), Cycle: late}
	b.ReportAllocs()
	for b.Loop() {
		Decide(profileA, s)
	}
}
