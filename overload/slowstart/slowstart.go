// Package slowstart ramps up the share of new sessions a newly started or
// restarted worker receives, after Citrix ADC's virtual-server slow start
// (Citrix ADC slow start).
//
// A group's established workers take new sessions as usual; a worker in slow
// start takes them only while its Ramp allows, and the front door hands what it
// refuses to the others. Nothing is rejected because of slow start.
//
// Modes, as in the seed:
//
//   - Manual: the worker's load is held at Value (sessions per second, or percent
//     of an established worker's load) until the setting changes; setting it to
//     0 ends the ramp and the worker takes its full share.
//   - Auto: the load starts at Value and grows by Increment every Interval until
//     the worker has an equal share. The seed has a single "new service request
//     rate" that is both the start and the step; Value = Increment reproduces
//     it, and Value = 0 means "start at one Increment".
//
// An automatic ramp ends, checked at each interval in this order, when:
//
//   - the group has no established worker left to compare with (full share);
//   - the worker received no new session for 3 intervals in a row (no traffic);
//   - it received fewer sessions than one step allowed over the interval, so
//     demand, not the ramp, was the limit (below step);
//   - its load was at least an established worker's, 100 % or more (full share);
//   - it has been incremented 200 times (max increments).
//
// An interval in which the worker got no session at all counts towards the
// 3-interval rule and not as "below step"; otherwise the first idle interval
// would always end the ramp and the seed's 3-interval rule could never apply.
//
// Reading of the seed's Table 4: its column "10 s" is the interval that ends at
// 10 s, so the worker takes 4/s during its first 10 s ("4 requests per second for
// the first 10 seconds", as the text says), 20/s during the fifth interval, and
// leaves slow start at the 50 s tick ("50 seconds after it is added"). The
// percent example (25 % every 5 s) likewise leaves at 20 s.
//
// Nothing here reads the clock: the front door passes now to Allow and the
// supervisor's loop passes now and the interval's counts to Tick.
//
// Invariant: slow start only moves new sessions between workers, it never
// refuses one; the ramps of a group's workers, and the pick they shape,
// live in package overload.
package slowstart

import (
	"fmt"
	"math"
	"time"
)

// Mode selects how the load of a new worker grows.
type Mode string

// Modes, spelled as slow_start_mode takes them.
const (
	Off    Mode = "off"
	Manual Mode = "manual"
	Auto   Mode = "auto"
)

// Unit is what Value and Increment count.
type Unit string

// Units, spelled as slow_start_unit takes them.
const (
	// PerSecond counts new sessions per second.
	PerSecond Unit = "per_second"
	// Percent is a share of the load an established worker of the group bears:
	// 100 is an equal share.
	Percent Unit = "percent"
)

// Exit conditions of the seed.
const (
	// MaxIncrements is how many times an automatic ramp grows before it ends.
	MaxIncrements = 200
	// IdleIntervals is how many intervals in a row without a new session end an
	// automatic ramp.
	IdleIntervals = 3
)

// minPercentRate is the per-second limit of a percent ramp while its group's
// established workers carried no load: a trickle, so traffic that starts again
// reaches the worker (and the ramp sees it) without flooding a cold process.
const minPercentRate = 1.0

// Config is the slow start setting of a group.
type Config struct {
	// Mode: slow_start_mode = off | manual | auto. Empty means off.
	Mode Mode `json:"mode"`
	// Unit: slow_start_unit = per_second | percent. Empty means per_second.
	Unit Unit `json:"unit"`
	// Value: slow_start_value. Manual: the load held until changed, 0 ends slow
	// start. Auto: the load of the first interval, 0 meaning one Increment.
	Value float64 `json:"value"`
	// Interval: slow_start_interval, the time between increments in auto mode.
	Interval time.Duration `json:"interval"`
	// Increment: slow_start_increment, added every Interval in auto mode.
	Increment float64 `json:"increment"`
}

// FieldError is a problem with one field of a Config: Field is "mode",
// "unit", "value", "increment" or "interval", as the settings' names end.
type FieldError struct {
	Field string
	Err   error
}

func (e *FieldError) Error() string { return e.Err.Error() }

func (e *FieldError) Unwrap() error { return e.Err }

func fieldErr(field, format string, args ...any) error {
	return &FieldError{Field: field, Err: fmt.Errorf(format, args...)}
}

// Validate reports the first problem with c, with the reason, so that a value
// set at run time can be refused as clearly as one in the config file. The
// error is a *FieldError naming the field at fault.
func (c Config) Validate() error {
	switch c.Mode {
	case "", Off, Manual, Auto:
	default:
		return fieldErr("mode", "unknown slow start mode %q (want off, manual or auto)", c.Mode)
	}
	switch c.Unit {
	case "", PerSecond, Percent:
	default:
		return fieldErr("unit", "unknown slow start unit %q (want per_second or percent)", c.Unit)
	}
	for _, f := range []struct {
		name string
		v    float64
	}{{"value", c.Value}, {"increment", c.Increment}} {
		switch {
		case math.IsNaN(f.v) || math.IsInf(f.v, 0):
			return fieldErr(f.name, "slow start %s %v is not a number", f.name, f.v)
		case f.v < 0:
			return fieldErr(f.name, "slow start %s %v is negative", f.name, f.v)
		case c.Unit == Percent && f.v > 100:
			return fieldErr(f.name, "slow start %s %v%% is above 100%% (an equal share)", f.name, f.v)
		}
	}
	if c.Interval < 0 {
		return fieldErr("interval", "slow start interval %v is negative", c.Interval)
	}
	if c.Mode == Auto {
		if c.Increment == 0 {
			return fieldErr("increment", "auto slow start needs an increment above 0")
		}
		if c.Interval == 0 {
			return fieldErr("interval", "auto slow start needs an interval above 0 (use manual mode for a fixed load)")
		}
	}
	return nil
}

func (c Config) unit() Unit {
	if c.Unit == "" {
		return PerSecond
	}
	return c.Unit
}

// ends reports whether the setting means "no slow start".
func (c Config) ends() bool {
	return c.Mode == "" || c.Mode == Off || (c.Mode == Manual && c.Value == 0)
}

// Reason says why a ramp ended; it is a bounded metric label.
type Reason string

// Reasons a ramp ends.
const (
	// ReasonOff: slow start is off, or the manual value was set to 0.
	ReasonOff Reason = "off"
	// ReasonNoTraffic: no new session for IdleIntervals intervals in a row.
	ReasonNoTraffic Reason = "no_traffic"
	// ReasonBelowStep: fewer sessions arrived than one step allowed.
	ReasonBelowStep Reason = "below_step"
	// ReasonFullShare: the worker's share reached 100 % of an established one's.
	ReasonFullShare Reason = "full_share"
	// ReasonMaxIncrements: the load grew MaxIncrements times.
	ReasonMaxIncrements Reason = "max_increments"
)

// Sample is what the group's new workers and established workers received
// since the previous Tick.
type Sample struct {
	// Own is the number of new sessions handed to this worker.
	Own uint64
	// Peers is the number of new sessions handed to the group's established
	// workers (those not in slow start) together.
	Peers uint64
	// PeerWorkers is how many established workers shared Peers.
	PeerWorkers int
}

// Ramp is the slow start of one worker. It is not safe for concurrent use: the
// front door owns it and hands the supervisor's samples to Tick.
type Ramp struct {
	cfg Config
	// level is the load in cfg's unit: sessions per second or percent.
	level float64
	// rate is level in sessions per second, the limit Allow enforces; stepRate
	// is one Increment (manual: Value) in sessions per second at the same time.
	rate, stepRate float64
	// peerRate is the latest per-second load of one established worker.
	peerRate float64

	increments int
	idle       int
	lastTick   time.Time
	exit       Reason

	// Allow's budget: since the limit took effect at since, the worker may have
	// taken floor(rate × elapsed) + 1 sessions; handed is how many it took.
	since  time.Time
	handed int64
}

// New starts the slow start of a worker at now. peerRate is the recent load of
// one established worker of the group in new sessions per second; a percent
// ramp needs it to turn its first level into a rate.
func New(c Config, now time.Time, peerRate float64) (*Ramp, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if math.IsNaN(peerRate) || peerRate < 0 {
		peerRate = 0
	}
	r := &Ramp{cfg: c, lastTick: now, peerRate: peerRate}
	if c.ends() {
		r.exit = ReasonOff
		return r, nil
	}
	r.level = c.Value
	if c.Mode == Auto && r.level == 0 {
		r.level = c.Increment
	}
	r.setRate(now)
	return r, nil
}

// Allow reports whether the worker may take a new session now, and counts it
// when it may: call it only when the front door would otherwise hand the session
// to this worker, and hand it when it returns true. After the ramp ends it
// always returns true. Credit does not pile up while no session comes, so
// after a quiet spell the worker takes one session at once, then the rate.
func (r *Ramp) Allow(now time.Time) bool {
	if r.exit != "" {
		return true
	}
	elapsed := now.Sub(r.since)
	if elapsed < 0 {
		elapsed = 0
	}
	f := r.rate * elapsed.Seconds()
	if f >= 1<<62 {
		// A limit no front door can reach; converting it would overflow.
		return true
	}
	budget := int64(f) + 1
	if r.handed < budget-1 {
		r.handed = budget - 1
	}
	if r.handed >= budget {
		return false
	}
	r.handed++
	return true
}

// Tick closes an interval at now with what the group received during it. In
// auto mode call it every Interval: it checks the exit conditions and grows the
// load. In manual mode it only refreshes a percent limit with the peers' load,
// at whatever cadence the caller samples.
func (r *Ramp) Tick(now time.Time, s Sample) {
	if r.exit != "" {
		return
	}
	secs := now.Sub(r.lastTick).Seconds()
	if secs <= 0 {
		// A repeated or backward tick measured nothing.
		return
	}
	r.lastTick = now
	stepRate, rate := r.stepRate, r.rate
	if s.PeerWorkers > 0 {
		r.peerRate = float64(s.Peers) / float64(s.PeerWorkers) / secs
	}
	if r.cfg.Mode == Manual {
		if r.cfg.unit() == Percent {
			r.setRate(now)
		}
		return
	}

	if s.PeerWorkers == 0 {
		r.exit = ReasonFullShare
		return
	}
	if s.Own == 0 {
		r.idle++
		if r.idle >= IdleIntervals {
			r.exit = ReasonNoTraffic
		}
		return
	}
	r.idle = 0
	if float64(s.Own) < math.Floor(stepRate*secs) {
		r.exit = ReasonBelowStep
		return
	}
	share := r.level / 100
	if r.cfg.unit() == PerSecond {
		share = math.Inf(1)
		if r.peerRate > 0 {
			share = rate / r.peerRate
		}
	}
	if share >= 1 {
		r.exit = ReasonFullShare
		return
	}
	if r.increments >= MaxIncrements {
		r.exit = ReasonMaxIncrements
		return
	}
	r.increments++
	// The seed: when a full step would give the worker more than the others,
	// the last increment is smaller.
	ceil := r.peerRate
	if r.cfg.unit() == Percent {
		ceil = 100
	}
	r.level = math.Min(r.level+r.cfg.Increment, ceil)
	r.setRate(now)
}

// Reconfigure applies a changed setting to a running ramp, as the seed's manual
// mode requires: a new manual value takes effect at once, 0 (or mode off) ends
// the ramp. An automatic ramp keeps its level and grows by the new increment
// from the next interval. A ramp that has ended stays ended.
func (r *Ramp) Reconfigure(c Config, now time.Time) error {
	if err := c.Validate(); err != nil {
		return err
	}
	if r.exit != "" {
		return nil
	}
	old := r.cfg
	r.cfg = c
	switch {
	case c.ends():
		r.exit = ReasonOff
		return nil
	case c.Mode == Manual:
		r.level = c.Value
	case old.unit() != c.unit():
		// A level in the old unit means nothing in the new one: start over.
		r.level = c.Value
		if r.level == 0 {
			r.level = c.Increment
		}
	}
	r.setRate(now)
	return nil
}

// setRate turns the level into the per-second limit and restarts the budget.
func (r *Ramp) setRate(now time.Time) {
	step := r.cfg.Increment
	if r.cfg.Mode == Manual {
		step = r.cfg.Value
	}
	if r.cfg.unit() == Percent {
		r.rate = math.Max(r.level/100*r.peerRate, minPercentRate)
		r.stepRate = step / 100 * r.peerRate
	} else {
		r.rate, r.stepRate = r.level, step
	}
	r.since, r.handed = now, 0
}

// Done reports whether the ramp has ended and the worker takes its full share.
func (r *Ramp) Done() bool { return r.exit != "" }

// Reason says why the ramp ended, "" while it runs.
func (r *Ramp) Reason() Reason { return r.exit }

// Level is the current load in the configured unit.
func (r *Ramp) Level() float64 { return r.level }

// Rate is the current limit in new sessions per second; +Inf once the ramp
// has ended.
func (r *Ramp) Rate() float64 {
	if r.exit != "" {
		return math.Inf(1)
	}
	return r.rate
}

// Increments is how many times the load has grown.
func (r *Ramp) Increments() int { return r.increments }
