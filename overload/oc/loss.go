package oc

import "time"

// Sample is what a server's admission did with the new sessions offered to
// it over one interval: admitted and refused (for its load: not a
// registration refused at max_registrations, which no shedding upstream
// would cure), and whether it refuses every one now (suspended, stopping).
type Sample struct {
	Admitted, Refused uint64
	RefuseAll         bool
}

// Controller is a server's loss: the share of new sessions it asks the
// clients that support overload control to shed. It follows the server's
// own refusals, the measure of its overload that sipvisor already acts on:
// a share r of what arrived refused while clients shed L means that of the
// load they would offer unshed, 1-(1-L)(1-r) is more than the server
// takes, and L moves a quarter of the way there each interval: admission
// refuses in bursts (queue delay over its bound refuses all until the
// queue drains), and a larger move overshot into idle time at the
// server (bench/oc.sh: halfway served 0.85 of capacity, a quarter 0.91);
// an interval without refusals
// lowers L by Step, so that a server that recovered gets its load back
// within a few seconds, and one that did not refuses a little and says so
// again. While the server refuses everything, L is 100.
//
// The zero Controller asks for no shedding; it is not safe for concurrent
// use.
type Controller struct {
	// Step is how much an interval without refusals lowers the loss, a
	// share (0.05 = 5 points); 0 means DefaultStep.
	Step float64

	loss float64 // 0..1
	seq  Seq
}

// DefaultStep lowers the loss by 5 points an interval without refusals.
const DefaultStep = 0.05

// minSample is the fewest new sessions in an interval whose refused share
// is read as the server's: fewer (a quiet interval, or clients shedding
// almost all) count as no refusal unless every one was refused.
const minSample = 5

// Observe takes one interval's sample, taken at now, and returns the
// feedback to send until the next (Validity left to the caller).
func (c *Controller) Observe(s Sample, now time.Time) Feedback {
	step := c.Step
	if step <= 0 {
		step = DefaultStep
	}
	offered := s.Admitted + s.Refused
	switch {
	case s.RefuseAll:
		c.loss = 1
	case s.Refused > 0 && (offered >= minSample || s.Admitted == 0):
		r := float64(s.Refused) / float64(offered)
		target := 1 - (1-c.loss)*(1-r)
		c.loss += (target - c.loss) / 4
	default:
		c.loss = max(c.loss-step, 0)
	}
	// A new oc-seq with every interval, even for the same value: a client
	// takes only a newer one, and holds it oc-validity from then, so the
	// feedback in force lasts as long as the server keeps saying it.
	seq := SeqAt(now)
	if !seq.After(c.seq) {
		seq = c.seq.Next()
	}
	c.seq = seq
	return c.Feedback()
}

// Feedback is the loss in force, in whole percent, with its oc-seq.
func (c *Controller) Feedback() Feedback {
	return Feedback{Loss: int(c.loss*100 + 0.5), Seq: c.seq}
}

// State is a client's view of one server's feedback: the loss it sheds
// and until when. The zero State sheds nothing.
type State struct {
	Loss  int
	Until time.Time
	Seq   Seq
	Has   bool // some feedback was taken: Seq orders the next
}

// Take applies feedback received at now, and reports whether it was taken:
// only one with an oc-seq newer than the last taken is; oc-validity 0 ends
// the shedding at once.
func (s *State) Take(fb Feedback, now time.Time) bool {
	if s.Has && !fb.Seq.After(s.Seq) {
		return false
	}
	s.Has, s.Seq = true, fb.Seq
	if fb.Validity <= 0 || fb.Loss <= 0 {
		s.Loss, s.Until = 0, time.Time{}
		return true
	}
	s.Loss, s.Until = min(fb.Loss, 100), now.Add(fb.Validity)
	return true
}

// Share is the loss in force at now, percent: 0 once the feedback expired.
func (s *State) Share(now time.Time) int {
	if s.Loss <= 0 || !now.Before(s.Until) {
		return 0
	}
	return s.Loss
}

// Shed decides about one request to a server whose loss in force is loss
// percent: a new session is shed with that probability, by draw (uniform
// in [0, 1)); a request within a dialog never is.
func Shed(loss int, inDialog bool, draw func() float64) bool {
	switch {
	case inDialog || loss <= 0:
		return false
	case loss >= 100:
		return true
	}
	return draw()*100 < float64(loss)
}
