package supervisor

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	uatomic "go.uber.org/atomic"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/ctl"
	"github.com/sipvisor/sipvisor/frontdoor"
	"github.com/sipvisor/sipvisor/overload/fliphealth"
	"github.com/sipvisor/sipvisor/overload/throttle"
	"github.com/sipvisor/sipvisor/overload/watermark"
	"github.com/sipvisor/sipvisor/pool"
	"github.com/sipvisor/sipvisor/sipscan"
)

// overload is the supervisor's protection of the service: auto-suspend on
// watermarks (after AppGate SDP), session limits, queue admission and the
// RTT throttle (after the Junos resource monitor) and flip health (after the
// AppNet agent). The pure decisions live in their packages; this is the
// wiring: sampling, live settings, metrics.
type overload struct {
	s   *Supervisor
	log logger

	mu      sync.Mutex
	state   watermark.State
	marks   watermark.Watermarks
	enabled bool
	last    watermark.Sample
	// suspended mirrors state.Suspended() for the front door's hot path.
	suspended atomic.Bool

	// Session limits, 0 = unlimited; read by the doors on every new session.
	maxSessions, maxPerGroup, maxPerSocket atomic.Int64
	maxByKind                              [4]atomic.Int64
	queueAdmission                         uatomic.Float64 // percent, 0 = off
	queueDelay                             atomic.Int64    // ns, 0 = off

	flips *fliphealth.Tracker
	// throttle is the RTT throttle's settings in force (o.mu).
	throttle config.Throttle

	m overloadMetrics
}

type logger interface {
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
}

type overloadMetrics struct {
	value       *prometheus.GaugeVec
	high, low   *prometheus.GaugeVec
	suspended   prometheus.Gauge
	suspensions *prometheus.CounterVec
	share       *prometheus.GaugeVec
	rtt         *prometheus.GaugeVec
	flips       *prometheus.GaugeVec
	healthy     prometheus.Gauge
}

func newOverload(s *Supervisor, cfg *config.Config) *overload {
	o := &overload{s: s, log: s.log, enabled: cfg.Suspend.Enable,
		marks: watermark.Watermarks{
			watermark.EventQueueUsage:   {High: cfg.Suspend.EventQueueUsage.High, Low: cfg.Suspend.EventQueueUsage.Low},
			watermark.HeapUsage:         {High: cfg.Suspend.HeapUsage.High, Low: cfg.Suspend.HeapUsage.Low},
			watermark.NumberOfSessions:  {High: cfg.Suspend.NumberOfSessions.High, Low: cfg.Suspend.NumberOfSessions.Low},
			watermark.SystemMemoryUsage: {High: cfg.Suspend.SystemMemory.High, Low: cfg.Suspend.SystemMemory.Low},
		},
		flips:    fliphealth.New(cfg.FlipHealth.Window, cfg.FlipHealth.Threshold),
		throttle: cfg.Throttle,
	}
	o.setLimits(cfg.Limits)
	g := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sipvisor", Subsystem: "overload", Name: name, Help: help}, labels)
	}
	o.m = overloadMetrics{
		value: g("monitor_value", "Each suspend monitor's last reading (percent, or a count for number_of_sessions).", "monitor"),
		high:  g("monitor_high_watermark", "Each monitor's high watermark: at or over it new sessions are refused.", "monitor"),
		low:   g("monitor_low_watermark", "Each monitor's low watermark: at or under it the monitor releases the suspension.", "monitor"),
		suspended: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sipvisor", Subsystem: "overload", Name: "suspended",
			Help: "1 while new sessions are refused by auto-suspend or by the operator."}),
		suspensions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sipvisor", Subsystem: "overload", Name: "suspensions_total",
			Help: "Suspensions, by the monitor that caused them (operator for ctl suspend)."}, []string{"reason"}),
		share: g("throttle_refused_ratio", "Share of new sessions the RTT throttle refuses, per group (0-1).", "group"),
		rtt:   g("echo_rtt_seconds", "Worst echo round trip of the group's workers in the last echo interval.", "group"),
		flips: g("flips", "Status flips per component within the flip window.", "component"),
		healthy: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sipvisor", Subsystem: "overload", Name: "healthy",
			Help: "1 while no component flapped more than the flip threshold within the window."}),
	}
	s.reg.MustRegister(o.m.value, o.m.high, o.m.low, o.m.suspended, o.m.suspensions, o.m.share, o.m.rtt, o.m.flips, o.m.healthy)
	o.publishMarks()
	o.m.healthy.Set(1)
	return o
}

func (o *overload) setLimits(l config.Limits) {
	o.maxSessions.Store(int64(l.MaxSessions))
	o.maxPerGroup.Store(int64(l.MaxSessionsPerGroup))
	o.maxPerSocket.Store(int64(l.MaxSessionsPerSocket))
	o.maxByKind[sipscan.KindCall].Store(int64(l.MaxCalls))
	o.maxByKind[sipscan.KindRegistration].Store(int64(l.MaxRegistrations))
	o.maxByKind[sipscan.KindSubscription].Store(int64(l.MaxSubscriptions))
	o.queueAdmission.Store(l.QueueAdmission)
	o.queueDelay.Store(int64(l.QueueDelay))
}

func (o *overload) publishMarks() {
	for m, p := range o.marks {
		o.m.high.WithLabelValues(string(m)).Set(p.High)
		o.m.low.WithLabelValues(string(m)).Set(p.Low)
	}
}

// sessions counts the sessions in progress: the calls and subscriptions
// the doors follow, and the registered bindings, which are registrations in
// progress until they expire.
func (o *overload) sessions() (total int64, byKind [4]int64) {
	for _, gr := range o.s.udp {
		if gr.door == nil {
			continue
		}
		for k := range byKind {
			byKind[k] += gr.door.Sessions.Counts[k].Load()
		}
	}
	byKind[sipscan.KindCall] += o.s.connSess.count(sipscan.KindCall)
	byKind[sipscan.KindSubscription] += o.s.connSess.count(sipscan.KindSubscription)
	byKind[sipscan.KindRegistration] = o.s.regCount.Load()
	for k, v := range byKind {
		if sipscan.Kind(k) != sipscan.KindOther {
			total += v
		}
	}
	return total, byKind
}

// groupSessions is the sessions in progress that came in through a group:
// its door's, or for the TCP group those over connections. ok is false for
// a group that takes none (timers).
func (o *overload) groupSessions(gr *groupRun) (n int64, ok bool) {
	switch {
	case gr.door != nil:
		return doorSessions(gr.door), true
	case gr.g.Kind() == pool.KindTCP:
		return o.s.connSess.total(), true
	}
	return 0, false
}

// doorSessions is the sessions in progress that came in through one door:
// what the per-group and per-socket limits count.
func doorSessions(d *frontdoor.Door) int64 {
	var n int64
	for k := range d.Sessions.Counts {
		n += d.Sessions.Counts[k].Load()
	}
	return n
}

// sample reads every monitor once per cycle and applies the watermarks.
func (o *overload) sample(now time.Time) {
	smp := watermark.Sample{}
	var queues float64
	var heap float64
	memLimit := float64(o.s.config().Workers.MemoryLimit)
	for _, gr := range o.s.groupRuns() {
		ws := gr.g.Routable()
		queues = max(queues, frontdoor.QueueUsage(ws))
		for _, w := range gr.g.Workers() {
			if memLimit > 0 {
				heap = max(heap, 100*float64(w.HeapBytes())/memLimit)
			}
		}
	}
	smp[watermark.EventQueueUsage] = queues
	smp[watermark.HeapUsage] = heap
	total, _ := o.sessions()
	smp[watermark.NumberOfSessions] = float64(total)
	if mem, err := watermark.ReadSystemMemory("/"); err == nil {
		smp[watermark.SystemMemoryUsage] = mem
	} else {
		o.s.m.sampleFailures.WithLabelValues("system_memory_usage").Inc()
	}
	for m, v := range smp {
		o.m.value.WithLabelValues(string(m)).Set(v)
	}

	o.mu.Lock()
	defer o.mu.Unlock()
	o.last = smp
	if !o.enabled && !o.state.Manual() {
		if o.state.Suspended() {
			// Auto-suspend switched off while a monitor held it: release.
			o.state = watermark.State{}
			o.publishSuspended(now, "auto-suspend disabled")
		}
		return
	}
	marks := o.marks
	if !o.enabled {
		marks = watermark.Watermarks{}
	}
	tr, reason := o.state.Observe(smp, marks, now)
	switch tr {
	case watermark.Suspend:
		for _, c := range o.state.Causes() {
			o.m.suspensions.WithLabelValues(string(c)).Inc()
		}
		o.log.Warn(o.state.Warning(), "event", "suspended", "reason", reason, "monitors", smp)
		o.publishSuspended(now, "")
	case watermark.Resume:
		o.log.Info("server resumed: resource usage allows new sessions again", "event", "resumed", "reason", reason, "monitors", smp)
		o.publishSuspended(now, "")
	}
}

// publishSuspended makes the state visible to the doors, metrics and flip
// health; o.mu is held.
func (o *overload) publishSuspended(now time.Time, _ string) {
	sus := o.state.Suspended()
	o.suspended.Store(sus)
	v := 0.0
	if sus {
		v = 1
	}
	o.m.suspended.Set(v)
	o.flips.Observe("suspend", !sus, now)
}

func (o *overload) suspendManually(now time.Time) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.state.SuspendManually(now) == watermark.Suspend {
		o.m.suspensions.WithLabelValues("operator").Inc()
	}
	o.log.Warn(o.state.Warning(), "event", "suspended", "reason", "operator")
	o.publishSuspended(now, "")
}

func (o *overload) resumeManually(now time.Time) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	if !o.state.Manual() {
		return fmt.Errorf("not suspended by the operator")
	}
	o.state.ResumeManually(now)
	o.publishSuspended(now, "")
	if o.state.Suspended() {
		o.log.Info("operator suspension lifted; still suspended by monitors", "reason", o.state.Reason())
	} else {
		o.log.Info("server resumed by the operator", "event", "resumed")
	}
	return nil
}

// admit is the admission decision of one new session on a group, cheapest
// checks first: suspension, limits, queue occupancy, RTT throttle.
func (o *overload) admit(gr *groupRun, m *sipscan.Msg) frontdoor.Refusal {
	if m.Method == sipscan.Register && o.s.refreshesBinding(m.CallID) {
		return frontdoor.RefuseNone
	}
	if o.suspended.Load() || o.s.stopping.Load() {
		return frontdoor.RefuseSuspended
	}
	kind := m.Kind()
	if lim := o.maxByKind[kind].Load(); lim > 0 {
		var n int64
		if kind == sipscan.KindRegistration {
			n = o.s.regCount.Load()
		} else {
			for _, g := range o.s.udp {
				if g.door != nil {
					n += g.door.Sessions.Counts[kind].Load()
				}
			}
			n += o.s.connSess.count(kind)
		}
		if n >= lim {
			return frontdoor.RefuseLimit
		}
	}
	if lim := o.maxSessions.Load(); lim > 0 {
		if total, _ := o.sessions(); total >= lim {
			return frontdoor.RefuseLimit
		}
	}
	if own, ok := o.groupSessions(gr); ok {
		if lim := o.maxPerGroup.Load(); lim > 0 && own >= lim {
			return frontdoor.RefuseLimit
		}
		if lim := o.maxPerSocket.Load(); lim > 0 && own >= lim {
			return frontdoor.RefuseLimit
		}
	}
	if th := o.queueAdmission.Load(); th > 0 {
		if frontdoor.QueueUsage(gr.g.Routable()) > th {
			return frontdoor.RefuseQueue
		}
	}
	if d := o.queueDelay.Load(); d > 0 {
		if o.queueDelayOf(gr) > time.Duration(d) {
			return frontdoor.RefuseQueue
		}
	}
	if t := gr.throttle.Load(); t != nil && !t.Admit(gr.admitted.Add(1)) {
		return frontdoor.RefuseThrottle
	}
	return frontdoor.RefuseNone
}

// queueDelayOf is how long new work waits for the group. Workers that read
// their own connections (TCP) get messages from no queue of the
// supervisor's: how long they take to come to new work is what an echo,
// queued behind the messages they have read, waits for them.
func (o *overload) queueDelayOf(gr *groupRun) time.Duration {
	d := frontdoor.QueueDelay(gr.g.Routable())
	if gr.door == nil {
		d = max(d, gr.lastRTT.Load())
	}
	return d
}

// echoTick sends every group's workers an echo and feeds the worst round
// trip of the last interval to the group's throttle. An echo still
// unanswered counts with its age, so a stuck worker reads as slow, not as
// silent.
func (o *overload) echoTick(now time.Time) {
	for _, gr := range o.s.groupRuns() {
		worst := gr.worstRTT.Swap(0)
		for _, w := range gr.g.Routable() {
			if age := w.EchoAge(now); age > worst {
				worst = age
			}
		}
		gr.g.Echo(now)
		gr.lastRTT.Store(worst)
		o.m.rtt.WithLabelValues(gr.g.Name()).Set(worst.Seconds())
		t := gr.throttle.Load()
		if t == nil {
			continue
		}
		share, changed := t.Observe(worst)
		o.m.share.WithLabelValues(gr.g.Name()).Set(share)
		if changed {
			o.flips.Observe("throttle/"+gr.g.Name(), share == 0, now)
			if share > 0 {
				o.log.Warn("throttling new sessions: worker round trip over threshold", "group", gr.g.Name(), "rtt", worst, "refused_share", share)
			} else {
				o.log.Info("throttle removed", "group", gr.g.Name(), "rtt", worst)
			}
		}
	}
}

// workerExited records a crash as a flip of the group's health.
func (o *overload) workerExited(group string, reason string, now time.Time) {
	if reason == pool.ExitCrash || reason == pool.ExitReadyTimeout {
		o.flips.Observe("workers/"+group, false, now)
		o.flips.Observe("workers/"+group, true, now)
	}
}

func (o *overload) healthy(now time.Time) (bool, string) {
	ok, reason := o.flips.Healthy(now)
	for c, n := range o.flips.Counts(now) {
		o.m.flips.WithLabelValues(c).Set(float64(n))
	}
	if ok {
		o.m.healthy.Set(1)
	} else {
		o.m.healthy.Set(0)
	}
	return ok, reason
}

func newThrottle(c config.Throttle) *throttle.Throttle {
	if !c.Enable {
		return nil
	}
	return throttle.New(throttle.Config{Threshold: c.RTTThreshold, Count: c.Count, Step: c.StepPercent / 100, Enabled: true})
}

// resources is the resource-monitor table.
func (o *overload) resources() []ctl.Resource {
	o.mu.Lock()
	last, marks := o.last, o.marks
	o.mu.Unlock()
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
	total, byKind := o.sessions()
	lim := func(name string, v, l int64) {
		out = append(out, ctl.Resource{Name: name, Value: float64(v), High: float64(l), Over: l > 0 && v >= l})
	}
	lim("max_sessions", total, o.maxSessions.Load())
	lim("max_calls", byKind[sipscan.KindCall], o.maxByKind[sipscan.KindCall].Load())
	lim("max_registrations", byKind[sipscan.KindRegistration], o.maxByKind[sipscan.KindRegistration].Load())
	lim("max_subscriptions", byKind[sipscan.KindSubscription], o.maxByKind[sipscan.KindSubscription].Load())
	qa := o.queueAdmission.Load()
	for _, gr := range o.s.groupRuns() {
		if gr.door != nil {
			own := doorSessions(gr.door)
			lim("max_sessions_per_group/"+gr.g.Name(), own, o.maxPerGroup.Load())
			lim("max_sessions_per_socket/"+gr.g.Name(), own, o.maxPerSocket.Load())
			q := frontdoor.QueueUsage(gr.g.Routable())
			out = append(out, ctl.Resource{Name: "queue_admission/" + gr.g.Name(), Value: q, High: qa, Unit: "%", Over: qa > 0 && q > qa})
			qd, qdh := frontdoor.QueueDelay(gr.g.Routable()).Seconds(), time.Duration(o.queueDelay.Load()).Seconds()
			out = append(out, ctl.Resource{Name: "queue_delay/" + gr.g.Name(), Value: qd, High: qdh, Unit: "s", Over: qdh > 0 && qd > qdh})
		}
		if t := gr.throttle.Load(); t != nil {
			th := t.Config().Threshold.Seconds()
			rtt := gr.lastRTT.Load().Seconds()
			out = append(out, ctl.Resource{Name: "throttle_rtt/" + gr.g.Name(), Value: rtt, High: th, Unit: "s", Over: rtt > th})
		}
	}
	return out
}
