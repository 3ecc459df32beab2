package supervisor

import (
	"context"
	"time"

	"github.com/sipvisor/sipvisor/pool"
)

// timerLoop runs each timer_route[name, seconds] every interval on the
// timer group: it hands the job to the least loaded timer worker, so jobs
// that pile up show as that group's load and queue, and can scale it. A job
// no worker can take is counted, never run late in a burst.
func (s *Supervisor) timerLoop(ctx context.Context) error {
	cfg := s.config()
	if s.timer == nil || cfg.Script == nil || len(cfg.Script.Timers) == 0 {
		<-ctx.Done()
		return ctx.Err()
	}
	type due struct {
		frame []byte
		every time.Duration
		next  time.Time
	}
	now := time.Now()
	jobs := make([]*due, 0, len(cfg.Script.Timers))
	for _, t := range cfg.Script.Timers {
		jobs = append(jobs, &due{frame: append([]byte{pool.FrameJob}, t.Name...), every: t.Interval, next: now.Add(t.Interval)})
	}
	// Sleep until the earliest job is due rather than polling: an idle
	// supervisor should not wake a hundred times a second.
	timer := time.NewTimer(time.Until(earliest(jobs, func(j *due) time.Time { return j.next })))
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
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
			timer.Reset(max(time.Millisecond, time.Until(earliest(jobs, func(j *due) time.Time { return j.next }))))
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
