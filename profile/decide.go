package profile

// Cycles, not wall time, are Decide's clock. OpenSIPS counts cycles: the
// profile's windows ("for 4 cycles within 5") and its no-termination delay
// are numbers of samples. A tick that comes late on a loaded machine, or a
// stopped supervisor that resumes, moves the wall clock but not the number of
// samples, so a window always holds the samples it speaks of and a cooldown
// can never be skipped by a clock jump. Tests step integers.

// Action is what a group should do this cycle.
type Action int

// The three decisions; at most one worker is forked or drained per cycle.
const (
	Hold Action = iota
	Up
	Down
)

// String gives the metric label value (decision="up").
func (a Action) String() string {
	switch a {
	case Hold:
		return "hold"
	case Up:
		return "up"
	case Down:
		return "down"
	}
	return "unknown"
}

// Reasons are constants so that Decide does not allocate and so that they can
// label a metric without growing its cardinality.
const (
	ReasonLoadHigh      = "load over up threshold"
	ReasonLoadLow       = "load under down threshold"
	ReasonAtUpTo        = "at scale-up limit"
	ReasonAtDownTo      = "at scale-down limit"
	ReasonAboveUpTo     = "more workers than scale-up limit"
	ReasonBelowFloor    = "fewer workers than scale-down limit"
	ReasonCooldown      = "no drain so soon after startup or a fork"
	ReasonDrainOverload = "drain would push load over up threshold"
	ReasonFewSamples    = "too few samples"
	ReasonSteady        = "load within thresholds"
)

// State is what Decide needs to know about a group.
type State struct {
	// Workers is the number of workers taking new work (draining ones excluded).
	Workers int
	// History holds the group load per cycle, 0..100, newest last. A failed
	// sample must be left out, not recorded as 0.
	History []float64
	// Cycle is the current cycle number.
	Cycle int64
	// LastFork is the cycle of the last fork, or the startup cycle.
	LastFork int64
}

// Decision is Decide's answer.
type Decision struct {
	Action Action
	// Reason is one of the Reason constants.
	Reason string
	// EstimatedLoad is the group load expected once the action has taken
	// effect: the recent mean scaled by workers/(workers±1) for Up and Down,
	// the mean of the last Window samples for Hold (0 with no samples).
	EstimatedLoad float64
}

// Decide reports what a group should do this cycle, following OpenSIPS 3.x
// auto-scaling:
//
//   - Up when at least UpCycles of the last Window samples are strictly above
//     UpLoad and Workers < UpTo. When the up condition holds at UpTo the group
//     holds: the down branch is not considered (OpenSIPS's else-if).
//   - Down when each of the last DownCycles samples is strictly below
//     DownLoad, Workers > DownTo, the profile scales down, at least
//     CooldownCycles cycles have passed since LastFork, and the load expected
//     on one worker fewer (mean of the last DownCycles × w/(w−1)) is strictly
//     below UpLoad, so a drain never causes the next fork.
//   - Hold otherwise, and whenever the history is shorter than the window
//     being checked.
//
// Two guards come first, for a group resized by a reload: more workers than
// UpTo drains one, fewer than max(DownTo, 1) forks one.
//
// After the caller carries out Up or Down it should rescale the history (see
// Rescale), so the next cycle reads old samples as if measured on the new
// group size. Decide does no I/O and does not allocate.
func Decide(p Profile, s State) Decision {
	h := s.History
	window := max(p.Window, p.UpCycles)
	recent := mean(last(h, window))

	if p.UpTo > 0 && s.Workers > p.UpTo {
		return Decision{Down, ReasonAboveUpTo, scaled(recent, s.Workers, s.Workers-1)}
	}
	floor := 1
	if p.ScalesDown() {
		floor = max(p.DownTo, 1)
	}
	if s.Workers < floor && s.Workers < p.UpTo {
		return Decision{Up, ReasonBelowFloor, scaled(recent, s.Workers, s.Workers+1)}
	}

	if p.UpCycles > 0 && len(h) >= window {
		over := 0
		for _, v := range last(h, window) {
			if v > float64(p.UpLoad) {
				over++
			}
		}
		if over >= p.UpCycles {
			if s.Workers < p.UpTo {
				return Decision{Up, ReasonLoadHigh, scaled(recent, s.Workers, s.Workers+1)}
			}
			return Decision{Hold, ReasonAtUpTo, recent}
		}
	}

	hold := Decision{Hold, ReasonSteady, recent}
	if len(h) < window {
		hold.Reason = ReasonFewSamples
	}
	if !p.ScalesDown() {
		return hold
	}
	low := last(h, p.DownCycles)
	for _, v := range low {
		if !(v < float64(p.DownLoad)) {
			return hold
		}
	}
	if len(low) < p.DownCycles {
		hold.Reason = ReasonFewSamples
		return hold
	}
	if s.Workers <= p.DownTo {
		hold.Reason = ReasonAtDownTo
		return hold
	}
	if s.Cycle-s.LastFork < int64(p.CooldownCycles()) {
		hold.Reason = ReasonCooldown
		return hold
	}
	est := scaled(mean(low), s.Workers, s.Workers-1)
	if !(est < float64(p.UpLoad)) {
		return Decision{Hold, ReasonDrainOverload, est}
	}
	return Decision{Down, ReasonLoadLow, est}
}

// Rescale rewrites, in place, a history measured on from workers as the load
// the same traffic puts on to workers (each sample × from/to), and returns it.
//
// OpenSIPS rescales only after a fork, so that the samples that caused the
// fork do not cause another one. We rescale after a drain as well: otherwise
// the next cycle's pre-evaluation multiplies samples taken on w+1 workers by
// only w/(w−1), underestimates, and can drain a worker whose loss then forces
// a fork straight back (TestTimelineDrainDoesNotFlipFlop). A nonpositive size
// leaves history alone.
func Rescale(history []float64, from, to int) []float64 {
	if from <= 0 || to <= 0 || from == to {
		return history
	}
	f := float64(from) / float64(to)
	for i := range history {
		history[i] *= f
	}
	return history
}

func last(h []float64, n int) []float64 {
	if n < 0 {
		n = 0
	}
	if len(h) > n {
		return h[len(h)-n:]
	}
	return h
}

func mean(h []float64) float64 {
	if len(h) == 0 {
		return 0
	}
	var sum float64
	for _, v := range h {
		sum += v
	}
	return sum / float64(len(h))
}

// scaled spreads load measured on from workers over to workers; with no
// workers on either side there is nothing to spread.
func scaled(load float64, from, to int) float64 {
	if from <= 0 || to <= 0 {
		return load
	}
	return load * float64(from) / float64(to)
}
