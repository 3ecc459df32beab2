// Package fliphealth marks a component unhealthy when its status flaps, after the
// AppNet agent's flip health check: the time of every status flip is
// kept for a window (30 minutes by default), older ones are pruned, and a count
// within the window that reaches the threshold (10 by default) makes the
// component unhealthy.
//
// The rule has two known weaknesses, kept here because they are what the seed
// specifies, so callers must pair it with other checks:
//
//   - One good reading does not clear the history. A component that flapped ten
//     times and has then been steadily up for 29 minutes is still unhealthy; it
//     recovers only when its flips age out of the window.
//   - A component that goes down and stays down flips once and then never
//     again, so flip health calls it healthy. A liveness check has to catch
//     that case; flip health catches only the flapping one.
//
// Nothing here reads the clock: every call takes now, so tests and the
// supervisor's cycle loop decide what time it is.
//
// Invariant: a component is unhealthy exactly while its flips within the
// window reach the threshold; the tracker in force, fed by suspensions,
// throttles and worker crashes, lives in package overload.
package fliphealth

import (
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"
)

// Defaults of the seed: 10 flips within 30 minutes.
const (
	DefaultWindow    = 30 * time.Minute
	DefaultThreshold = 10
)

// Config is flip health's settings. A zero Window or Threshold takes the
// seed's default.
type Config struct {
	Window    time.Duration `json:"window"`
	Threshold int           `json:"threshold"`
}

// Validate reports a setting New could not use as given.
func (c Config) Validate() error {
	if c.Window < 0 {
		return fmt.Errorf("flip window %v is negative", c.Window)
	}
	if c.Threshold < 0 {
		return fmt.Errorf("flip threshold %d is negative", c.Threshold)
	}
	return nil
}

// maxKept bounds the timestamps kept per component, so that a component
// flapping thousands of times a second cannot grow memory without limit. Counts
// saturate there; any count that high is far past every sensible threshold.
const maxKept = 1024

// Tracker records status flips per component. It is safe for concurrent use:
// the cycle loop observes while the health endpoint asks.
type Tracker struct {
	mu        sync.Mutex
	window    time.Duration
	threshold int
	comps     map[string]*history
}

type history struct {
	up    bool
	flips []time.Time // oldest first
}

// New returns a Tracker. A window or threshold ≤ 0 takes the seed's default, so
// an unset config value means "as AppNet does".
func New(window time.Duration, threshold int) *Tracker {
	if window <= 0 {
		window = DefaultWindow
	}
	if threshold <= 0 {
		threshold = DefaultThreshold
	}
	return &Tracker{window: window, threshold: threshold, comps: map[string]*history{}}
}

// Window is the time a flip counts for.
func (t *Tracker) Window() time.Duration {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.window
}

// Threshold is the flip count within the window that makes a component
// unhealthy.
func (t *Tracker) Threshold() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.threshold
}

// Set changes the window and the threshold, as New takes them (a config
// reload). The flips recorded stay and are weighed by the new values: a
// shorter window stops counting the older ones.
func (t *Tracker) Set(window time.Duration, threshold int) {
	if window <= 0 {
		window = DefaultWindow
	}
	if threshold <= 0 {
		threshold = DefaultThreshold
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.window, t.threshold = window, threshold
}

// Observe reports the current status of a component. A status that differs from
// the previous one for the same component is a flip and is recorded at now; the
// first status seen for a component is not a flip, since nothing changed.
func (t *Tracker) Observe(component string, up bool, now time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	c, ok := t.comps[component]
	if !ok {
		t.comps[component] = &history{up: up}
		return
	}
	c.flips = t.prune(c.flips, now)
	if c.up == up {
		return
	}
	c.up = up
	if len(c.flips) == maxKept {
		c.flips = append(c.flips[:0], c.flips[1:]...)
	}
	c.flips = append(c.flips, now)
}

// Healthy reports whether every component has fewer flips within the window
// than the threshold. When one has not, reason names each such component with
// its count, in name order, like
// `relay flipped 10 times in 30m0s (threshold 10)`.
func (t *Tracker) Healthy(now time.Time) (bool, string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var bad []string
	for _, name := range t.names() {
		c := t.comps[name]
		c.flips = t.prune(c.flips, now)
		if n := len(c.flips); n >= t.threshold {
			bad = append(bad, fmt.Sprintf("%s flipped %d times in %v (threshold %d)", name, n, t.window, t.threshold))
		}
	}
	if len(bad) == 0 {
		return true, ""
	}
	return false, strings.Join(bad, "; ")
}

// Counts returns the flips within the window of every component observed so far,
// including those with none.
func (t *Tracker) Counts(now time.Time) map[string]int {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make(map[string]int, len(t.comps))
	for name, c := range t.comps {
		c.flips = t.prune(c.flips, now)
		out[name] = len(c.flips)
	}
	return out
}

// prune drops the flips older than the window. A flip exactly one window old
// still counts: the seed removes those "older than 30 minutes". Flips later than
// now (a clock that stepped back) are kept rather than guessed about.
func (t *Tracker) prune(flips []time.Time, now time.Time) []time.Time {
	cut := now.Add(-t.window)
	i := 0
	for i < len(flips) && flips[i].Before(cut) {
		i++
	}
	if i == 0 {
		return flips
	}
	return append(flips[:0], flips[i:]...)
}

func (t *Tracker) names() []string {
	names := make([]string, 0, len(t.comps))
	for name := range t.comps {
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}
