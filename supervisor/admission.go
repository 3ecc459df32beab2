package supervisor

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/ctl"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/overload/watermark"
	"github.com/sipvisor/sipvisor/pool"
)

// newAdmission wires the server's admission (package overload) to what it
// weighs: the sessions the doors and the connections follow, the live
// registrations, and each group's queues.
func (s *Supervisor) newAdmission(cfg *config.Config) *overload.Admission {
	a := overload.New(s.reg, overload.Inputs{Sessions: sessionCount{s}, Registrations: registrations{s},
		RetryAfter: s.retryAfter, Log: s.log, Changed: s.steerNow},
		overload.Settings{Suspend: cfg.Suspend.Enable, Marks: cfg.Suspend.Watermarks(), Flips: cfg.FlipHealth})
	setLimits(a.Limits(), cfg.Limits)
	s.thr = cfg.Throttle
	s.reg.MustRegister(
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "sipvisor", Subsystem: "location", Name: "bindings",
			Help: "Live bindings in the location store, as last counted (every 5 s or longer for a shared store)."},
			func() float64 { return float64(s.store.regCount.Load()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "sipvisor", Subsystem: "location", Name: "max_bindings",
			Help: "max_registrations in force: the most bindings the store takes before a new registration is refused; 0 for no bound."},
			func() float64 { return float64(a.Limits().MaxByKind[sipscan.KindRegistration].Load()) }))
	return a
}

func setLimits(o *overload.Limits, l config.Limits) {
	o.MaxSessions.Store(int64(l.MaxSessions))
	o.MaxPerGroup.Store(int64(l.MaxSessionsPerGroup))
	o.MaxPerSocket.Store(int64(l.MaxSessionsPerSocket))
	o.MaxByKind[sipscan.KindCall].Store(int64(l.MaxCalls))
	o.MaxByKind[sipscan.KindRegistration].Store(int64(l.MaxRegistrations))
	o.MaxByKind[sipscan.KindSubscription].Store(int64(l.MaxSubscriptions))
	o.QueueAdmission.Store(l.QueueAdmission)
	o.QueueDelay.Store(int64(l.QueueDelay))
}

// sessionCount counts the sessions in progress for admission.
type sessionCount struct{ s *Supervisor }

// Sessions counts the calls and subscriptions the doors and the
// connections follow, and the live bindings, which only max_registrations
// weighs (overload.SessionCounter).
func (c sessionCount) Sessions(k sipscan.Kind) int64 {
	s := c.s
	if k == sipscan.KindRegistration {
		return s.store.regCount.Load()
	}
	var n int64
	for _, gr := range s.udp {
		n += gr.sessions(k)
	}
	return n + s.connSess.count(k)
}

type registrations struct{ s *Supervisor }

func (r registrations) Refreshes(callID []byte) bool { return r.s.store.refreshesBinding(callID) }

// groupLoad is a group as admission weighs it.
type groupLoad struct {
	gr    *groupRun
	conns *connSessions
}

// Sessions is the sessions in progress that came in through the group:
// its door's, or for the TCP group those over connections. ok is false for
// a group that takes none (timers).
func (l groupLoad) Sessions() (int64, bool) {
	switch {
	case l.gr.door != nil:
		return l.gr.allSessions(), true
	case l.gr.g.Kind() == pool.KindTCP:
		return l.conns.total(), true
	}
	return 0, false
}

func (l groupLoad) QueueUsage() float64 { return l.gr.queueUsage() }

// queueUsage is how full the group's queues are, in percent: its workers'
// queues of frames, and with direct reads their sockets too.
func (gr *groupRun) queueUsage() float64 {
	u := queueUsage(gr.g.Routable())
	if gr.steer != nil {
		u = max(u, gr.steer.SocketUsage())
	}
	return u
}

// QueueDelay is how long new work would wait: in the least waiting queue,
// and with direct reads at least as long as datagrams waited lately in the
// workers' own sockets.
func (l groupLoad) QueueDelay() time.Duration {
	d := queueDelay(l.gr.g.Routable())
	if l.gr.steer != nil {
		d = max(d, l.gr.steer.LongestWait())
	}
	return d
}

// sessions is the sessions of kind k in progress that came in through a
// UDP group: its door's, or with direct reads its workers' doors'.
func (gr *groupRun) sessions(k sipscan.Kind) int64 {
	var n int64
	if gr.door != nil {
		n = gr.door.Sessions.Counts[k].Load()
	}
	if gr.steer != nil {
		n += gr.steer.Sessions(k)
	}
	return n
}

// allSessions is the sessions in progress that came in through a UDP
// group: what the per-group and per-socket limits count.
func (gr *groupRun) allSessions() int64 {
	var n int64
	for k := range 4 {
		n += gr.sessions(sipscan.Kind(k))
	}
	return n
}

// queueUsage is the share, in percent, of the queues of the workers that
// take new work that is in use.
func queueUsage(ws []*pool.Worker) float64 {
	if len(ws) == 0 {
		return 0
	}
	var q int
	for _, w := range ws {
		q += w.Queue()
	}
	return 100 * float64(q) / float64(len(ws)*pool.QueueCapacity)
}

// queueDelay is how long a new message would wait in the least waiting of
// ws: what admission by queue delay weighs, as the door hands new work to
// the least loaded worker.
func queueDelay(ws []*pool.Worker) time.Duration {
	if len(ws) == 0 {
		return 0
	}
	least := ws[0].QueueDelay()
	for _, w := range ws[1:] {
		least = min(least, w.QueueDelay())
	}
	return least
}

// sample reads every monitor once per cycle for auto-suspend.
func (s *Supervisor) sample(now time.Time) {
	smp := watermark.Sample{}
	var queues float64
	var heap float64
	memLimit := float64(s.config().Workers.MemoryLimit)
	for _, gr := range s.groupRuns() {
		queues = max(queues, gr.queueUsage())
		for _, w := range gr.g.Workers() {
			if memLimit > 0 {
				heap = max(heap, 100*float64(w.HeapBytes())/memLimit)
			}
		}
	}
	smp[watermark.EventQueueUsage] = queues
	smp[watermark.HeapUsage] = heap
	total, _ := s.ov.Sessions()
	smp[watermark.NumberOfSessions] = float64(total)
	if s.mem == nil {
		s.mem = watermark.NewMemoryReader("/")
	}
	if mem, err := s.mem.Read(now); err == nil {
		smp[watermark.SystemMemoryUsage] = mem
	} else {
		s.m.sampleFailures.WithLabelValues("system_memory_usage").Inc()
	}
	s.ov.Observe(smp, now)
}

// echoTick sends every group's workers an echo and feeds the worst round
// trip of the last interval to the group's throttle. An echo still
// unanswered counts with its age, so a stuck worker reads as slow, not as
// silent.
func (s *Supervisor) echoTick(now time.Time) {
	for _, gr := range s.groupRuns() {
		var pending time.Duration
		for _, w := range gr.g.Routable() {
			pending = max(pending, w.EchoAge(now))
		}
		if gr.steer != nil {
			// A worker that reads its own socket answers echoes between
			// datagrams: how long those waited is its queue.
			gr.gate.Echoed(gr.steer.LongestWait())
		}
		s.ov.EchoTick(gr.gate, pending, now)
		// The throttle opens and closes here, not by an event.
		if gr.steer != nil {
			gr.steer.NoteClosed(s.ov.Closed(gr.gate))
		}
		if gr.stream != nil {
			gr.stream.NoteClosed(s.ov.Closed(gr.gate))
		}
		gr.g.Echo(now)
	}
}

// throttleConfig is the RTT throttle's settings in force.
func (s *Supervisor) throttleConfig() config.Throttle {
	s.thrMu.Lock()
	defer s.thrMu.Unlock()
	return s.thr
}

// setThrottle puts c in force; every group's throttle starts afresh.
func (s *Supervisor) setThrottle(c config.Throttle) {
	s.thrMu.Lock()
	s.thr = c
	s.thrMu.Unlock()
	s.ov.SetThrottle(c.Config())
	s.log.Info("throttle settings changed", "enable", c.Enable, "rtt_threshold", c.RTTThreshold, "count", c.Count, "step_percent", c.StepPercent)
}

// resources is the resource-monitor table.
func (s *Supervisor) resources() []ctl.Resource {
	o := s.ov
	last, marks := o.Last()
	var out []ctl.Resource
	for _, m := range watermark.Monitors() {
		p := marks[m]
		unit := "%"
		if !m.IsPercent() {
			unit = ""
		}
		v := last[m]
		out = append(out, ctl.Resource{Name: string(m), Value: v, High: p.High, Low: p.Low, Unit: unit, Over: v >= p.High})
	}
	total, byKind := o.Sessions()
	lim := func(name string, v, l int64) {
		out = append(out, ctl.Resource{Name: name, Value: float64(v), High: float64(l), Over: l > 0 && v >= l})
	}
	l := o.Limits()
	lim("max_sessions", total, l.MaxSessions.Load())
	lim("max_calls", byKind[sipscan.KindCall], l.MaxByKind[sipscan.KindCall].Load())
	lim("max_registrations", byKind[sipscan.KindRegistration], l.MaxByKind[sipscan.KindRegistration].Load())
	lim("max_subscriptions", byKind[sipscan.KindSubscription], l.MaxByKind[sipscan.KindSubscription].Load())
	qa := l.QueueAdmission.Load()
	for _, gr := range s.groupRuns() {
		if gr.door != nil {
			own := gr.allSessions()
			lim("max_sessions_per_group/"+gr.g.Name(), own, l.MaxPerGroup.Load())
			lim("max_sessions_per_socket/"+gr.g.Name(), own, l.MaxPerSocket.Load())
			q := gr.queueUsage()
			out = append(out, ctl.Resource{Name: "queue_admission/" + gr.g.Name(), Value: q, High: qa, Unit: "%", Over: qa > 0 && q > qa})
			qd, qdh := groupLoad{gr, s.connSess}.QueueDelay().Seconds(), time.Duration(l.QueueDelay.Load()).Seconds()
			out = append(out, ctl.Resource{Name: "queue_delay/" + gr.g.Name(), Value: qd, High: qdh, Unit: "s", Over: qdh > 0 && qd > qdh})
		}
		if t := gr.gate.Throttle(); t != nil {
			th := t.Config().Threshold.Seconds()
			rtt := gr.gate.LastRTT().Seconds()
			out = append(out, ctl.Resource{Name: "throttle_rtt/" + gr.g.Name(), Value: rtt, High: th, Unit: "s", Over: rtt > th})
		}
	}
	return out
}
