// Package watermark suspends a server under heavy load and resumes it when the
// load allows, after AppGate SDP 6.4's auto-suspend.
//
// Each monitor has a high and a low watermark. When any monitored value meets
// its high watermark (>=) the server is suspended: existing sessions carry on,
// new ones are refused. It resumes only when every monitor that caused the
// suspension has come down to its low watermark; between low and high nothing
// changes, so a value hovering around one line does not make the state flap.
// An operator can also suspend by hand, and such a suspension lasts until the
// operator resumes.
//
// State.Observe is a pure function of the sampled values, the watermarks in
// force and the time; ReadSystemMemory is the one piece that does I/O, kept
// apart from the parsing it relies on.
//
// Invariant: a pair's low watermark is below its high one (Validate, which
// the config and ctl set both apply), so the state cannot flap on every
// sample; the admission state in force lives in package overload.
package watermark

import (
	"fmt"
	"math"
	"slices"
	"strconv"
)

// Monitor names a monitored resource, spelled as in config keys and ctl paths
// (suspend_watermarks/<monitor>/high).
type Monitor string

// The seed's monitors, in the order reports list them.
const (
	// EventQueueUsage is the percent of a worker queue in use (AppGate's
	// eventQueueUsage: events awaiting processing).
	EventQueueUsage Monitor = "event_queue_usage"
	// HeapUsage is the percent of a worker's heap limit in use (javaHeapUsage).
	HeapUsage Monitor = "heap_usage"
	// NumberOfSessions is the number of sessions (calls and subscriptions;
	// the bindings of registrations are none): a count, not a percent.
	NumberOfSessions Monitor = "number_of_sessions"
	// SystemMemoryUsage is the percent of the memory available to the server in
	// use (systemMemoryUsage).
	SystemMemoryUsage Monitor = "system_memory_usage"
)

// Monitors returns the known monitors in report order.
func Monitors() []Monitor {
	return []Monitor{EventQueueUsage, HeapUsage, NumberOfSessions, SystemMemoryUsage}
}

// ParseMonitor accepts a monitor name as written in a config key or ctl path.
func ParseMonitor(s string) (Monitor, error) {
	for _, m := range Monitors() {
		if string(m) == s {
			return m, nil
		}
	}
	return "", fmt.Errorf("unknown monitor %q (want event_queue_usage, heap_usage, number_of_sessions or system_memory_usage)", s)
}

// IsPercent reports whether the monitor's values are percentages (0–100) rather
// than counts.
func (m Monitor) IsPercent() bool { return m != NumberOfSessions }

// Pair is the high and low watermark of one monitor.
type Pair struct {
	// High: at or above it the server is suspended.
	High float64 `json:"high"`
	// Low: at or below it the monitor no longer holds the server suspended.
	Low float64 `json:"low"`
}

// Watermarks are the pairs in force; a monitor without a pair is not watched.
type Watermarks map[Monitor]Pair

// Sample holds one reading of each monitor. A monitor missing from it (its read
// failed) neither suspends nor resumes the server.
type Sample map[Monitor]float64

// Defaults returns the watermarks the seed gives numbers for: system memory
// suspends at 85 % and resumes at 70 %. The other monitors depend on the
// deployment and are watched only when configured.
func Defaults() Watermarks {
	return Watermarks{SystemMemoryUsage: {High: 85, Low: 70}}
}

// Validate reports why a pair cannot be used, so that a value set at run time is
// refused with a reason: a value that is not a number, a percent outside 0–100,
// a negative count, or a low watermark not below the high one (which would let
// the state flap on every sample).
func Validate(p Pair, isPercent bool) error {
	for _, side := range []struct {
		name string
		v    float64
	}{{"high", p.High}, {"low", p.Low}} {
		switch {
		case math.IsNaN(side.v) || math.IsInf(side.v, 0):
			return fmt.Errorf("%s watermark %v is not a number", side.name, side.v)
		case isPercent && (side.v < 0 || side.v > 100):
			return fmt.Errorf("%s watermark %s is outside 0–100%%", side.name, format(side.v, true))
		case side.v < 0:
			return fmt.Errorf("%s watermark %s is negative", side.name, format(side.v, false))
		}
	}
	if p.Low >= p.High {
		return fmt.Errorf("low watermark %s must be below high watermark %s", format(p.Low, isPercent), format(p.High, isPercent))
	}
	return nil
}

// Validate checks every pair, naming the monitor of the first bad one.
func (w Watermarks) Validate() error {
	for _, m := range order(w) {
		if _, err := ParseMonitor(string(m)); err != nil {
			return err
		}
		if err := Validate(w[m], m.IsPercent()); err != nil {
			return fmt.Errorf("%s: %w", m, err)
		}
	}
	return nil
}

// With returns a copy of w with one watermark changed ("high" or "low"), the
// run-time set of suspend_watermarks/<monitor>/<side>. The changed pair must
// stay valid; when it would not, the error says which one to change first.
func (w Watermarks) With(m Monitor, side string, v float64) (Watermarks, error) {
	if _, err := ParseMonitor(string(m)); err != nil {
		return nil, err
	}
	p := w[m]
	switch side {
	case "high":
		p.High = v
	case "low":
		p.Low = v
	default:
		return nil, fmt.Errorf("unknown watermark %q of %s (want high or low)", side, m)
	}
	if err := Validate(p, m.IsPercent()); err != nil {
		hint := ""
		if !math.IsNaN(v) && p.Low >= p.High {
			if side == "low" {
				hint = " (raise the high watermark first)"
			} else {
				hint = " (lower the low watermark first)"
			}
		}
		return nil, fmt.Errorf("%s: %w%s", m, err, hint)
	}
	out := make(Watermarks, len(w)+1)
	for k, x := range w {
		out[k] = x
	}
	out[m] = p
	return out, nil
}

// order lists the monitors of w: known ones in report order, then any others
// (only ever rejected by Validate) by name.
func order[V any](w map[Monitor]V) []Monitor {
	out := make([]Monitor, 0, len(w))
	for _, m := range Monitors() {
		if _, ok := w[m]; ok {
			out = append(out, m)
		}
	}
	var rest []Monitor
	for m := range w {
		if _, err := ParseMonitor(string(m)); err != nil {
			rest = append(rest, m)
		}
	}
	slices.Sort(rest)
	return append(out, rest...)
}

// format prints a watermark as the operator wrote it: 85% rather than 85.0%,
// and a session count without a unit.
func format(v float64, isPercent bool) string {
	s := strconv.FormatFloat(v, 'f', -1, 64)
	if isPercent {
		return s + "%"
	}
	return s
}

// formatValue prints a measured value: percents to one decimal, as 86.2%, and
// counts whole.
func formatValue(v float64, isPercent bool) string {
	if isPercent {
		return strconv.FormatFloat(v, 'f', 1, 64) + "%"
	}
	return strconv.FormatFloat(v, 'f', 0, 64)
}
