package profile

import (
	"math"
	"strings"
	"testing"
	"time"
)

func TestViews(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name  string
		cycle time.Duration
		add   []float64
		want  Loads
	}{
		{"nothing yet", time.Second, nil, Loads{}},
		{"1 s cycle, fewer samples than a minute", time.Second, cat(repeat(10, 30), repeat(40, 30)),
			Loads{Second: 40, Minute: 25, TenMinutes: 25}},
		{"1 s cycle, 11 minutes", time.Second, cat(repeat(10, 60), repeat(70, 540), repeat(10, 60)),
			Loads{Second: 10, Minute: 10, TenMinutes: 64}},
		{"2 s cycle: the 1 s view is the last sample", 2 * time.Second, cat(repeat(50, 29), loads(20)),
			Loads{Second: 20, Minute: 49, TenMinutes: 49}},
		{"250 ms cycle: 4 samples a second", 250 * time.Millisecond, cat(repeat(0, 236), loads(10, 20, 30, 40)),
			Loads{Second: 25, Minute: 100.0 / 240, TenMinutes: 100.0 / 240}},
		{"10 min cycle: every view is the last sample", 10 * time.Minute, loads(30, 60),
			Loads{Second: 60, Minute: 60, TenMinutes: 60}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			v, err := NewViews(tc.cycle)
			if err != nil {
				t.Fatal(err)
			}
			for _, x := range tc.add {
				v.Add(x)
			}
			have := v.Loads()
			if !near(have.Second, tc.want.Second) || !near(have.Minute, tc.want.Minute) || !near(have.TenMinutes, tc.want.TenMinutes) {
				t.Errorf("want %+v, have %+v", tc.want, have)
			}
		})
	}
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

// TestViewsNoDrift runs many laps of values that do not add up exactly in
// binary; the running sums must still agree with a fresh sum.
func TestViewsNoDrift(t *testing.T) {
	t.Parallel()
	v, err := NewViews(time.Second)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 100000 {
		v.Add(0.1 + float64(i%7)*0.3)
	}
	v.Add(0) // any remainder would show as a nonzero 1 s view on 0 load
	for range 599 {
		v.Add(0)
	}
	if have := v.Loads(); have.Second != 0 || have.Minute != 0 || math.Abs(have.TenMinutes) > 1e-12 {
		t.Errorf("want %+v, have %+v", Loads{}, have)
	}
}

func TestNewViewsBadCycle(t *testing.T) {
	t.Parallel()
	for _, cycle := range []time.Duration{0, -time.Second} {
		_, err := NewViews(cycle)
		if err == nil || !strings.Contains(err.Error(), "must be positive") {
			t.Errorf("cycle %v: want an error saying it must be positive, have %v", cycle, err)
		}
	}
}
