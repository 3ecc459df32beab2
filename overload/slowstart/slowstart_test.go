package slowstart

import (
	"math"
	"slices"
	"strings"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 0, 0, time.UTC)

// worker is one worker of a simulated group; ramp is nil for an established one.
type worker struct {
	name string
	ramp *Ramp
	n    uint64 // new sessions in the current interval
}

// serve offers perSecond new sessions, evenly spaced, during [from, from+d) to a
// least-loaded front door: each session goes to the worker with the fewest
// sessions so far in this interval (the earlier one on a tie) whose ramp, if
// any, allows it. It returns each worker's rate in sessions per second.
func serve(t *testing.T, ws []*worker, from time.Time, d time.Duration, perSecond int) []float64 {
	t.Helper()
	for _, w := range ws {
		w.n = 0
	}
	order := slices.Clone(ws)
	total := int(d.Seconds() * float64(perSecond))
	for k := range total {
		now := from.Add(time.Duration(int64(k) * int64(time.Second) / int64(perSecond)))
		slices.SortStableFunc(order, func(a, b *worker) int {
			return int(a.n) - int(b.n)
		})
		taken := false
		for _, w := range order {
			if w.ramp == nil || w.ramp.Allow(now) {
				w.n++
				taken = true
				break
			}
		}
		if !taken {
			t.Fatalf("session at %v: no worker took it", now.Sub(t0))
		}
	}
	rates := make([]float64, len(ws))
	for i, w := range ws {
		rates[i] = float64(w.n) / d.Seconds()
	}
	return rates
}

// tick hands every ramping worker the interval's counts.
func tick(ws []*worker, now time.Time) {
	var peers uint64
	var peerWorkers int
	for _, w := range ws {
		if w.ramp == nil || w.ramp.Done() {
			peers += w.n
			peerWorkers++
		}
	}
	for _, w := range ws {
		if w.ramp != nil {
			w.ramp.Tick(now, Sample{Own: w.n, Peers: peers, PeerWorkers: peerWorkers})
		}
	}
}

func mustNew(t *testing.T, c Config, now time.Time, peerRate float64) *Ramp {
	t.Helper()
	r, err := New(c, now, peerRate)
	if err != nil {
		t.Fatalf("New(%+v): %v", c, err)
	}
	return r
}

// TestSeedTable2 replays the seed's manual example: a virtual server of 240
// requests/s over Service1 and Service2; Service3 added at 10/s, raised to 20,
// then 40 as Service4 is added, then the rate is set to 0.
func TestSeedTable2(t *testing.T) {
	t.Parallel()
	const phase = 10 * time.Second
	manual := func(v float64) Config { return Config{Mode: Manual, Unit: PerSecond, Value: v} }
	s1, s2 := &worker{name: "Service1"}, &worker{name: "Service2"}
	s3 := &worker{name: "Service3", ramp: mustNew(t, manual(10), t0, 120)}
	s4 := &worker{name: "Service4"}
	ws := []*worker{s1, s2, s3}

	for i, tc := range []struct {
		column string
		setup  func(now time.Time)
		want   []float64 // Service1..Service4 per second; Service4 absent before it is added
	}{
		{"rate = 10/s (Service3 added)", func(time.Time) {}, []float64{115, 115, 10}},
		{"rate = 20/s", func(now time.Time) {
			if err := s3.ramp.Reconfigure(manual(20), now); err != nil {
				t.Fatal(err)
			}
		}, []float64{110, 110, 20}},
		{"rate = 40/s (Service4 added)", func(now time.Time) {
			if err := s3.ramp.Reconfigure(manual(40), now); err != nil {
				t.Fatal(err)
			}
			s4.ramp = mustNew(t, manual(40), now, 110)
			ws = append(ws, s4)
		}, []float64{80, 80, 40, 40}},
		{"rate = 0/s (slow start ends)", func(now time.Time) {
			for _, w := range []*worker{s3, s4} {
				if err := w.ramp.Reconfigure(manual(0), now); err != nil {
					t.Fatal(err)
				}
			}
		}, []float64{60, 60, 60, 60}},
	} {
		from := t0.Add(time.Duration(i) * phase)
		tc.setup(from)
		have := serve(t, ws, from, phase, 240)
		if !slices.Equal(have, tc.want) {
			t.Errorf("%s: want %v, have %v", tc.column, tc.want, have)
		}
		if sum(have) != 240 {
			t.Errorf("%s: total: want 240, have %v", tc.column, sum(have))
		}
		// Manual mode holds its level whatever the traffic: ticks change nothing.
		tick(ws, from.Add(phase))
		if i < 3 && s3.ramp.Done() {
			t.Fatalf("%s: manual ramp ended on its own (%s)", tc.column, s3.ramp.Reason())
		}
	}
	for _, w := range []*worker{s3, s4} {
		if w.ramp.Reason() != ReasonOff {
			t.Errorf("%s: want %v, have %v", w.name, ReasonOff, w.ramp.Reason())
		}
	}
}

// TestSeedTable4 replays the seed's automatic example: 100 requests/s over four
// services, Service5 added with 4 requests/s every 10 s. Column "0 s" is before
// Service5 starts; column "N s" is the interval that ends at N s.
func TestSeedTable4(t *testing.T) {
	t.Parallel()
	const interval = 10 * time.Second
	cfg := Config{Mode: Auto, Unit: PerSecond, Value: 4, Increment: 4, Interval: interval}
	ws := []*worker{{name: "Service1"}, {name: "Service2"}, {name: "Service3"}, {name: "Service4"}}

	before := serve(t, ws, t0.Add(-interval), interval, 100)
	s5 := &worker{name: "Service5", ramp: mustNew(t, cfg, t0, before[0])}
	ws = append(ws, s5)

	table := []struct {
		column string
		want   []float64 // Service1..Service5
	}{
		{"0 s", []float64{25, 25, 25, 25, 0}},
		{"10 s", []float64{24, 24, 24, 24, 4}},
		{"20 s", []float64{23, 23, 23, 23, 8}},
		{"30 s", []float64{22, 22, 22, 22, 12}},
		{"40 s", []float64{21, 21, 21, 21, 16}},
		{"50 s", []float64{20, 20, 20, 20, 20}},
	}
	if want := table[0].want[:4]; !slices.Equal(before, want) {
		t.Errorf("%s: want %v, have %v", table[0].column, want, before)
	}
	for i, row := range table[1:] {
		from := t0.Add(time.Duration(i) * interval)
		have := serve(t, ws, from, interval, 100)
		if !slices.Equal(have, row.want) {
			t.Errorf("%s: want %v, have %v", row.column, row.want, have)
		}
		end := from.Add(interval)
		tick(ws, end)
		// The ramp ends at the 50 s tick, not before.
		if wantDone := end.Sub(t0) == 50*time.Second; s5.ramp.Done() != wantDone {
			t.Errorf("%s: done: want %v, have %v (%s)", row.column, wantDone, s5.ramp.Done(), s5.ramp.Reason())
		}
	}
	if s5.ramp.Reason() != ReasonFullShare {
		t.Errorf("reason: want %v, have %v", ReasonFullShare, s5.ramp.Reason())
	}
	if s5.ramp.Increments() != 4 {
		t.Errorf("increments: want 4, have %d", s5.ramp.Increments())
	}
	// After slow start Service5 is an ordinary worker.
	have := serve(t, ws, t0.Add(50*time.Second), interval, 100)
	if want := []float64{20, 20, 20, 20, 20}; !slices.Equal(have, want) {
		t.Errorf("after 50 s: want %v, have %v", want, have)
	}
}

// TestSeedPercentExample replays the seed's Table 5: 25 % of an established
// service's load, raised every 5 s; the new service has its full share 20 s
// after it is added.
func TestSeedPercentExample(t *testing.T) {
	t.Parallel()
	const interval = 5 * time.Second
	cfg := Config{Mode: Auto, Unit: Percent, Increment: 25, Interval: interval}
	ws := []*worker{{name: "Service1"}, {name: "Service2"}, {name: "Service3"}, {name: "Service4"}}
	s5 := &worker{name: "Service5", ramp: mustNew(t, cfg, t0, 25)}
	ws = append(ws, s5)

	var levels []float64
	var doneAt time.Duration
	for i := range 6 {
		from := t0.Add(time.Duration(i) * interval)
		levels = append(levels, s5.ramp.Level())
		rates := serve(t, ws, from, interval, 100)
		if !s5.ramp.Done() {
			// The worker gets its level's share of an established worker's load,
			// give or take the one session the budget starts with.
			if want := s5.ramp.Level() / 100 * rates[0]; math.Abs(rates[4]-want) > 0.1*want+1 {
				t.Errorf("interval %d at %v%%: want about %.1f/s, have %.1f/s", i, s5.ramp.Level(), want, rates[4])
			}
		}
		tick(ws, from.Add(interval))
		if s5.ramp.Done() && doneAt == 0 {
			doneAt = from.Add(interval).Sub(t0)
		}
	}
	if want := []float64{25, 50, 75, 100}; !slices.Equal(levels[:4], want) {
		t.Errorf("levels: want %v, have %v", want, levels[:4])
	}
	if want := 20 * time.Second; doneAt != want {
		t.Errorf("done at: want %v, have %v", want, doneAt)
	}
	if s5.ramp.Reason() != ReasonFullShare {
		t.Errorf("reason: want %v, have %v", ReasonFullShare, s5.ramp.Reason())
	}
}

// TestExits drives an automatic ramp with hand-written interval samples.
func TestExits(t *testing.T) {
	t.Parallel()
	perSec := Config{Mode: Auto, Unit: PerSecond, Increment: 4, Interval: 10 * time.Second}
	// full is a 10 s interval in which the worker took all its limit: own
	// sessions at the given level, four peers at peerRate each.
	full := func(level, peerRate float64) Sample {
		return Sample{Own: uint64(level * 10), Peers: uint64(peerRate * 40), PeerWorkers: 4}
	}
	for _, tc := range []struct {
		name       string
		cfg        Config
		samples    []Sample
		wantReason Reason
		wantAt     int // 1-based tick at which the ramp ended; 0 = still running
		wantLevels []float64
	}{
		{
			name:       "below step",
			cfg:        perSec,
			samples:    []Sample{{Own: 39, Peers: 1000, PeerWorkers: 4}},
			wantReason: ReasonBelowStep, wantAt: 1,
			wantLevels: []float64{4},
		},
		{
			name:       "exactly one step is not below it",
			cfg:        perSec,
			samples:    []Sample{{Own: 40, Peers: 1000, PeerWorkers: 4}},
			wantLevels: []float64{4, 8},
		},
		{
			name:       "three idle intervals",
			cfg:        perSec,
			samples:    []Sample{{Peers: 1000, PeerWorkers: 4}, {Peers: 1000, PeerWorkers: 4}, {Peers: 1000, PeerWorkers: 4}},
			wantReason: ReasonNoTraffic, wantAt: 3,
			wantLevels: []float64{4, 4, 4},
		},
		{
			name:       "traffic resets the idle count",
			cfg:        perSec,
			samples:    []Sample{{Peers: 1000, PeerWorkers: 4}, {Peers: 1000, PeerWorkers: 4}, full(4, 25), {Peers: 1000, PeerWorkers: 4}, {Peers: 1000, PeerWorkers: 4}},
			wantLevels: []float64{4, 4, 4, 8, 8, 8},
		},
		{
			name:       "final increment is smaller than the step",
			cfg:        perSec,
			samples:    []Sample{full(4, 18), full(8, 18), full(12, 18), full(16, 18), full(18, 18)},
			wantReason: ReasonFullShare, wantAt: 5,
			wantLevels: []float64{4, 8, 12, 16, 18},
		},
		{
			name:       "no established worker left",
			cfg:        perSec,
			samples:    []Sample{{Own: 40}},
			wantReason: ReasonFullShare, wantAt: 1,
			wantLevels: []float64{4},
		},
		{
			name:       "value sets the first level",
			cfg:        Config{Mode: Auto, Unit: PerSecond, Value: 10, Increment: 5, Interval: time.Second},
			samples:    []Sample{{Own: 10, Peers: 400, PeerWorkers: 4}, {Own: 15, Peers: 400, PeerWorkers: 4}},
			wantLevels: []float64{10, 15, 20},
		},
		{
			name:       "percent ends at 100",
			cfg:        Config{Mode: Auto, Unit: Percent, Increment: 40, Interval: 10 * time.Second},
			samples:    []Sample{full(10, 25), full(20, 25), full(25, 25)},
			wantReason: ReasonFullShare, wantAt: 3,
			wantLevels: []float64{40, 80, 100},
		},
		{
			name:       "percent below step",
			cfg:        Config{Mode: Auto, Unit: Percent, Increment: 40, Interval: 10 * time.Second},
			samples:    []Sample{full(9, 25)}, // 9/s against one step of 40 % × 25/s = 10/s
			wantReason: ReasonBelowStep, wantAt: 1,
			wantLevels: []float64{40},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r := mustNew(t, tc.cfg, t0, 25)
			levels := []float64{r.Level()}
			at := 0
			for i, s := range tc.samples {
				r.Tick(t0.Add(time.Duration(i+1)*tc.cfg.Interval), s)
				if r.Done() {
					at = i + 1
					break
				}
				levels = append(levels, r.Level())
			}
			if r.Reason() != tc.wantReason || at != tc.wantAt {
				t.Errorf("want %q at tick %d, have %q at tick %d", tc.wantReason, tc.wantAt, r.Reason(), at)
			}
			if !slices.Equal(levels, tc.wantLevels) {
				t.Errorf("levels: want %v, have %v", tc.wantLevels, levels)
			}
		})
	}
}

// TestMaxIncrements grows a ramp by 1/s against very busy peers until the seed's
// 200 increments end it.
func TestMaxIncrements(t *testing.T) {
	t.Parallel()
	cfg := Config{Mode: Auto, Unit: PerSecond, Increment: 1, Interval: time.Second}
	r := mustNew(t, cfg, t0, 1e6)
	ticks := 0
	for i := 1; i <= 1000 && !r.Done(); i++ {
		r.Tick(t0.Add(time.Duration(i)*time.Second), Sample{Own: uint64(r.Level()), Peers: 4e6, PeerWorkers: 4})
		ticks = i
	}
	if r.Reason() != ReasonMaxIncrements {
		t.Fatalf("want %v, have %v", ReasonMaxIncrements, r.Reason())
	}
	if r.Increments() != MaxIncrements || ticks != MaxIncrements+1 {
		t.Errorf("want %d increments ending at tick %d, have %d at tick %d", MaxIncrements, MaxIncrements+1, r.Increments(), ticks)
	}
	if r.Level() != 201 {
		t.Errorf("level: want 201, have %v", r.Level())
	}
}

func TestManualNeverEndsByItself(t *testing.T) {
	t.Parallel()
	r := mustNew(t, Config{Mode: Manual, Unit: PerSecond, Value: 25}, t0, 100)
	for i := 1; i <= 500; i++ {
		// Idle, below the value, or far above the peers: none ends manual mode.
		s := []Sample{{}, {Own: 1, Peers: 10, PeerWorkers: 1}, {Own: 250, PeerWorkers: 0}}[i%3]
		r.Tick(t0.Add(time.Duration(i)*time.Second), s)
	}
	if r.Done() || r.Level() != 25 || r.Rate() != 25 {
		t.Fatalf("want running at 25/s, have done=%v level=%v rate=%v", r.Done(), r.Level(), r.Rate())
	}
}

func TestManualPercentFollowsPeers(t *testing.T) {
	t.Parallel()
	r := mustNew(t, Config{Mode: Manual, Unit: Percent, Value: 50}, t0, 30)
	if r.Rate() != 15 {
		t.Errorf("start: want 15, have %v", r.Rate())
	}
	r.Tick(t0.Add(10*time.Second), Sample{Own: 150, Peers: 1600, PeerWorkers: 4}) // peers at 40/s
	if r.Rate() != 20 {
		t.Errorf("after tick: want 20, have %v", r.Rate())
	}
	r.Tick(t0.Add(20*time.Second), Sample{Own: 0, Peers: 0, PeerWorkers: 4}) // idle group
	if r.Rate() != minPercentRate {
		t.Errorf("idle group: want %v, have %v", minPercentRate, r.Rate())
	}
}

func TestOff(t *testing.T) {
	t.Parallel()
	for _, c := range []Config{{}, {Mode: Off, Value: 5}, {Mode: Manual, Value: 0}} {
		r := mustNew(t, c, t0, 10)
		if !r.Done() || r.Reason() != ReasonOff || !r.Allow(t0) || !math.IsInf(r.Rate(), 1) {
			t.Errorf("%+v: want done (off) and unlimited, have done=%v reason=%q rate=%v", c, r.Done(), r.Reason(), r.Rate())
		}
	}
}

func TestReconfigure(t *testing.T) {
	t.Parallel()
	auto := Config{Mode: Auto, Unit: PerSecond, Increment: 4, Interval: 10 * time.Second}
	r := mustNew(t, auto, t0, 25)
	r.Tick(t0.Add(10*time.Second), Sample{Own: 40, Peers: 960, PeerWorkers: 4})
	if r.Level() != 8 {
		t.Fatalf("want 8, have %v", r.Level())
	}
	bigger := auto
	bigger.Increment = 6
	if err := r.Reconfigure(bigger, t0.Add(15*time.Second)); err != nil {
		t.Fatal(err)
	}
	if r.Level() != 8 {
		t.Errorf("auto keeps its level: want 8, have %v", r.Level())
	}
	r.Tick(t0.Add(20*time.Second), Sample{Own: 80, Peers: 920, PeerWorkers: 4})
	if r.Level() != 14 {
		t.Errorf("new increment: want 14, have %v", r.Level())
	}
	bad := auto
	bad.Increment = math.NaN()
	if err := r.Reconfigure(bad, t0.Add(21*time.Second)); err == nil || r.Level() != 14 {
		t.Errorf("invalid setting: want an error and level 14, have %v and %v", err, r.Level())
	}
	if err := r.Reconfigure(Config{Mode: Off}, t0.Add(22*time.Second)); err != nil || r.Reason() != ReasonOff {
		t.Errorf("off: want ended (off), have %v %q", err, r.Reason())
	}
	if err := r.Reconfigure(auto, t0.Add(23*time.Second)); err != nil || !r.Done() {
		t.Errorf("an ended ramp stays ended: have %v done=%v", err, r.Done())
	}
}

func TestAllowBudget(t *testing.T) {
	t.Parallel()
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	r := mustNew(t, Config{Mode: Manual, Unit: PerSecond, Value: 4}, t0, 0)
	for _, tc := range []struct {
		at   time.Time
		want bool
	}{
		{ms(0), true}, // one at once
		{ms(0), false},
		{ms(249), false},
		{ms(250), true}, // then one every 250 ms
		{ms(300), false},
		{ms(500), true},
		{ms(10_000), true}, // after a quiet spell: one at once, no pile of credit
		{ms(10_000), false},
		{ms(10_100), false},
		{ms(10_250), true},
		{ms(5_000), false}, // a clock that steps back gets nothing extra
	} {
		if have := r.Allow(tc.at); have != tc.want {
			t.Errorf("Allow at %v: want %v, have %v", tc.at.Sub(t0), tc.want, have)
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		cfg  Config
		want string // error fragment, "" for valid
	}{
		{Config{}, ""},
		{Config{Mode: Manual, Value: 25}, ""},
		{Config{Mode: Auto, Unit: Percent, Increment: 25, Interval: 5 * time.Second}, ""},
		{Config{Mode: "fast"}, `unknown slow start mode "fast" (want off, manual or auto)`},
		{Config{Mode: Manual, Unit: "rps", Value: 1}, `unknown slow start unit "rps"`},
		{Config{Mode: Manual, Value: -1}, "slow start value -1 is negative"},
		{Config{Mode: Manual, Value: math.NaN()}, "slow start value NaN is not a number"},
		{Config{Mode: Auto, Increment: math.Inf(1), Interval: time.Second}, "slow start increment +Inf is not a number"},
		{Config{Mode: Manual, Unit: Percent, Value: 150}, "slow start value 150% is above 100% (an equal share)"},
		{Config{Mode: Auto, Interval: time.Second}, "auto slow start needs an increment above 0"},
		{Config{Mode: Auto, Increment: 4}, "auto slow start needs an interval above 0"},
		{Config{Mode: Manual, Value: 1, Interval: -time.Second}, "slow start interval -1s is negative"},
	} {
		err := tc.cfg.Validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: want no error, have %v", tc.cfg, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: want %q, have %v", tc.cfg, tc.want, err)
		}
		if _, nerr := New(tc.cfg, t0, 10); (nerr == nil) != (err == nil) {
			t.Errorf("%+v: New and Validate disagree: %v, %v", tc.cfg, nerr, err)
		}
	}
}

func TestAllowHugeRate(t *testing.T) {
	t.Parallel()
	r := mustNew(t, Config{Mode: Manual, Unit: PerSecond, Value: 1e300}, t0, 0)
	for i := range 5 {
		if !r.Allow(t0.Add(time.Duration(i+1) * time.Second)) {
			t.Fatalf("session %d: want allowed, have refused", i)
		}
	}
}

// TestAllowDoesNotAllocate guards the front door's per-session cost.
// Not parallel: it measures the process's allocations.
func TestAllowDoesNotAllocate(t *testing.T) {
	r := mustNew(t, Config{Mode: Manual, Unit: PerSecond, Value: 1000}, t0, 0)
	now := t0
	if n := testing.AllocsPerRun(1000, func() {
		now = now.Add(time.Millisecond)
		r.Allow(now)
	}); n != 0 {
		t.Fatalf("want 0 allocations, have %v", n)
	}
}

func BenchmarkAllow(b *testing.B) {
	r, err := New(Config{Mode: Auto, Unit: PerSecond, Value: 500, Increment: 10, Interval: 10 * time.Second}, t0, 1000)
	if err != nil {
		b.Fatal(err)
	}
	now := t0
	b.ReportAllocs()
	for b.Loop() {
		now = now.Add(time.Microsecond)
		r.Allow(now)
	}
}

func BenchmarkAllowDone(b *testing.B) {
	r, err := New(Config{}, t0, 0)
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		r.Allow(t0)
	}
}

func sum(xs []float64) float64 {
	var s float64
	for _, x := range xs {
		s += x
	}
	return s
}
