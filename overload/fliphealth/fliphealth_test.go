package fliphealth

import (
	"fmt"
	"maps"
	"testing"
	"time"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// obs is one reading: component name, status, and when, as an offset from t0.
type obs struct {
	at   time.Duration
	name string
	up   bool
}

// flaps returns n readings of name alternating down, up, ... one every step,
// after an initial up reading at start, so it yields exactly n flips.
func flaps(name string, start, step time.Duration, n int) []obs {
	out := []obs{{start, name, true}}
	up := true
	for i := 1; i <= n; i++ {
		up = !up
		out = append(out, obs{start + time.Duration(i)*step, name, up})
	}
	return out
}

func cat(parts ...[]obs) []obs {
	var out []obs
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func TestTracker(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name       string
		window     time.Duration
		threshold  int
		obs        []obs
		at         time.Duration // query time, from t0
		wantOK     bool
		wantReason string
		wantCounts map[string]int
	}{
		{
			name:       "no readings",
			at:         time.Hour,
			wantOK:     true,
			wantCounts: map[string]int{},
		},
		{
			name:       "first reading is not a flip",
			obs:        []obs{{0, "relay", false}},
			wantOK:     true,
			wantCounts: map[string]int{"relay": 0},
		},
		{
			name:       "same status again is not a flip",
			obs:        []obs{{0, "relay", true}, {time.Second, "relay", true}, {2 * time.Second, "relay", true}},
			at:         3 * time.Second,
			wantOK:     true,
			wantCounts: map[string]int{"relay": 0},
		},
		{
			name:       "nine flips stay healthy",
			obs:        flaps("relay", 0, time.Minute, 9),
			at:         10 * time.Minute,
			wantOK:     true,
			wantCounts: map[string]int{"relay": 9},
		},
		{
			name:       "ten flips in 30 minutes reach the threshold",
			obs:        flaps("relay", 0, time.Minute, 10),
			at:         10 * time.Minute,
			wantReason: "relay flipped 10 times in 30m0s (threshold 10)",
			wantCounts: map[string]int{"relay": 10},
		},
		{
			// The first flip is at 1m; exactly one window later it still counts.
			name:       "flip exactly one window old counts",
			obs:        flaps("relay", 0, time.Minute, 10),
			at:         time.Minute + 30*time.Minute,
			wantReason: "relay flipped 10 times in 30m0s (threshold 10)",
			wantCounts: map[string]int{"relay": 10},
		},
		{
			name:       "flip one nanosecond past the window is pruned",
			obs:        flaps("relay", 0, time.Minute, 10),
			at:         time.Minute + 30*time.Minute + time.Nanosecond,
			wantOK:     true,
			wantCounts: map[string]int{"relay": 9},
		},
		{
			name:       "flips spread wider than the window never add up",
			obs:        flaps("relay", 0, 4*time.Minute, 10),
			at:         40 * time.Minute,
			wantOK:     true,
			wantCounts: map[string]int{"relay": 8},
		},
		{
			// The seed's known flaw: recovery only by aging.
			name: "good readings after flapping do not clear the history",
			obs: cat(flaps("relay", 0, time.Second, 10),
				[]obs{{time.Minute, "relay", true}, {10 * time.Minute, "relay", true}, {29 * time.Minute, "relay", true}}),
			at:         29 * time.Minute,
			wantReason: "relay flipped 10 times in 30m0s (threshold 10)",
			wantCounts: map[string]int{"relay": 10},
		},
		{
			name:       "steadily down is healthy by this measure",
			obs:        []obs{{0, "relay", true}, {time.Second, "relay", false}, {time.Hour, "relay", false}},
			at:         time.Hour,
			wantOK:     true,
			wantCounts: map[string]int{"relay": 0},
		},
		{
			name:       "components are counted apart",
			obs:        cat(flaps("relay", 0, time.Minute, 5), flaps("ems", 0, time.Minute, 5)),
			at:         6 * time.Minute,
			wantOK:     true,
			wantCounts: map[string]int{"relay": 5, "ems": 5},
		},
		{
			name:       "every unhealthy component is named, in order",
			obs:        cat(flaps("relay", 0, time.Minute, 12), flaps("ems", 0, time.Minute, 10), flaps("db", 0, time.Minute, 1)),
			at:         12 * time.Minute,
			wantReason: "ems flipped 10 times in 30m0s (threshold 10); relay flipped 12 times in 30m0s (threshold 10)",
			wantCounts: map[string]int{"relay": 12, "ems": 10, "db": 1},
		},
		{
			name:       "custom window and threshold",
			window:     time.Minute,
			threshold:  3,
			obs:        flaps("worker", 0, 20*time.Second, 3),
			at:         time.Minute + 20*time.Second,
			wantReason: "worker flipped 3 times in 1m0s (threshold 3)",
			wantCounts: map[string]int{"worker": 3},
		},
		{
			name:       "custom window prunes",
			window:     time.Minute,
			threshold:  3,
			obs:        flaps("worker", 0, 20*time.Second, 3),
			at:         time.Minute + 20*time.Second + time.Nanosecond,
			wantOK:     true,
			wantCounts: map[string]int{"worker": 2},
		},
		{
			name:       "counts saturate at the cap",
			threshold:  2000,
			obs:        flaps("relay", 0, time.Millisecond, 1500),
			at:         2 * time.Second,
			wantOK:     true,
			wantCounts: map[string]int{"relay": maxKept},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := New(tc.window, tc.threshold)
			for _, o := range tc.obs {
				tr.Observe(o.name, o.up, t0.Add(o.at))
			}
			now := t0.Add(tc.at)
			ok, reason := tr.Healthy(now)
			if ok != tc.wantOK || reason != tc.wantReason {
				t.Errorf("Healthy: want %v %q, have %v %q", tc.wantOK, tc.wantReason, ok, reason)
			}
			if have := tr.Counts(now); !maps.Equal(have, tc.wantCounts) {
				t.Errorf("Counts: want %v, have %v", tc.wantCounts, have)
			}
		})
	}
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		window    time.Duration
		threshold int
		wantW     time.Duration
		wantT     int
	}{
		{0, 0, 30 * time.Minute, 10},
		{-time.Second, -1, 30 * time.Minute, 10},
		{time.Minute, 3, time.Minute, 3},
	} {
		tr := New(tc.window, tc.threshold)
		if tr.Window() != tc.wantW || tr.Threshold() != tc.wantT {
			t.Errorf("New(%v, %d): want %v %d, have %v %d", tc.window, tc.threshold, tc.wantW, tc.wantT, tr.Window(), tr.Threshold())
		}
	}
}

// TestRecoversByAging walks the clock forward after a burst of flips and checks
// the minute the component turns healthy again: when the oldest flips leave the
// window, not when the readings turn good.
func TestRecoversByAging(t *testing.T) {
	t.Parallel()
	tr := New(30*time.Minute, 10)
	for _, o := range flaps("relay", 0, time.Minute, 10) { // flips at 1m..10m
		tr.Observe(o.name, o.up, t0.Add(o.at))
	}
	firstHealthy := time.Duration(-1)
	for m := 10 * time.Minute; m <= 45*time.Minute; m += time.Minute {
		now := t0.Add(m)
		tr.Observe("relay", true, now)
		if ok, _ := tr.Healthy(now); ok {
			firstHealthy = m
			break
		}
	}
	// The 1m flip is still in the window at 31m and gone one minute later.
	if want := 32 * time.Minute; firstHealthy != want {
		t.Fatalf("want %v, have %v", want, firstHealthy)
	}
}

func ExampleTracker() {
	tr := New(30*time.Minute, 10)
	up := true
	tr.Observe("relay", up, t0)
	for i := 1; i <= 10; i++ {
		up = !up
		tr.Observe("relay", up, t0.Add(time.Duration(i)*time.Minute))
	}
	fmt.Println(tr.Healthy(t0.Add(15 * time.Minute)))
	fmt.Println(tr.Healthy(t0.Add(45 * time.Minute)))
	// Output:
	// false relay flipped 10 times in 30m0s (threshold 10)
	// true
}

func TestSet(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1000, 0)
	tr := New(time.Hour, 10)
	for i := 0; i < 3; i++ {
		tr.Observe("c", i%2 == 0, t0.Add(time.Duration(i)*time.Minute))
	}
	if ok, _ := tr.Healthy(t0.Add(3 * time.Minute)); !ok {
		t.Fatal("want healthy at 2 flips of 10")
	}
	tr.Set(time.Hour, 2)
	if ok, _ := tr.Healthy(t0.Add(3 * time.Minute)); ok {
		t.Fatal("want unhealthy at 2 flips once the threshold is 2")
	}
	tr.Set(90*time.Second, 2)
	if ok, _ := tr.Healthy(t0.Add(3 * time.Minute)); !ok {
		t.Fatal("want healthy once the window holds only 1 flip")
	}
	if tr.Window() != 90*time.Second || tr.Threshold() != 2 {
		t.Fatalf("want 1m30s and 2, have %v and %d", tr.Window(), tr.Threshold())
	}
}
