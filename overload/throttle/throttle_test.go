package throttle

import (
	"math"
	"strings"
	"testing"
	"time"
)

const ms = time.Millisecond

// TestTable1 is the seed's Table 1 ("Ejemplo de limitación de carga debido al
// tiempo de retraso de ida y vuelta"): threshold 1 s, one echo a second,
// 10 % fewer sessions per 3 readings over in a row, throttle removed after 3
// in a row under. One row per second, the table's own numbers.
func TestTable1(t *testing.T) {
	t.Parallel()
	th := New(DefaultConfig())
	for _, row := range []struct {
		second  int
		rtt     time.Duration
		allowed int // percent of sessions allowed
		changed bool
	}{
		{1, 850 * ms, 100, false},
		{2, 900 * ms, 100, false},
		{3, 995 * ms, 100, false},
		{4, 1021 * ms, 100, false}, // over, count #1
		{5, 1130 * ms, 100, false}, // over, count #2
		{6, 1158 * ms, 90, true},   // over, count #3: reduced by 10 %
		{7, 1127 * ms, 90, false},  // over, count #1
		{8, 1135 * ms, 90, false},  // over, count #2
		{9, 1126 * ms, 80, true},   // over, count #3: reduced by 10 %
		{10, 1000 * ms, 80, false}, // not over (equal), count #1
		{11, 991 * ms, 80, false},  // not over, count #2
		{12, 998 * ms, 100, true},  // not over, count #3: throttle removed
	} {
		share, changed := th.Observe(row.rtt)
		allowed := int(math.Round(100 * (1 - share)))
		if allowed != row.allowed || changed != row.changed {
			t.Errorf("second %d, %v: want %d%% allowed (changed %v), have %d%% (changed %v)",
				row.second, row.rtt, row.allowed, row.changed, allowed, changed)
		}
		if th.Share() != share {
			t.Errorf("second %d: Share: want %v, have %v", row.second, share, th.Share())
		}
	}
}

func TestObserve(t *testing.T) {
	t.Parallel()
	const over, under = 1500 * ms, 500 * ms
	rtts := func(d ...time.Duration) []time.Duration { return d }
	repeat := func(d time.Duration, n int) []time.Duration {
		s := make([]time.Duration, n)
		for i := range s {
			s[i] = d
		}
		return s
	}
	cat := func(ss ...[]time.Duration) []time.Duration {
		var all []time.Duration
		for _, s := range ss {
			all = append(all, s...)
		}
		return all
	}
	for _, tc := range []struct {
		name string
		cfg  Config
		rtts []time.Duration
		want float64
	}{
		{"two over is not a run", DefaultConfig(), rtts(over, over), 0},
		{"an under breaks the run", DefaultConfig(), rtts(over, over, under, over, over), 0},
		{"three over", DefaultConfig(), rtts(over, over, over), 0.1},
		{"six over", DefaultConfig(), repeat(over, 6), 0.2},
		{"an under between steps keeps the share", DefaultConfig(), rtts(over, over, over, under, over, over, over), 0.2},
		{"two under do not lift it", DefaultConfig(), cat(repeat(over, 3), rtts(under, under)), 0.1},
		{"an over breaks the under run", DefaultConfig(), cat(repeat(over, 3), rtts(under, under, over, under, under)), 0.1},
		{"three under lift all steps at once", DefaultConfig(), cat(repeat(over, 9), repeat(under, 3)), 0},
		{"under while not throttled count for nothing", DefaultConfig(), cat(rtts(under, under), repeat(over, 3), rtts(under)), 0.1},
		{"capped at everything", DefaultConfig(), repeat(over, 60), 1},
		{"capped then lifted", DefaultConfig(), cat(repeat(over, 60), repeat(under, 3)), 0},
		{"disabled never throttles", Config{}, repeat(over, 60), 0},
		{"own threshold, count and step", Config{Threshold: 200 * ms, Count: 2, Step: 0.25, Enabled: true},
			repeat(300*ms, 4), 0.5},
		{"step not dividing 1 is capped", Config{Step: 0.3, Enabled: true}, repeat(over, 12), 1},
		{"zero values take the defaults", Config{Enabled: true}, rtts(1001*ms, 1001*ms, 1001*ms), 0.1},
		{"bad values take the defaults", Config{Threshold: -1, Count: -2, Step: 7, Enabled: true}, repeat(over, 3), 0.1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th := New(tc.cfg)
			var share float64
			for _, r := range tc.rtts {
				share, _ = th.Observe(r)
			}
			if share != tc.want {
				t.Errorf("want %v, have %v", tc.want, share)
			}
		})
	}
}

func TestAdmit(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name    string
		steps   int // 3 readings over each
		step    float64
		refused []uint64 // within the first 20
	}{
		{"not throttled", 0, 0.1, nil},
		{"10 %", 1, 0.1, []uint64{9, 19}},
		{"20 %", 2, 0.1, []uint64{4, 9, 14, 19}},
		{"25 %", 1, 0.25, []uint64{3, 7, 11, 15, 19}},
		{"100 %", 10, 0.1, []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			th := New(Config{Step: tc.step, Enabled: true})
			for range 3 * tc.steps {
				th.Observe(2 * time.Second)
			}
			var refused []uint64
			for n := range uint64(20) {
				if !th.Admit(n) {
					refused = append(refused, n)
				}
			}
			if !equal(refused, tc.refused) {
				t.Errorf("want %v, have %v", tc.refused, refused)
			}
		})
	}
}

func equal(a, b []uint64) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestAdmitExactShare checks, for shares that do not divide a million evenly
// into sessions, that any million sessions in a row, wherever they start, see
// exactly the share refused.
func TestAdmitExactShare(t *testing.T) {
	t.Parallel()
	for _, step := range []float64{0.03, 0.1, 1.0 / 3, 0.7} {
		th := New(Config{Step: step, Enabled: true})
		th.Observe(2 * time.Second)
		th.Observe(2 * time.Second)
		th.Observe(2 * time.Second)
		want := int(math.Round(th.Share() * million))
		for _, start := range []uint64{0, 123457, math.MaxUint64 - million + 1} {
			refused := 0
			for i := range uint64(million) {
				if !th.Admit(start + i) {
					refused++
				}
			}
			if refused != want {
				t.Errorf("share %v from %d: want %v refused, have %v", th.Share(), start, want, refused)
			}
		}
	}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		cfg  Config
		want []string // fragments; none means valid
	}{
		{"defaults", DefaultConfig(), nil},
		{"zero", Config{}, nil},
		{"negative threshold", Config{Threshold: -time.Second}, []string{"threshold -1s: must be positive"}},
		{"negative count", Config{Count: -1}, []string{"count -1: must be at least 1"}},
		{"percent given as step", Config{Step: 10}, []string{"step 10: must be within 0..1"}},
		{"NaN step", Config{Step: math.NaN()}, []string{"step NaN"}},
		{"all at once", Config{Threshold: -1, Count: -1, Step: -1}, []string{"threshold", "count", "step"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.cfg.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("want %v, have %v", nil, err)
				}
				return
			}
			if err == nil {
				t.Fatalf("want an error with %q, have none", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("want %q in the error, have %v", w, err)
				}
			}
		})
	}
}

// Not parallel: it measures the process's allocations.
func TestNoAllocations(t *testing.T) {
	th := New(DefaultConfig())
	var n uint64
	allocs := testing.AllocsPerRun(1000, func() {
		th.Observe(time.Duration(n%7) * 300 * ms)
		th.Admit(n)
		n++
	})
	if allocs != 0 {
		t.Errorf("want %v, have %v allocations", 0, allocs)
	}
}

func BenchmarkObserve(b *testing.B) {
	th := New(DefaultConfig())
	rtts := []time.Duration{850 * ms, 1021 * ms, 1130 * ms, 1158 * ms, 998 * ms, 991 * ms, 1200 * ms}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		th.Observe(rtts[i%len(rtts)])
		i++
	}
}

func BenchmarkAdmit(b *testing.B) {
	th := New(DefaultConfig())
	for range 6 {
		th.Observe(2 * time.Second)
	}
	b.ReportAllocs()
	var n uint64
	for b.Loop() {
		th.Admit(n)
		n++
	}
}

// TestConcurrentAdmit has the front door admitting while the echo monitor
// observes; run with -race. Whatever the interleaving, Admit sees either no
// throttle or a 10 % one, so at most every tenth session is refused.
func TestConcurrentAdmit(t *testing.T) {
	t.Parallel()
	th := New(DefaultConfig())
	done := make(chan int)
	go func() {
		refused := 0
		for n := range uint64(100000) {
			if !th.Admit(n) {
				refused++
			}
		}
		done <- refused
	}()
	for i := range 3000 {
		rtt := 500 * ms
		if i%6 < 3 {
			rtt = 1500 * ms
		}
		th.Observe(rtt)
	}
	select {
	case refused := <-done:
		if refused > 10000 {
			t.Errorf("want at most %v refused, have %v", 10000, refused)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("admitting did not finish within 10 s")
	}
}
