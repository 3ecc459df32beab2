package ctl

import (
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"testing"
)

func TestKindParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		kind Kind
		text string
		want float64
		err  string // substring; "" means valid
	}{
		{Percent, "90", 90, ""},
		{Percent, " 85.5% ", 85.5, ""},
		{Percent, "0", 0, ""},
		{Percent, "100", 100, ""},
		{Percent, "100.01", 0, "outside 0–100"},
		{Percent, "-1", 0, "outside 0–100"},
		{Percent, "NaN", 0, "not a usable number"},
		{Percent, "abc", 0, `"abc" is not a number`},
		{Percent, "", 0, "no value given"},
		{Count, "12", 12, ""},
		{Count, "1e3", 1000, ""},
		{Count, "-1", 0, "0 or more"},
		{Count, "1.5", 0, "whole number"},
		{Count, "Inf", 0, "not a usable number"},
		{Count, "1e300", 0, "too large"},
		{Seconds, "1.5", 1.5, ""},
		{Seconds, "500ms", 0.5, ""},
		{Seconds, "-2s", 0, "0 or more"},
		{Seconds, "-0.5", 0, "0 or more"},
		{Seconds, "2 s", 0, "not a number"},
		{Bool, "on", 1, ""},
		{Bool, "No", 0, ""},
		{Bool, "1", 1, ""},
		{Bool, "2", 0, "not a switch"},
		{Number, "-3.25", -3.25, ""},
		{Number, "+Inf", 0, "not a usable number"},
		{Number, "0x10", 0, "not a number"},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%v/%s", tt.kind, tt.text), func(t *testing.T) {
			v, err := tt.kind.Parse(tt.text)
			if tt.err == "" {
				if err != nil || v != tt.want {
					t.Fatalf("want %v, have %v (%v)", tt.want, v, err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.err) {
				t.Fatalf("want error with %q, have %v", tt.err, err)
			}
		})
	}
}

func TestParamsSet(t *testing.T) {
	t.Parallel()
	const mem = "suspend_watermarks/system_memory_usage/"
	tests := []struct {
		path, text string
		err        string // substring; "" means accepted
		unknown    bool   // the error wraps ErrUnknownPath
		check      string // path to read after
		want       any
	}{
		{path: mem + "high", text: "90", check: mem + "high", want: 90.0},
		{path: "/" + mem + "high/", text: "90", check: mem + "high", want: 90.0},
		{path: mem + "low", text: "84.5%", check: mem + "low", want: 84.5},
		{path: mem + "low", text: "85", err: "low watermark 85 must be under high watermark 85", check: mem + "low", want: 70.0},
		{path: mem + "high", text: "70", err: "must be under", check: mem + "high", want: 85.0},
		{path: mem + "high", text: "101", err: "outside 0–100", check: mem + "high", want: 85.0},
		{path: mem + "high", text: "ninety", err: `"ninety" is not a number`, check: mem + "high", want: 85.0},
		{path: mem + "high", text: "NaN", err: "not a usable number", check: mem + "high", want: 85.0},
		{path: mem + "hihg", text: "90", err: `unknown path "suspend_watermarks/system_memory_usage/hihg" (did you mean "suspend_watermarks/system_memory_usage/high"?)`, unknown: true, check: mem + "high", want: 85.0},
		{path: "suspend_watermark", text: "90", err: `(did you mean "suspend_watermarks"?)`, unknown: true},
		{path: "nothing/like/it", text: "1", err: `unknown path "nothing/like/it"`, unknown: true},
		{path: "suspend_watermarks", text: "90", err: "suspend_watermarks is a group of settings, not one: use one of suspend_watermarks/event_queue_usage, suspend_watermarks/heap_usage,"},
		{path: "", text: "1", err: "the root is a group of settings"},
		{path: "suspend_watermarks/number_of_sessions/high", text: "-5", err: "0 or more", check: "suspend_watermarks/number_of_sessions/high", want: 100000.0},
		{path: "suspend_watermarks/number_of_sessions/low", text: "100.5", err: "whole number", check: "suspend_watermarks/number_of_sessions/low", want: 80000.0},
		{path: "limits/queue_admission_threshold", text: "95", err: "0–90%", check: "limits/queue_admission_threshold", want: 0.0},
		{path: "limits/queue_admission_threshold", text: "90", check: "limits/queue_admission_threshold", want: 90.0},
		{path: "throttle/enable", text: "off", check: "throttle/enable", want: false},
		{path: "throttle/enable", text: "maybe", err: "not a switch", check: "throttle/enable", want: true},
		{path: "throttle/rtt_threshold", text: "250ms", check: "throttle/rtt_threshold", want: 0.25},
		{path: "sessions", text: "1", err: "sessions is read-only", check: "sessions", want: 42.0},
	}
	for _, tt := range tests {
		t.Run(tt.path+"="+tt.text, func(t *testing.T) {
			p := newTestBackend().Params()
			err := p.Set(tt.path, tt.text)
			switch {
			case tt.err == "" && err != nil:
				t.Fatalf("want no error, have %v", err)
			case tt.err != "" && (err == nil || !strings.Contains(err.Error(), tt.err)):
				t.Fatalf("want error with %q, have %v", tt.err, err)
			}
			if err != nil && errors.Is(err, ErrUnknownPath) != tt.unknown {
				t.Errorf("want unknown-path %v, have %v", tt.unknown, !tt.unknown)
			}
			if tt.check == "" {
				return
			}
			have, err := p.Get(tt.check)
			if err != nil || have != tt.want {
				t.Fatalf("after: want %v, have %v (%v)", tt.want, have, err)
			}
		})
	}
}

func TestParamsGetSubtree(t *testing.T) {
	t.Parallel()
	p := newTestBackend().Params()
	have, err := p.Get("suspend_watermarks/system_memory_usage")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{"high": 85.0, "low": 70.0}
	if !reflect.DeepEqual(have, want) {
		t.Fatalf("want %v, have %v", want, have)
	}
	all, err := p.Get("")
	if err != nil {
		t.Fatal(err)
	}
	tree := all.(map[string]any)
	if got := tree["throttle"].(map[string]any)["enable"]; got != true {
		t.Errorf("throttle/enable: want true, have %v", got)
	}
	if got := tree["suspend_watermarks"].(map[string]any)["number_of_sessions"].(map[string]any)["low"]; got != 80000.0 {
		t.Errorf("number_of_sessions/low: want 80000, have %v", got)
	}
	if len(tree) != 4 {
		t.Errorf("top level: want 4 keys, have %v", tree)
	}
	if _, err := p.Get("suspend_watermarks/system_memory"); !errors.Is(err, ErrUnknownPath) || !strings.Contains(err.Error(), `did you mean "suspend_watermarks/system_memory_usage"`) {
		t.Errorf("prefix typo: want unknown path with a suggestion, have %v", err)
	}
	if _, err := NewParams().Get(""); !errors.Is(err, ErrUnknownPath) {
		t.Errorf("empty registry: want unknown path, have %v", err)
	}
	if k, err := p.Kind("suspend_watermarks/number_of_sessions/high"); k != Count || err != nil {
		t.Errorf("want count, have %v (%v)", k, err)
	}
	if _, err := p.Kind("throttle"); err == nil || !strings.Contains(err.Error(), "group of settings") {
		t.Errorf("Kind of a prefix: want a group error, have %v", err)
	}
}

func TestParamsRegisterPanics(t *testing.T) {
	t.Parallel()
	get := func() float64 { return 0 }
	tests := []struct {
		name  string
		setup []string
		path  string
		get   func() float64
		want  string
	}{
		{"twice", []string{"a/b"}, "a/b", get, "registered twice"},
		{"leaf under leaf", []string{"a/b"}, "a/b/c", get, "conflicts with a/b"},
		{"leaf over prefix", []string{"a/b/c"}, "a/b", get, "conflicts with a/b/c"},
		{"empty", nil, "", get, "malformed path"},
		{"double slash", nil, "a//b", get, "malformed path"},
		{"leading slash", nil, "/a", get, "malformed path"},
		{"nil getter", nil, "a", nil, "nil getter"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := NewParams()
			for _, s := range tt.setup {
				p.Register(s, get, nil, Number)
			}
			defer func() {
				r := recover()
				if s, _ := r.(string); !strings.Contains(s, tt.want) {
					t.Fatalf("want panic with %q, have %v", tt.want, r)
				}
			}()
			p.Register(tt.path, tt.get, nil, Number)
		})
	}
}

// TestParamsConcurrent is for -race: sets of a low and high pair from many
// goroutines must keep low under high, since sets are one at a time.
func TestParamsConcurrent(t *testing.T) {
	t.Parallel()
	b := newTestBackend()
	p := b.Params()
	const mem = "suspend_watermarks/system_memory_usage/"
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range 200 {
				v := fmt.Sprint(50 + (g*7+i)%50)
				if i%2 == 0 {
					p.Set(mem+"high", v)
				} else {
					p.Set(mem+"low", v)
				}
				p.Get("suspend_watermarks")
			}
		}()
	}
	wg.Wait()
	hi, _ := p.Get(mem + "high")
	lo, _ := p.Get(mem + "low")
	if lo.(float64) >= hi.(float64) {
		t.Fatalf("want low under high, have low %v high %v", lo, hi)
	}
	paths := p.Paths()
	if len(paths) != 13 || paths[0] != "limits/max_sessions" {
		t.Fatalf("want 13 sorted paths from limits/max_sessions, have %v", paths)
	}
}

func TestFormatSeconds(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   float64
		want string
	}{
		{0, "0s"}, {2, "2s"}, {0.5, "500ms"}, {1.5, "1.5s"}, {120, "2m"}, {90, "90s"},
		{3600, "1h"}, {0.0001, "100µs"}, {30, "30s"},
	} {
		if have := FormatSeconds(tc.in); have != tc.want {
			t.Errorf("%v: want %q, have %q", tc.in, tc.want, have)
		}
	}
}
