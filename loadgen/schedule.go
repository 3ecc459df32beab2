package loadgen

import (
	"fmt"
	"math"
	"os"
	"strconv"
	"strings"
	"time"
)

// Segment is one step of a rate schedule: Rate calls per second for Dur.
// A zero Dur on the last segment means "until the run is stopped".
type Segment struct {
	Rate float64
	Dur  time.Duration
}

// Schedule is a piecewise-constant offered rate. Every schedule sipload knows
// (constant, SIPp's -rate_increase ramp, --schedule) reduces to one, so the
// pacer needs only two pure functions of it: Calls and At.
type Schedule []Segment

// Constant is an endless schedule of rate calls per second.
func Constant(rate float64) Schedule { return Schedule{{Rate: rate}} }

// Ramp is SIPp's -rate_increase: start at rate, add step every interval until
// max. Like SIPp the run ends one interval after max is reached, unless
// noQuit, when max continues until the run is stopped.
func Ramp(rate, step, max float64, interval time.Duration, noQuit bool) Schedule {
	var s Schedule
	if step <= 0 || interval <= 0 {
		return Constant(rate)
	}
	for r := rate; ; r += step {
		if max > 0 && r >= max {
			r = max
			if noQuit {
				return append(s, Segment{Rate: r})
			}
			return append(s, Segment{Rate: r, Dur: interval})
		}
		s = append(s, Segment{Rate: r, Dur: interval})
		if max <= 0 && len(s) >= 100000 {
			// Without a ceiling the ramp never ends; cap the table, the run's
			// -m or -timeout ends it long before.
			return append(s, Segment{Rate: r + step})
		}
	}
}

// ParseSchedule reads "10/20s,100/40s,350/150s": calls per second and how long.
// "@file" reads the same text from a file, where newlines and '#' comments
// are allowed as well as commas.
func ParseSchedule(spec string) (Schedule, error) {
	name := ""
	if strings.HasPrefix(spec, "@") {
		name = spec[1:]
		b, err := os.ReadFile(name)
		if err != nil {
			return nil, fmt.Errorf("read schedule: %w", err)
		}
		spec = string(b)
	}
	var s Schedule
	line := 0
	for _, l := range strings.Split(spec, "\n") {
		line++
		if i := strings.IndexByte(l, '#'); i >= 0 {
			l = l[:i]
		}
		for _, f := range strings.Split(l, ",") {
			f = strings.TrimSpace(f)
			if f == "" {
				continue
			}
			seg, err := parseSegment(f)
			if err != nil {
				if name != "" {
					return nil, fmt.Errorf("%s:%d: %w", name, line, err)
				}
				return nil, fmt.Errorf("schedule step %d: %w", len(s)+1, err)
			}
			s = append(s, seg)
		}
	}
	if len(s) == 0 {
		return nil, fmt.Errorf("schedule %q has no steps", spec)
	}
	return s, nil
}

func parseSegment(f string) (Segment, error) {
	rs, ds, ok := strings.Cut(f, "/")
	if !ok {
		return Segment{}, fmt.Errorf("%q: want RATE/DURATION, such as 10/20s", f)
	}
	r, err := strconv.ParseFloat(strings.TrimSpace(rs), 64)
	if err != nil || r < 0 || math.IsInf(r, 0) || math.IsNaN(r) {
		return Segment{}, fmt.Errorf("%q: rate %q is not a number of calls per second", f, rs)
	}
	d, err := parseDuration(strings.TrimSpace(ds), time.Second)
	if err != nil || d <= 0 {
		return Segment{}, fmt.Errorf("%q: duration %q is not a positive duration such as 20s", f, ds)
	}
	return Segment{Rate: r, Dur: d}, nil
}

// parseDuration reads a SIPp time value: a bare number is in unit, else a Go
// duration ("1500ms", "2m").
func parseDuration(s string, unit time.Duration) (time.Duration, error) {
	if v, err := strconv.ParseFloat(s, 64); err == nil {
		if v < 0 || v > float64(math.MaxInt64)/float64(unit) {
			return 0, fmt.Errorf("duration %q out of range", s)
		}
		return time.Duration(v * float64(unit)), nil
	}
	return time.ParseDuration(s)
}

// Len is the scheduled length of the run; 0 for an endless schedule.
func (s Schedule) Len() time.Duration {
	var t time.Duration
	for i, g := range s {
		if g.Dur == 0 && i == len(s)-1 {
			return 0
		}
		t += g.Dur
	}
	return t
}

// RateAt is the scheduled rate at t; 0 after a finite schedule ends.
func (s Schedule) RateAt(t time.Duration) float64 {
	for i, g := range s {
		if t < g.Dur || (g.Dur == 0 && i == len(s)-1) {
			return g.Rate
		}
		t -= g.Dur
	}
	return 0
}

// Calls is how many calls the schedule has offered by t (fractional).
func (s Schedule) Calls(t time.Duration) float64 {
	n := 0.0
	for i, g := range s {
		if t <= g.Dur || (g.Dur == 0 && i == len(s)-1) {
			return n + g.Rate*t.Seconds()
		}
		n += g.Rate * g.Dur.Seconds()
		t -= g.Dur
	}
	return n
}

// At is the time the k-th call (1-based) is due, the inverse of Calls; ok is
// false when the schedule ends before it.
func (s Schedule) At(k float64) (t time.Duration, ok bool) {
	n := 0.0
	for i, g := range s {
		last := g.Dur == 0 && i == len(s)-1
		in := g.Rate * g.Dur.Seconds()
		if last || n+in >= k {
			if g.Rate <= 0 {
				if last {
					return 0, false
				}
				t += g.Dur
				continue
			}
			return t + time.Duration((k-n)/g.Rate*float64(time.Second)), true
		}
		n += in
		t += g.Dur
	}
	return 0, false
}
