package supervisor

import (
	"context"
	"time"

	"github.com/sipvisor/sipvisor/overload/slowstart"
	"github.com/sipvisor/sipvisor/pool"
)

// startRamp puts a worker that became ready after start-up (forked by the
// scaler or replacing a crashed one) in slow start.
func (s *Supervisor) startRamp(gr *groupRun, w *pool.Worker) {
	c := s.slowStart()
	started, rate, err := gr.ramps.Start(w, c, len(gr.g.Routable()), time.Now())
	if err != nil {
		s.log.Warn("slow start not started", "group", gr.g.Name(), "worker", w.ID, "error", err)
		return
	}
	if started {
		s.log.Info("worker in slow start", "group", gr.g.Name(), "worker", w.ID, "pid", w.Pid, "mode", c.Mode, "rate", rate)
	}
}

// pick picks the worker for a message with no affinity, at now (unix ns):
// the least loaded, as slow start allows (overload.Ramps.Pick).
func (s *Supervisor) pick(gr *groupRun, newSession bool, now int64) *pool.Worker {
	return gr.ramps.Pick(gr.g.Pick(), gr.g.Routable, newSession, time.Unix(0, now))
}

// slowStartLoop ticks every ramp each slow_start_interval with what the
// group's workers received during it, and drops the ramps that ended.
func (s *Supervisor) slowStartLoop(ctx context.Context) error {
	// The interval is read afresh each time: ctl set may change it.
	interval := func() time.Duration {
		if d := s.slowStart().Interval; d > 0 {
			return d
		}
		return 10 * time.Second
	}
	t := time.NewTimer(interval())
	defer t.Stop()
	last := time.Now()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case now := <-t.C:
			t.Reset(interval())
			secs := now.Sub(last).Seconds()
			last = now
			for _, gr := range s.groupRuns() {
				ended := gr.ramps.Tick(now, secs, len(gr.g.Routable()), func(w *pool.Worker) bool { return w.State() == pool.Ready })
				for _, e := range ended {
					s.log.Info("worker out of slow start", "group", gr.g.Name(), "worker", e.W.ID, "reason", e.Reason)
				}
			}
		}
	}
}

// slowStart is the slow start setting in force: the config's, or what
// ctl set made of it since.
func (s *Supervisor) slowStart() slowstart.Config {
	if c := s.ssCfg.Load(); c != nil {
		return *c
	}
	return s.config().SlowStart
}

// setSlowStart validates c, makes it the setting for workers that start
// from now on, and applies it to the ramps running (a manual value of 0
// ends them).
func (s *Supervisor) setSlowStart(c slowstart.Config) error {
	if err := c.Validate(); err != nil {
		return err
	}
	s.ssCfg.Store(&c)
	now := time.Now()
	for _, gr := range s.groupRuns() {
		if err := gr.ramps.Reconfigure(c, now); err != nil {
			return err
		}
	}
	s.log.Info("slow start settings changed", "mode", c.Mode, "unit", c.Unit, "value", c.Value, "increment", c.Increment, "interval", c.Interval)
	return nil
}
