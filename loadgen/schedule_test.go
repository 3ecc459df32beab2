package loadgen

import (
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestParseSchedule(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		spec string
		want Schedule
		err  string
	}{
		{spec: "10/20s,100/40s,10/40s,350/150s,10/60s", want: Schedule{{10, 20 * time.Second}, {100, 40 * time.Second}, {10, 40 * time.Second}, {350, 150 * time.Second}, {10, time.Minute}}},
		{spec: " 5/1500ms , 0/2 ", want: Schedule{{5, 1500 * time.Millisecond}, {0, 2 * time.Second}}},
		{spec: "2.5/1m", want: Schedule{{2.5, time.Minute}}},
		{spec: "", err: "no steps"},
		{spec: "10", err: `"10": want RATE/DURATION`},
		{spec: "10/20s,x/5s", err: "step 2"},
		{spec: "-1/5s", err: "not a number of calls"},
		{spec: "10/0s", err: "not a positive duration"},
		{spec: "10/banana", err: "not a positive duration"},
	} {
		have, err := ParseSchedule(tc.spec)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%q: want error with %q, have %v", tc.spec, tc.err, err)
			}
			continue
		}
		if err != nil {
			t.Errorf("%q: %v", tc.spec, err)
			continue
		}
		if len(have) != len(tc.want) {
			t.Errorf("%q: want %v, have %v", tc.spec, tc.want, have)
			continue
		}
		for i := range have {
			if have[i] != tc.want[i] {
				t.Errorf("%q step %d: want %v, have %v", tc.spec, i, tc.want[i], have[i])
			}
		}
	}
}

func TestParseScheduleFile(t *testing.T) {
	t.Parallel()
	name := filepath.Join(t.TempDir(), "swing.txt")
	if err := os.WriteFile(name, []byte("# OpenSIPS 3.0 auto-scaling\n10/20s\n100/40s, 10/40s\n\n350/bad\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := ParseSchedule("@" + name)
	if err == nil || !strings.Contains(err.Error(), "swing.txt:5:") {
		t.Fatalf("want error at swing.txt:5, have %v", err)
	}
	if _, err := ParseSchedule("@" + name + ".missing"); err == nil {
		t.Fatal("want error for a missing file, have nil")
	}
}

func TestScheduleCallsAndAt(t *testing.T) {
	t.Parallel()
	s := Schedule{{10, 2 * time.Second}, {0, time.Second}, {100, time.Second}}
	for _, tc := range []struct {
		t     time.Duration
		calls float64
		rate  float64
	}{
		{0, 0, 10},
		{time.Second, 10, 10},
		{2 * time.Second, 20, 0},
		{2500 * time.Millisecond, 20, 0},
		{3 * time.Second, 20, 100},
		{3500 * time.Millisecond, 70, 100},
		{4 * time.Second, 120, 0},
		{time.Hour, 120, 0},
	} {
		if have := s.Calls(tc.t); math.Abs(have-tc.calls) > 1e-9 {
			t.Errorf("Calls(%v): want %v, have %v", tc.t, tc.calls, have)
		}
		if have := s.RateAt(tc.t); have != tc.rate {
			t.Errorf("RateAt(%v): want %v, have %v", tc.t, tc.rate, have)
		}
	}
	for _, tc := range []struct {
		k    float64
		want time.Duration
		ok   bool
	}{
		{1, 100 * time.Millisecond, true},
		{20, 2 * time.Second, true},
		{21, 3*time.Second + 10*time.Millisecond, true},
		{120, 4 * time.Second, true},
		{121, 0, false},
	} {
		have, ok := s.At(tc.k)
		if ok != tc.ok || (ok && (have-tc.want).Abs() > time.Microsecond) {
			t.Errorf("At(%v): want %v %v, have %v %v", tc.k, tc.want, tc.ok, have, ok)
		}
	}
	if have := s.Len(); have != 4*time.Second {
		t.Errorf("Len: want 4s, have %v", have)
	}
	c := Constant(50)
	if have, _ := c.At(100); have != 2*time.Second {
		t.Errorf("constant At(100): want 2s, have %v", have)
	}
	if c.Len() != 0 {
		t.Errorf("constant Len: want 0, have %v", c.Len())
	}
}

func TestRamp(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name            string
		rate, step, max float64
		noQuit          bool
		want            Schedule
	}{
		{"quits one interval after max", 10, 10, 30, false, Schedule{{10, time.Second}, {20, time.Second}, {30, time.Second}}},
		{"no_rate_quit holds max", 10, 10, 30, true, Schedule{{10, time.Second}, {20, time.Second}, {30, 0}}},
		{"max between steps", 10, 15, 30, false, Schedule{{10, time.Second}, {25, time.Second}, {30, time.Second}}},
		{"no step is constant", 10, 0, 30, false, Schedule{{10, 0}}},
	} {
		have := Ramp(tc.rate, tc.step, tc.max, time.Second, tc.noQuit)
		if len(have) != len(tc.want) {
			t.Errorf("%s: want %v, have %v", tc.name, tc.want, have)
			continue
		}
		for i := range have {
			if have[i] != tc.want[i] {
				t.Errorf("%s step %d: want %v, have %v", tc.name, i, tc.want[i], have[i])
			}
		}
	}
}
