package watermark

import (
	"math"
	"strings"
	"testing"
)

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		p       Pair
		percent bool
		want    string // "" for valid
	}{
		{Pair{High: 85, Low: 70}, true, ""},
		{Pair{High: 100, Low: 0}, true, ""},
		{Pair{High: 20000, Low: 15000}, false, ""},
		{Pair{High: 85, Low: 85}, true, "low watermark 85% must be below high watermark 85%"},
		{Pair{High: 70, Low: 85}, true, "low watermark 85% must be below high watermark 70%"},
		{Pair{High: 100, Low: 100}, false, "low watermark 100 must be below high watermark 100"},
		{Pair{High: 120, Low: 70}, true, "high watermark 120% is outside 0–100%"},
		{Pair{High: 85, Low: -1}, true, "low watermark -1% is outside 0–100%"},
		{Pair{High: 10, Low: -5}, false, "low watermark -5 is negative"},
		{Pair{High: -1, Low: -5}, false, "high watermark -1 is negative"},
		{Pair{High: math.NaN(), Low: 70}, true, "high watermark NaN is not a number"},
		{Pair{High: 85, Low: math.Inf(-1)}, false, "low watermark -Inf is not a number"},
	} {
		err := Validate(tc.p, tc.percent)
		if have := errString(err); have != tc.want {
			t.Errorf("Validate(%+v, %v): want %q, have %q", tc.p, tc.percent, tc.want, have)
		}
	}
}

func TestWatermarksValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		w    Watermarks
		want string
	}{
		{Defaults(), ""},
		{Watermarks{}, ""},
		{Watermarks{HeapUsage: {High: 90, Low: 95}}, "heap_usage: low watermark 95% must be below high watermark 90%"},
		{Watermarks{NumberOfSessions: {High: 150, Low: 100}}, ""}, // a count may exceed 100
		{Watermarks{"cpu": {High: 90, Low: 50}}, `unknown monitor "cpu"`},
	} {
		if have := errString(tc.w.Validate()); !strings.Contains(have, tc.want) || (tc.want == "") != (have == "") {
			t.Errorf("%v: want %q, have %q", tc.w, tc.want, have)
		}
	}
}

// TestWith replays the seed's run-time change, 85/70 to 90/85, in both orders.
func TestWith(t *testing.T) {
	t.Parallel()
	w := Defaults()
	w2, err := w.With(SystemMemoryUsage, "high", 90)
	if err != nil {
		t.Fatal(err)
	}
	w3, err := w2.With(SystemMemoryUsage, "low", 85)
	if err != nil {
		t.Fatal(err)
	}
	if have, want := w3[SystemMemoryUsage], (Pair{High: 90, Low: 85}); have != want {
		t.Errorf("want %v, have %v", want, have)
	}
	if have, want := w[SystemMemoryUsage], (Pair{High: 85, Low: 70}); have != want {
		t.Errorf("With changed its receiver: want %v, have %v", want, have)
	}
	for _, tc := range []struct {
		m    Monitor
		side string
		v    float64
		want string
	}{
		{SystemMemoryUsage, "low", 85, "system_memory_usage: low watermark 85% must be below high watermark 85% (raise the high watermark first)"},
		{SystemMemoryUsage, "high", 60, "system_memory_usage: low watermark 70% must be below high watermark 60% (lower the low watermark first)"},
		{SystemMemoryUsage, "high", math.NaN(), "system_memory_usage: high watermark NaN is not a number"},
		{SystemMemoryUsage, "middle", 1, `unknown watermark "middle" of system_memory_usage (want high or low)`},
		{"cpu", "high", 1, `unknown monitor "cpu"`},
		{NumberOfSessions, "low", 10, "number_of_sessions: low watermark 10 must be below high watermark 0 (raise the high watermark first)"},
	} {
		_, err := w.With(tc.m, tc.side, tc.v)
		if have := errString(err); !strings.HasPrefix(have, tc.want) {
			t.Errorf("With(%s, %s, %v): want %q, have %q", tc.m, tc.side, tc.v, tc.want, have)
		}
	}
}

func TestParseMonitor(t *testing.T) {
	t.Parallel()
	for _, m := range Monitors() {
		if have, err := ParseMonitor(string(m)); err != nil || have != m {
			t.Errorf("ParseMonitor(%q): want %q, have %q, %v", m, m, have, err)
		}
	}
	if _, err := ParseMonitor("systemMemoryUsage"); err == nil {
		t.Error("ParseMonitor(systemMemoryUsage): want an error, have none")
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
