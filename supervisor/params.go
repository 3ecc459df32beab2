package supervisor

import (
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/ctl"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/overload/slowstart"
	"github.com/sipvisor/sipvisor/overload/watermark"
)

// registerParams makes the live settings readable and settable through
// `sipvisor ctl get|set PATH`. Every setter validates before it changes
// anything; a refused value changes nothing.
func (s *Supervisor) registerParams() {
	p, o := s.params, s.ov
	lim := o.Limits()
	for _, m := range watermark.Monitors() {
		kind := ctl.Percent
		if !m.IsPercent() {
			kind = ctl.Count
		}
		for _, side := range []string{"high", "low"} {
			p.Register("suspend_watermarks/"+string(m)+"/"+side,
				func() float64 {
					if side == "high" {
						return o.Marks()[m].High
					}
					return o.Marks()[m].Low
				},
				func(v float64) error {
					if err := o.SetMark(m, side, v); err != nil {
						return err
					}
					s.log.Info("watermark changed", "monitor", string(m), "side", side, "value", v)
					return nil
				}, kind)
		}
	}
	p.Register("suspend/enable",
		func() float64 { return b2f(o.AutoSuspend()) },
		func(v float64) error { o.SetAutoSuspend(v != 0); return nil }, ctl.Bool)

	count := func(path string, a *atomic.Int64) {
		p.Register(path, func() float64 { return float64(a.Load()) },
			func(v float64) error { a.Store(int64(v)); return nil }, ctl.Count)
	}
	count("limits/max_sessions", &lim.MaxSessions)
	count("limits/max_sessions_per_group", &lim.MaxPerGroup)
	count("limits/max_sessions_per_socket", &lim.MaxPerSocket)
	count("limits/max_calls", &lim.MaxByKind[sipscan.KindCall])
	count("limits/max_registrations", &lim.MaxByKind[sipscan.KindRegistration])
	count("limits/max_subscriptions", &lim.MaxByKind[sipscan.KindSubscription])
	p.Register("limits/queue_admission_threshold",
		func() float64 { return lim.QueueAdmission.Load() },
		func(v float64) error {
			if v > 90 {
				return fmt.Errorf("queue admission threshold %v%% is over 90%% (0 turns it off)", v)
			}
			lim.QueueAdmission.Store(v)
			return nil
		}, ctl.Percent)
	p.Register("limits/queue_delay_admission",
		func() float64 { return time.Duration(lim.QueueDelay.Load()).Seconds() },
		func(v float64) error {
			if v > 60 {
				return fmt.Errorf("queue delay admission %vs is over 60 s (0 turns it off)", v)
			}
			lim.QueueDelay.Store(int64(v * float64(time.Second)))
			return nil
		}, ctl.Seconds)
	// max_queue_wait is the groups' own: each worker reads it from its
	// stats page at every message.
	p.Register("limits/max_queue_wait",
		func() float64 {
			for _, gr := range s.groupRuns() {
				return gr.g.MaxQueueWait().Seconds()
			}
			return s.config().Limits.MaxQueueWait.Seconds()
		},
		func(v float64) error {
			if v > 60 {
				return fmt.Errorf("max queue wait %vs is over 60 s (0 removes the bound)", v)
			}
			for _, gr := range s.groupRuns() {
				gr.g.SetMaxQueueWait(time.Duration(v * float64(time.Second)))
			}
			return nil
		}, ctl.Seconds)

	// Intervals change with the file and a reload (their loops are reset
	// then); they are shown here so that a reload can be seen to apply.
	fixed := func(path, setting string, get func() time.Duration) {
		p.Register(path, func() float64 { return get().Seconds() },
			func(float64) error {
				return fmt.Errorf("%s changes with the config file: set %s there and reload", path, setting)
			}, ctl.Seconds)
	}
	fixed("auto_scaling/cycle", "auto_scaling_cycle", func() time.Duration { return s.config().AutoScalingCycle })
	fixed("throttle/echo_interval", "echo_interval", func() time.Duration { return s.config().Throttle.EchoInterval })

	// The throttle's settings apply to every group; a change starts each
	// group's throttle afresh.
	thr := func(path string, kind ctl.Kind, get func(c config.Throttle) float64, set func(c *config.Throttle, v float64) error) {
		p.Register(path,
			func() float64 { return get(s.throttleConfig()) },
			func(v float64) error {
				c := s.throttleConfig()
				if err := set(&c, v); err != nil {
					return err
				}
				s.setThrottle(c)
				return nil
			}, kind)
	}
	s.registerSlowStartParams()
	thr("throttle/enable", ctl.Bool,
		func(c config.Throttle) float64 { return b2f(c.Enable) },
		func(c *config.Throttle, v float64) error { c.Enable = v != 0; return nil })
	thr("throttle/rtt_threshold", ctl.Seconds,
		func(c config.Throttle) float64 { return c.RTTThreshold.Seconds() },
		func(c *config.Throttle, v float64) error {
			if v <= 0 {
				return errors.New("rtt threshold must be above 0")
			}
			c.RTTThreshold = time.Duration(v * float64(time.Second))
			return nil
		})
	thr("throttle/count", ctl.Count,
		func(c config.Throttle) float64 { return float64(c.Count) },
		func(c *config.Throttle, v float64) error {
			if v < 1 {
				return errors.New("count must be at least 1")
			}
			c.Count = int(v)
			return nil
		})
	thr("throttle/step", ctl.Percent,
		func(c config.Throttle) float64 { return c.StepPercent },
		func(c *config.Throttle, v float64) error {
			if v <= 0 {
				return errors.New("step must be above 0%")
			}
			c.StepPercent = v
			return nil
		})
}

func (s *Supervisor) registerSlowStartParams() {
	ss := func(path string, kind ctl.Kind, get func(c slowstart.Config) float64, set func(c *slowstart.Config, v float64)) {
		s.params.Register(path,
			func() float64 { return get(s.slowStart()) },
			func(v float64) error {
				c := s.slowStart()
				set(&c, v)
				return s.setSlowStart(c)
			}, kind)
	}
	ss("slow_start/value", ctl.Number,
		func(c slowstart.Config) float64 { return c.Value },
		func(c *slowstart.Config, v float64) { c.Value = v })
	ss("slow_start/increment", ctl.Number,
		func(c slowstart.Config) float64 { return c.Increment },
		func(c *slowstart.Config, v float64) { c.Increment = v })
	ss("slow_start/interval", ctl.Seconds,
		func(c slowstart.Config) float64 { return c.Interval.Seconds() },
		func(c *slowstart.Config, v float64) { c.Interval = time.Duration(v * float64(time.Second)) })
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
