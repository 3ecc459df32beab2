// Package throttle is the round-trip load throttle of Junos's resource monitor
// (Junos resource monitor, "Limitación de carga para reducir los retrasos en el
// procesamiento"), applied to a sipvisor worker. The supervisor sends the
// worker an echo every second, queued behind its real work and answered at
// once, and passes each round trip to Observe. When the round trip is over
// the threshold (default 1 s) for Count (3) readings in a row, a share of new
// sessions is refused; each further Count in a row over adds Step (10 %).
// Count in a row at or under the threshold remove the throttle altogether.
// The seed's Table 1 is this package's test.
//
// Junos derives the exact share from the threshold and the round trip with an
// internal algorithm it does not publish; the fixed step is its documented,
// simplified example, which we follow.
//
// Nothing here does I/O or reads the clock. An echo not yet answered once the
// threshold has passed should be observed as its age, so a stuck worker counts
// as over rather than as silent.
//
// Invariant: the refused share only moves by whole steps after Count
// readings in a row, and Admit refuses exactly that share of any run of
// sessions; each group's throttle in force lives in package overload.
package throttle

import (
	"errors"
	"fmt"
	"math"
	"sync/atomic"
	"time"
)

// Defaults are the seed's.
const (
	DefaultThreshold = time.Second
	DefaultCount     = 3
	DefaultStep      = 0.10
)

// Config sets up a Throttle. Zero Threshold, Count and Step take the defaults.
type Config struct {
	// Threshold is the round trip a reading must exceed to count as over.
	Threshold time.Duration
	// Count is how many readings in a row make a step up, or lift the throttle.
	Count int
	// Step is the share of new sessions, 0..1, refused per step.
	Step float64
	// Enabled turns throttling on; Junos's no-load-throttle turns it off.
	Enabled bool
}

// DefaultConfig is the seed's: enabled, 1 s, 3 in a row, 10 % a step.
func DefaultConfig() Config {
	return Config{Threshold: DefaultThreshold, Count: DefaultCount, Step: DefaultStep, Enabled: true}
}

// Validate reports values New would replace by a default, so a config file
// holding them can be refused with a reason.
func (c Config) Validate() error {
	var errs []error
	if c.Threshold < 0 {
		errs = append(errs, fmt.Errorf("throttle threshold %v: must be positive", c.Threshold))
	}
	if c.Count < 0 {
		errs = append(errs, fmt.Errorf("throttle count %d: must be at least 1", c.Count))
	}
	if math.IsNaN(c.Step) || c.Step < 0 || c.Step > 1 {
		errs = append(errs, fmt.Errorf("throttle step %v: must be within 0..1 (a share, not a percentage)", c.Step))
	}
	return errors.Join(errs...)
}

func (c Config) withDefaults() Config {
	if c.Threshold <= 0 {
		c.Threshold = DefaultThreshold
	}
	if c.Count <= 0 {
		c.Count = DefaultCount
	}
	if math.IsNaN(c.Step) || c.Step <= 0 || c.Step > 1 {
		c.Step = DefaultStep
	}
	return c
}

// million is the resolution of the refused share; it keeps Admit exact and in
// integers, and 10 % steps land on whole numbers of it.
const million = 1_000_000

// Throttle follows one worker's echo round trips. Observe is called from one
// goroutine (the echo monitor); Share and Admit may be called from any, such
// as the front door picking a worker for a new session.
type Throttle struct {
	cfg   Config
	over  int // readings over the threshold in a row, since the last step
	under int // readings not over, in a row, while throttled
	steps int
	ppm   atomic.Uint32 // refused share in millionths
}

// New returns a Throttle admitting everything.
func New(c Config) *Throttle {
	return &Throttle{cfg: c.withDefaults()}
}

// Config returns the configuration in use, defaults filled in.
func (t *Throttle) Config() Config { return t.cfg }

// Observe takes one echo round trip and returns the share of new sessions now
// refused, and whether this reading changed it.
func (t *Throttle) Observe(rtt time.Duration) (share float64, changed bool) {
	if !t.cfg.Enabled {
		return 0, false
	}
	before := t.ppm.Load()
	if rtt > t.cfg.Threshold {
		t.under = 0
		t.over++
		if t.over == t.cfg.Count {
			t.over = 0
			if before < million {
				t.steps++
			}
		}
	} else {
		t.over = 0
		if t.steps > 0 {
			t.under++
			if t.under == t.cfg.Count {
				t.under, t.steps = 0, 0
			}
		}
	}
	now := uint32(min(math.Round(float64(t.steps)*t.cfg.Step*million), million))
	t.ppm.Store(now)
	return float64(now) / million, now != before
}

// Share is the share of new sessions refused, 0..1.
func (t *Throttle) Share() float64 {
	return float64(t.ppm.Load()) / million
}

// Admit tells whether the n-th new session (numbered by the caller, one after
// another) may start. It refuses exactly Share of any run of sessions and
// spreads the refusals evenly: at 10 % it refuses n = 9, 19, 29, …; at 25 %,
// n = 3, 7, 11, …. There is no randomness, so a test or an operator can tell
// in advance which sessions get a 503.
func (t *Throttle) Admit(n uint64) bool {
	p := uint64(t.ppm.Load())
	if p == 0 {
		return true
	}
	// The pattern repeats every million sessions; working within one period
	// keeps the products far from overflowing.
	m := n % million
	return (m+1)*p/million == m*p/million
}
