package supervisor

import (
	"context"
	"slices"
	"time"

	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/script"
)

// timerLoop runs each timer_route[name, seconds] every interval on the
// timer group: it hands the job to the least loaded timer worker, so jobs
// that pile up show as that group's load and queue, and can scale it. A job
// no worker can take is counted, never run late in a burst. A reload that
// adds, removes or reschedules timer_route blocks takes effect at once; a
// job whose name and interval stay keeps its place in time.
func (s *Supervisor) timerLoop(ctx context.Context) error {
	if s.timer == nil {
		<-ctx.Done()
		return ctx.Err()
	}
	type due struct {
		name  string
		frame []byte
		every time.Duration
		next  time.Time
	}
	var jobs []*due
	plan := func(now time.Time) {
		old := jobs
		jobs = nil
		cfg := s.config()
		if cfg.Script == nil {
			return
		}
		timers := cfg.Script.Timers
		if every := cfg.NAT.KeepaliveInterval; every > 0 {
			// The NAT keep-alives are one more job, on the same terms.
			timers = append(slices.Clip(timers), script.Timer{Name: wire.JobNATKeepalive, Interval: every})
		}
		for _, t := range timers {
			j := &due{name: t.Name, frame: append([]byte{wire.FrameJob}, t.Name...), every: t.Interval, next: now.Add(t.Interval)}
			for _, o := range old {
				if o.name == j.name && o.every == j.every {
					j.next = o.next
				}
			}
			jobs = append(jobs, j)
		}
	}
	// Sleep until the earliest job is due rather than polling: an idle
	// supervisor should not wake a hundred times a second.
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	arm := func() {
		if len(jobs) == 0 {
			timer.Stop()
			return
		}
		timer.Reset(max(time.Millisecond, time.Until(earliest(jobs, func(j *due) time.Time { return j.next }))))
	}
	plan(time.Now())
	arm()
	s.timerPlans.Add(1)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-s.timersChanged:
			plan(time.Now())
			arm()
			s.timerPlans.Add(1)
		case now := <-timer.C:
			for _, j := range jobs {
				if now.Before(j.next) {
					continue
				}
				// Steady: the next run is due one interval after this one
				// was due, not after it ran.
				for !now.Before(j.next) {
					j.next = j.next.Add(j.every)
				}
				w := s.timer.g.Pick()
				if w == nil || w.Send(j.frame) != nil {
					s.m.timerJobs.WithLabelValues("skipped").Inc()
					continue
				}
				s.m.timerJobs.WithLabelValues("sent").Inc()
			}
			arm()
		}
	}
}

func earliest[T any](xs []T, at func(T) time.Time) time.Time {
	var t time.Time
	for i, x := range xs {
		if a := at(x); i == 0 || a.Before(t) {
			t = a
		}
	}
	return t
}
