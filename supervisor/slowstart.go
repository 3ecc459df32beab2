package supervisor

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/overload/slowstart"
	"github.com/sipvisor/sipvisor/pool"
)

// ramp is one worker's slow start (Citrix ADC slow start). The door's goroutine asks
// Allow while the supervisor's loop ticks it, so a mutex guards it.
type ramp struct {
	w   *pool.Worker
	mu  sync.Mutex
	r   *slowstart.Ramp
	own atomic.Uint64 // new sessions handed to w since the last tick
}

// slowStartMetrics are the ramps' metrics.
type slowStartMetrics struct {
	ramping *prometheus.GaugeVec
	rate    *prometheus.GaugeVec
	ended   *prometheus.CounterVec
	handed  *prometheus.CounterVec
}

func newSlowStartMetrics(reg prometheus.Registerer) *slowStartMetrics {
	m := &slowStartMetrics{
		ramping: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sipvisor", Subsystem: "slowstart", Name: "workers",
			Help: "Workers in slow start, per group."}, []string{"group"}),
		rate: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sipvisor", Subsystem: "slowstart", Name: "rate",
			Help: "New sessions per second the group's newest worker in slow start may take."}, []string{"group"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sipvisor", Subsystem: "slowstart", Name: "ended_total",
			Help: "Slow starts ended, by reason."}, []string{"group", "reason"}),
		handed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sipvisor", Subsystem: "slowstart", Name: "new_sessions_total",
			Help: "New sessions handed to workers, by whether the worker was in slow start."}, []string{"group", "ramping"}),
	}
	reg.MustRegister(m.ramping, m.rate, m.ended, m.handed)
	return m
}

func slowStartConfig(c config.SlowStart) slowstart.Config {
	return slowstart.Config{Mode: slowstart.Mode(c.Mode), Unit: slowstart.Unit(c.Unit), Value: c.Value,
		Increment: c.Increment, Interval: c.Interval}
}

// startRamp puts a worker that became ready after start-up (forked by the
// scaler or replacing a crashed one) in slow start.
func (s *Supervisor) startRamp(gr *groupRun, w *pool.Worker) {
	c := s.slowStart()
	if c.Mode == "" || c.Mode == slowstart.Off {
		return
	}
	now := time.Now()
	// An established worker's recent rate: what percent mode compares with.
	peers := len(gr.g.Routable()) - 1 - len(gr.rampList())
	peerRate := 0.0
	if peers > 0 {
		peerRate = gr.lastNewRate.Load() / float64(peers)
	}
	r, err := slowstart.New(c, now, peerRate)
	if err != nil {
		s.log.Warn("slow start not started", "group", gr.g.Name(), "worker", w.ID, "error", err)
		return
	}
	if r.Done() {
		return
	}
	gr.rampMu.Lock()
	list := append(append([]*ramp(nil), gr.rampList()...), &ramp{w: w, r: r})
	gr.ramps.Store(&list)
	gr.rampMu.Unlock()
	s.ss.ramping.WithLabelValues(gr.g.Name()).Set(float64(len(list)))
	s.ss.rate.WithLabelValues(gr.g.Name()).Set(r.Rate())
	s.log.Info("worker in slow start", "group", gr.g.Name(), "worker", w.ID, "pid", w.Pid, "mode", c.Mode, "rate", r.Rate())
}

func (gr *groupRun) rampList() []*ramp {
	if p := gr.ramps.Load(); p != nil {
		return *p
	}
	return nil
}

// pick picks the worker for a message with no affinity. A new session
// goes to the least loaded worker unless that worker is in slow start and its
// ramp says no; then to the least loaded established worker. Nothing is
// refused because of slow start.
func (s *Supervisor) pick(gr *groupRun, newSession bool) *pool.Worker {
	w := gr.g.Pick()
	if w == nil || !newSession {
		return w
	}
	gr.newSessions.Add(1)
	ramps := gr.rampList()
	if len(ramps) == 0 {
		gr.toEstablished.Inc()
		return w
	}
	now := time.Now()
	for _, r := range ramps {
		if r.w != w {
			continue
		}
		r.mu.Lock()
		ok := r.r.Allow(now)
		r.mu.Unlock()
		if ok {
			r.own.Add(1)
			gr.toRamping.Inc()
			return w
		}
		if alt := pickEstablished(gr.g.Routable(), ramps); alt != nil {
			gr.toEstablished.Inc()
			return alt
		}
		// No established worker: the session goes to the new one anyway.
		r.own.Add(1)
		gr.toRamping.Inc()
		return w
	}
	gr.toEstablished.Inc()
	return w
}

// pickEstablished is the least loaded routable worker not in slow start.
func pickEstablished(ws []*pool.Worker, ramps []*ramp) *pool.Worker {
	var best *pool.Worker
	bq := 0
outer:
	for _, w := range ws {
		for _, r := range ramps {
			if r.w == w {
				continue outer
			}
		}
		if q := w.Queue(); best == nil || q < bq {
			best, bq = w, q
		}
	}
	return best
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
				s.tickRamps(gr, now, secs)
			}
		}
	}
}

func (s *Supervisor) tickRamps(gr *groupRun, now time.Time, secs float64) {
	total := gr.newSessions.Swap(0)
	if secs > 0 {
		gr.lastNewRate.Store(float64(total) / secs)
	}
	ramps := gr.rampList()
	if len(ramps) == 0 {
		return
	}
	var own uint64
	counts := make([]uint64, len(ramps))
	for i, r := range ramps {
		counts[i] = r.own.Swap(0)
		own += counts[i]
	}
	peers := len(gr.g.Routable()) - len(ramps)
	keep := ramps[:0:0]
	for i, r := range ramps {
		r.mu.Lock()
		r.r.Tick(now, slowstart.Sample{Own: counts[i], Peers: total - own, PeerWorkers: max(peers, 0)})
		done, reason, rate := r.r.Done(), r.r.Reason(), r.r.Rate()
		r.mu.Unlock()
		if done || r.w.State() != pool.Ready {
			if done {
				s.ss.ended.WithLabelValues(gr.g.Name(), string(reason)).Inc()
				s.log.Info("worker out of slow start", "group", gr.g.Name(), "worker", r.w.ID, "reason", reason)
			}
			continue
		}
		s.ss.rate.WithLabelValues(gr.g.Name()).Set(rate)
		keep = append(keep, r)
	}
	gr.rampMu.Lock()
	gr.ramps.Store(&keep)
	gr.rampMu.Unlock()
	s.ss.ramping.WithLabelValues(gr.g.Name()).Set(float64(len(keep)))
}

// slowStart is the slow start setting in force: the config's, or what
// ctl set made of it since.
func (s *Supervisor) slowStart() slowstart.Config {
	if c := s.ssCfg.Load(); c != nil {
		return *c
	}
	return slowStartConfig(s.config().SlowStart)
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
		for _, r := range gr.rampList() {
			r.mu.Lock()
			err := r.r.Reconfigure(c, now)
			r.mu.Unlock()
			if err != nil {
				return err
			}
		}
	}
	s.log.Info("slow start settings changed", "mode", c.Mode, "unit", c.Unit, "value", c.Value, "increment", c.Increment, "interval", c.Interval)
	return nil
}
