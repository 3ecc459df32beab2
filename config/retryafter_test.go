package config

import (
	"testing"
	"time"
)

// Drawn says whether Draw can answer more than one value: what the
// workers' gates are refreshed for while the server refuses every new
// session.
func TestRetryAfterDrawn(t *testing.T) {
	s := time.Second
	for _, tc := range []struct {
		name     string
		min, max time.Duration
		drawn    bool
	}{
		{"fixed", 5 * s, 5 * s, false},
		{"none", 0, 0, false},
		{"a range", 5 * s, 15 * s, true},
		{"within one second", 5200 * time.Millisecond, 5700 * time.Millisecond, false},
	} {
		r := RetryAfter{Min: tc.min, Max: tc.max}
		if got := r.Drawn(); got != tc.drawn {
			t.Errorf("%s: Drawn = %v, want %v", tc.name, got, tc.drawn)
		}
		seen := map[int]bool{}
		for range 200 {
			seen[r.Draw()] = true
		}
		if many := len(seen) > 1; many != tc.drawn {
			t.Errorf("%s: Draw gave %d values in 200 draws; Drawn says %v", tc.name, len(seen), tc.drawn)
		}
	}
}
