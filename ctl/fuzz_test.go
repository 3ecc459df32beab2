package ctl

import (
	"math"
	"testing"
)

// FuzzSet feeds Params arbitrary paths and values: every refusal must be an
// error (never a panic), and a refused set must change nothing.
func FuzzSet(f *testing.F) {
	for _, s := range [][2]string{
		{memHigh, "90"}, {memHigh, "NaN"}, {memHigh, "-0"}, {memHigh, "1e309"},
		{"suspend_watermarks", "1"}, {"", ""}, {"//", "x"}, {"throttle/enable", "ON"},
		{"throttle/rtt_threshold", "-1ns"}, {"suspend_watermarks/number_of_sessions/low", "0x1p-2"},
		{"limits/queue_admission_threshold", "90.0000001"}, {"sessions", "1"},
	} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, path, text string) {
		p := newTestBackend().Params()
		before, err := p.Get("")
		if err != nil {
			t.Fatal(err)
		}
		err = p.Set(path, text)
		after, _ := p.Get("")
		if err != nil {
			if !equalTrees(before, after) {
				t.Fatalf("refused set %q=%q changed %v into %v", path, text, before, after)
			}
			return
		}
		v, gerr := p.Get(path)
		if gerr != nil {
			t.Fatalf("accepted set %q, then Get: %v", path, gerr)
		}
		if f, ok := v.(float64); ok && (math.IsNaN(f) || math.IsInf(f, 0)) {
			t.Fatalf("accepted %q=%q as %v", path, text, f)
		}
	})
}

func equalTrees(a, b any) bool {
	am, aok := a.(map[string]any)
	bm, bok := b.(map[string]any)
	if aok != bok {
		return false
	}
	if !aok {
		return a == b
	}
	if len(am) != len(bm) {
		return false
	}
	for k, v := range am {
		if !equalTrees(v, bm[k]) {
			return false
		}
	}
	return true
}
