package supervisor

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/overload/oc"
	"github.com/sipvisor/sipvisor/pool"
)

// ocInterval is how often the RFC 7339 loss is recomputed from the
// refusals: short enough that feedback follows an overload within a
// second, long enough that a few hundred sessions a second give a
// measure.
const ocInterval = 250 * time.Millisecond

// ocRun is the server's side of RFC 7339: every ocInterval (ocQuiet while
// quiet) it weighs what
// admission refused of the new sessions offered since the last, and
// publishes the loss to send to the clients that offer oc: to its own
// doors (word) and to every worker's stats page (wire.OffOverloadControl),
// whose responses carry it. The supervisor computes it rather than each
// worker: admission is the supervisor's, and so are the counts of every
// door.
type ocRun struct {
	s    *Supervisor
	ctl  oc.Controller
	word atomic.Uint64 // wire.OCWord; 0 with oc_feedback off
	loss prometheus.Gauge
	// the counts at the last interval
	admitted, refused uint64
}

func newOCRun(s *Supervisor) *ocRun {
	o := &ocRun{s: s, loss: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sipvisor", Subsystem: "overload", Name: "oc_loss_ratio",
		Help: "Share of new sessions this server asks the clients that offer RFC 7339 overload control to shed (oc_feedback), from admission's refusals."})}
	s.reg.MustRegister(o.loss)
	return o
}

// ocQuiet is the interval while there is nothing to weigh: no new session
// offered in the last interval, no loss to decay, no suspension; or
// oc_feedback off. It falls on the cycle's whole seconds, so that an idle
// supervisor wakes once a second for both, not five times; the first
// sessions offered after it are weighed within a second, and every
// ocInterval from then on.
const ocQuiet = time.Second

func (o *ocRun) loop(ctx context.Context) error {
	t := newTicks(ocInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-t.C:
			every := ocInterval
			if o.tick(now) {
				every = ocQuiet
			}
			t.arm(every, true)
		}
	}
}

// tick weighs the interval that ended at now and publishes the loss; it
// reports whether the interval was quiet (ocQuiet).
func (o *ocRun) tick(now time.Time) (quiet bool) {
	var word uint64
	if o.s.config().OC.Feedback {
		admitted, refused := o.s.admissionCounts()
		smp := oc.Sample{Admitted: admitted - o.admitted, Refused: refused - o.refused,
			RefuseAll: o.s.ov.Suspended() || o.s.ov.Stopping()}
		if admitted < o.admitted || refused < o.refused {
			smp.Admitted, smp.Refused = 0, 0 // a counter restarted
		}
		o.admitted, o.refused = admitted, refused
		before := o.ctl.Feedback().Loss
		fb := o.ctl.Observe(smp, now)
		o.loss.Set(float64(fb.Loss) / 100)
		word = wire.OCWord(fb.Loss, o.s.config().OC.Validity, int64(fb.Seq.Sec)*1000+int64(fb.Seq.Frac/1000))
		quiet = ocSettled(smp, before, fb.Loss, o.s.config().OC.Validity)
	} else {
		quiet = true
		if o.word.Load() != 0 {
			o.ctl = oc.Controller{}
			o.loss.Set(0)
		}
	}
	o.word.Store(word)
	for _, gr := range o.s.groupRuns() {
		if gr.g.Kind() == pool.KindTimer {
			continue
		}
		for _, w := range gr.g.Workers() {
			w.Page().Store(wire.OffOverloadControl, word)
		}
	}
	return quiet
}

// ocSettled says whether the next interval may be ocQuiet: nothing
// offered and no loss left to decay; or a suspension whose loss of 100 %
// was already said, which nothing but its end changes, and whose oc-seq,
// renewed every ocQuiet, keeps the clients shedding as long as an
// oc-validity of at least ocQuiet holds it. A suspended server refusing a
// trickle would otherwise wake every ocInterval to say the same.
func ocSettled(smp oc.Sample, before, loss int, validity time.Duration) bool {
	if smp.RefuseAll {
		return before == 100 && loss == 100 && validity >= ocQuiet
	}
	return smp.Admitted+smp.Refused == 0 && loss == 0
}

// feedback is the feedback to stamp into a response now, for the doors.
func (o *ocRun) feedback() (oc.Feedback, bool) { return wire.OCFeedback(o.word.Load()) }

// admissionCounts sums the new sessions admission admitted and refused
// over every door, the workers' own doors and the TCP path: the refusals
// for load, not those at max_registrations, which no shedding cures.
func (s *Supervisor) admissionCounts() (admitted, refused uint64) {
	for _, gr := range s.groupRuns() {
		if gr.stream != nil {
			gr.stream.Collect()
		}
		if gr.door == nil {
			// The TCP group: what its workers decided by their gates
			// (Collect adds it) and what the supervisor decided when they
			// asked. A UDP group's workers that ask count the answers in
			// their own doors' words, added below.
			for r := overload.RefuseSuspended; r < overload.NumRefusals; r++ {
				if r != overload.RefuseRegistrations {
					refused += gr.refusedConn[r].Load()
				}
			}
			admitted += gr.admittedConn.Load()
			continue
		}
		st := &gr.door.Stats
		for k := range st.Admitted {
			admitted += st.Admitted[k].Load()
			if gr.steer != nil {
				admitted += gr.steer.Counter(wire.OffDoorAdmitted + 8*k)
			}
		}
		for r := overload.RefuseSuspended; r < overload.NumRefusals; r++ {
			if r == overload.RefuseRegistrations {
				continue
			}
			refused += st.Refused[r].Load()
			if gr.steer != nil {
				refused += gr.steer.Counter(wire.OffDoorRefused + 8*int(r))
			}
		}
	}
	return admitted, refused
}
