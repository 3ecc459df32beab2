package overload

import (
	"fmt"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	uatomic "go.uber.org/atomic"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/overload/fliphealth"
	"github.com/sipvisor/sipvisor/overload/throttle"
	"github.com/sipvisor/sipvisor/overload/watermark"
)

// SessionCounter counts the sessions in progress on every transport.
type SessionCounter interface {
	// Sessions is the sessions in progress of kind k: for calls and
	// subscriptions those the doors and the connections follow; for
	// registrations the live bindings, which max_registrations bounds and
	// nothing else: a binding lives in the location store and costs the
	// workers nothing, so it is no session for max_sessions, the group
	// limits or number_of_sessions.
	Sessions(k sipscan.Kind) int64
}

// Registrations tells a refresh of a registration from a new one.
type Registrations interface {
	// Refreshes reports whether a REGISTER with this Call-ID refreshes a
	// live binding: an existing session, never refused.
	Refreshes(callID []byte) bool
}

// Logger is where the decisions that change the server's state are told.
type Logger interface {
	Info(msg string, args ...any)
	Warn(msg string, args ...any)
}

// Inputs are what admission reads of the rest of the server.
type Inputs struct {
	Sessions      SessionCounter
	Registrations Registrations
	// RetryAfter is the Retry-After, in seconds, of one refusal.
	RetryAfter func() int
	Log        Logger
	// Changed, when set, is told that the server began or stopped refusing
	// every new session (a suspension, its end, Stop), so that state
	// derived from it follows at once. It runs with admission's lock held:
	// it may read admission's state but must not change it.
	Changed func()
}

// Settings are the protections' settings at start-up; each may change
// later on its own.
type Settings struct {
	// Suspend turns auto-suspend on the watermarks Marks on.
	Suspend bool
	Marks   watermark.Watermarks
	Flips   fliphealth.Config
}

// Limits are the session limits and queue admission in force, 0 turning
// one off. The doors read each at every new session; each may be set on its
// own (ctl set) while they do.
type Limits struct {
	MaxSessions, MaxPerGroup, MaxPerSocket atomic.Int64
	// MaxByKind limits calls, registrations and subscriptions, by
	// sipscan.Kind.
	MaxByKind [4]atomic.Int64
	// QueueAdmission is a percent of the group's queue capacity.
	QueueAdmission uatomic.Float64
	// QueueDelay is in nanoseconds.
	QueueDelay atomic.Int64
}

// Status is the suspension state as reports show it.
type Status struct {
	Suspended, Manual bool
	Since             time.Time
	Reason, Warning   string
}

// Admission is the server's protection: auto-suspend on watermarks (after
// AppGate SDP), session limits, queue admission and the RTT throttle (after
// the Junos resource monitor), and flip health (after the AppNet agent).
// It is safe for concurrent use: the doors ask it on their goroutines while
// the supervisor's loops feed it samples and echoes.
type Admission struct {
	in     Inputs
	limits Limits

	mu      sync.Mutex
	state   watermark.State
	marks   watermark.Watermarks
	enabled bool
	last    watermark.Sample
	gates   []*Gate
	// suspended mirrors state.Suspended() for the doors' hot path.
	suspended atomic.Bool
	// stopping is set once the server drains its workers to exit: every
	// new session is refused from then on.
	stopping atomic.Bool

	flips *fliphealth.Tracker
	m     metrics
	// refusals paces the log lines of the refusals, by reason.
	refusals RefusalLog
}

// New makes the admission of a server and registers its metrics with reg.
func New(reg prometheus.Registerer, in Inputs, s Settings) *Admission {
	a := &Admission{in: in, enabled: s.Suspend, marks: s.Marks,
		flips: fliphealth.New(s.Flips.Window, s.Flips.Threshold), m: newMetrics(reg)}
	a.publishMarks()
	for m := range s.Marks {
		// At 0 until the first sample, so that the series exist from the
		// start for the alerts that compare them with their watermarks.
		a.m.value.WithLabelValues(string(m))
		a.m.suspensions.WithLabelValues(string(m))
	}
	a.m.suspensions.WithLabelValues("operator")
	a.m.flips.WithLabelValues("suspend")
	a.m.healthy.Set(1)
	return a
}

// Limits are the limits in force, to read or set.
func (a *Admission) Limits() *Limits { return &a.limits }

// Admit is Decide's refusal, RefuseNone when it admits.
func (a *Admission) Admit(g *Gate, m *sipscan.Msg) Refusal {
	r, _ := a.Decide(g, m)
	return r
}

// Decide is the decision about a scanned message on a group, with the
// configured Retry-After, in seconds: of its refusal, or of one further on
// (no worker could take it).
func (a *Admission) Decide(g *Gate, m *sipscan.Msg) (Refusal, int) {
	c, k := Classify(RequestOf(m))
	ans := a.Answer(g, c, k, m.CallID)
	return ans.Refusal, ans.RetryAfter
}

// Answer is the decision (package function Decide) about a message of
// class c and kind k with this Call-ID on a group, over the state in force.
// The entry point that sends the refusal counts it and tells Refused.
func (a *Admission) Answer(g *Gate, c Class, k sipscan.Kind, callID []byte) Answer {
	return Decide(c, k, a.State(g, c, k, callID))
}

// AnswerAsk is the supervisor's answer to a worker's ask
// (wire.AdmitRequest) about a message of method with this Call-ID on the
// worker's group, nil for a group that takes no sessions. Workers ask only
// about what admission may refuse, so the method tells the class: an
// INVITE or SUBSCRIBE outside a dialog, a REGISTER that is no removal, an
// OPTIONS that probes the server.
func (a *Admission) AnswerAsk(g *Gate, method sipscan.Method, callID []byte) (Answer, Class, sipscan.Kind) {
	c, k := Classify(Request{IsRequest: true, Method: method, Expires: -1, NoUser: method == sipscan.Options})
	if g == nil && c != ClassProbe {
		// No group that takes sessions: nothing to weigh.
		return Answer{RetryAfter: a.in.RetryAfter()}, c, k
	}
	return a.Answer(g, c, k, callID), c, k
}

// Refused logs a refusal an entry point of the supervisor's sent (where
// names it), admission's or its own, at most one line per reason every
// RefusalLogEvery.
func (a *Admission) Refused(where string, r Refusal, c Class, k sipscan.Kind) {
	a.refusals.Note(a.in.Log, where, r, c, k, a.detail(r)...)
}

// State is the admission state in force for a message of class c and kind
// k with this Call-ID on g. It reads only what the decision may weigh: no
// count for a limit that is off, no lookup of a registration for what is
// no REGISTER.
func (a *Admission) State(g *Gate, c Class, k sipscan.Kind, callID []byte) State {
	st := State{RefuseAll: a.suspended.Load() || a.stopping.Load(), RetryAfter: a.in.RetryAfter()}
	for i := range st.Room {
		st.Room[i] = Unlimited
	}
	if c != ClassNew && c != ClassRegister {
		return st
	}
	if c == ClassRegister {
		st.Refreshes = a.in.Registrations.Refreshes(callID)
	}
	if st.RefuseAll || st.Refreshes {
		return st
	}
	st.Room[k] = a.roomFor(g, k)
	if th := a.limits.QueueAdmission.Load(); th > 0 && g.group.QueueUsage() > th {
		st.QueueFull = true
	}
	if d := a.limits.QueueDelay.Load(); d > 0 && g.QueueDelay() > time.Duration(d) {
		st.QueueFull = true
	}
	if g.throttle.Load() != nil {
		st.Throttle = g
	}
	return st
}

// detail is what a refusal's log line says of the limit that made it.
func (a *Admission) detail(r Refusal) []any {
	if r == RefuseRegistrations {
		return []any{"bindings", a.in.Sessions.Sessions(sipscan.KindRegistration),
			"max_registrations", a.limits.MaxByKind[sipscan.KindRegistration].Load()}
	}
	return nil
}

// OpenToAll reports whether Admit would admit any new session on g now
// but for the session limits and the queue delay, with room to spare: no
// suspension, queue usage under half its threshold, and a throttle that
// refuses nothing and whose last echoes came back in under half its
// threshold. Workers that read their own sockets admit by themselves while
// it holds, within quotas that Room gives, refusing by queue delay what
// waited too long in their own sockets, and leave new sessions to the
// door otherwise (udp_direct_reads), but while suspended (ClosedSuspended),
// when they refuse every one themselves. Queue delay closes nothing: a worker
// weighs its own wait better than the door could, and a door that took
// every datagram back under load would add its hop to the load.
func (a *Admission) OpenToAll(g *Gate) bool { return a.Closed(g) == "" }

// ClosedSuspended is Closed's reason while the server is suspended: every
// new session is refused, whoever asks, so a worker refuses one itself.
const ClosedSuspended = "suspended"

// Closed is why OpenToAll does not hold, "" when it does: suspended,
// stopping, queue_admission or throttle.
func (a *Admission) Closed(g *Gate) string {
	switch {
	case a.suspended.Load():
		return ClosedSuspended
	case a.stopping.Load():
		return "stopping"
	}
	if th := a.limits.QueueAdmission.Load(); th > 0 && 2*g.group.QueueUsage() > th {
		return "queue_admission"
	}
	if t := g.throttle.Load(); t != nil {
		if t.Share() > 0 || 2*g.lastRTT.Load() > t.Config().Threshold {
			return "throttle"
		}
	}
	return ""
}

// Unlimited is Room's value for a kind no limit bounds.
const Unlimited = math.MaxInt64

// Room is how many more new sessions of each kind (sipscan.Kind order) the
// session limits let g admit now: the least of what max_sessions (calls and
// subscriptions), the limit of the kind (max_calls, max_subscriptions), and
// the group's and socket's limits leave; for registrations what
// max_registrations leaves alone; Unlimited where none applies. Decide
// weighs the same room, so that a worker's quota and the supervisor's
// answer agree.
func (a *Admission) Room(g *Gate) (room [4]int64) {
	for k := range room {
		room[k] = a.roomFor(g, sipscan.Kind(k))
	}
	return room
}

// roomFor is Room of kind k, counting only what a limit in force weighs.
func (a *Admission) roomFor(g *Gate, k sipscan.Kind) int64 {
	r := int64(Unlimited)
	if lim := a.limits.MaxByKind[k].Load(); lim > 0 {
		r = min(r, max(lim-a.in.Sessions.Sessions(k), 0))
	}
	if k == sipscan.KindRegistration {
		return r
	}
	if lim := a.limits.MaxSessions.Load(); lim > 0 && k != sipscan.KindOther {
		total, _ := a.Sessions()
		r = min(r, max(lim-total, 0))
	}
	perGroup, perSocket := a.limits.MaxPerGroup.Load(), a.limits.MaxPerSocket.Load()
	if perGroup > 0 || perSocket > 0 {
		if own, ok := g.group.Sessions(); ok {
			if perGroup > 0 {
				r = min(r, max(perGroup-own, 0))
			}
			if perSocket > 0 {
				r = min(r, max(perSocket-own, 0))
			}
		}
	}
	return r
}

// ProbeRefused says whether a keepalive probe of the server (an OPTIONS
// with no user part) is answered 503, and with which Retry-After: while the
// server refuses every new session, suspended or draining to stop, so that
// a dispatcher in front that probes it sends new calls elsewhere. The
// limits, queue admission and the throttle refuse only some sessions and
// leave probes alone: a node marked down for them would move all its
// traffic onto its peers, the overload with it. The answer comes from the
// door for every config, at the moment INVITEs are refused, rather than
// from the script, which runs in a worker that knows the server's state
// only by asking.
func (a *Admission) ProbeRefused() (bool, int) {
	ans := a.Answer(nil, ClassProbe, sipscan.KindOther, nil)
	return ans.Refused(), ans.RetryAfter
}

// Sessions counts the sessions in progress, in total and by kind: total is
// the calls and subscriptions, what max_sessions and number_of_sessions
// weigh; byKind also holds the live bindings (KindRegistration), which are
// no sessions, and the other requests.
func (a *Admission) Sessions() (total int64, byKind [4]int64) {
	for k := range byKind {
		byKind[k] = a.in.Sessions.Sessions(sipscan.Kind(k))
		if sipscan.Kind(k) == sipscan.KindCall || sipscan.Kind(k) == sipscan.KindSubscription {
			total += byKind[k]
		}
	}
	return total, byKind
}

// Stop refuses every new session from now on: the server drains to exit.
func (a *Admission) Stop() {
	a.stopping.Store(true)
	if a.in.Changed != nil {
		a.in.Changed()
	}
}

// Stopping reports whether Stop was called.
func (a *Admission) Stopping() bool { return a.stopping.Load() }

// Suspended reports whether new sessions are refused by auto-suspend or by
// the operator.
func (a *Admission) Suspended() bool { return a.suspended.Load() }

// Status is the suspension state.
func (a *Admission) Status() Status {
	a.mu.Lock()
	defer a.mu.Unlock()
	s := Status{Suspended: a.state.Suspended(), Manual: a.state.Manual()}
	if s.Suspended {
		s.Since, s.Reason, s.Warning = a.state.Since(), a.state.Reason(), a.state.Warning()
	}
	return s
}

// Observe applies one sample of every monitor (a cycle's) under the
// watermarks in force.
func (a *Admission) Observe(smp watermark.Sample, now time.Time) {
	for m, v := range smp {
		a.m.value.WithLabelValues(string(m)).Set(v)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	a.last = smp
	if !a.enabled && !a.state.Manual() {
		if a.state.Suspended() {
			// Auto-suspend switched off while a monitor held it: release.
			a.state = watermark.State{}
			a.publishSuspended(now)
		}
		return
	}
	marks := a.marks
	if !a.enabled {
		marks = watermark.Watermarks{}
	}
	tr, reason := a.state.Observe(smp, marks, now)
	switch tr {
	case watermark.Suspend:
		for _, c := range a.state.Causes() {
			a.m.suspensions.WithLabelValues(string(c)).Inc()
		}
		a.in.Log.Warn(a.state.Warning(), "event", "suspended", "reason", reason, "monitors", smp)
		a.publishSuspended(now)
	case watermark.Resume:
		a.in.Log.Info("server resumed: resource usage allows new sessions again", "event", "resumed", "reason", reason, "monitors", smp)
		a.publishSuspended(now)
	}
}

// publishSuspended makes the state visible to the doors, metrics and flip
// health; a.mu is held.
func (a *Admission) publishSuspended(now time.Time) {
	sus := a.state.Suspended()
	a.suspended.Store(sus)
	v := 0.0
	if sus {
		v = 1
	}
	a.m.suspended.Set(v)
	a.flips.Observe("suspend", !sus, now)
	if a.in.Changed != nil {
		a.in.Changed()
	}
}

// SuspendManually is the operator's suspension, which lasts until
// ResumeManually.
func (a *Admission) SuspendManually(now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.state.SuspendManually(now) == watermark.Suspend {
		a.m.suspensions.WithLabelValues("operator").Inc()
	}
	a.in.Log.Warn(a.state.Warning(), "event", "suspended", "reason", "operator")
	a.publishSuspended(now)
}

// ResumeManually lifts the operator's suspension; monitors over their
// watermarks may still hold the server suspended.
func (a *Admission) ResumeManually(now time.Time) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if !a.state.Manual() {
		return fmt.Errorf("not suspended by the operator")
	}
	a.state.ResumeManually(now)
	a.publishSuspended(now)
	if a.state.Suspended() {
		a.in.Log.Info("operator suspension lifted; still suspended by monitors", "reason", a.state.Reason())
	} else {
		a.in.Log.Info("server resumed by the operator", "event", "resumed")
	}
	return nil
}

// Last is the last sample and the watermarks in force.
func (a *Admission) Last() (watermark.Sample, watermark.Watermarks) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.last, a.marks
}

// Marks are the watermarks in force.
func (a *Admission) Marks() watermark.Watermarks {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.marks
}

// SetMark changes one watermark ("high" or "low"), which must leave its
// pair valid.
func (a *Admission) SetMark(m watermark.Monitor, side string, v float64) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	next, err := a.marks.With(m, side, v)
	if err != nil {
		return err
	}
	a.marks = next
	a.publishMarks()
	return nil
}

// AutoSuspend reports whether auto-suspend is on.
func (a *Admission) AutoSuspend() bool {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.enabled
}

// SetAutoSuspend turns auto-suspend on or off; the next sample applies it.
func (a *Admission) SetAutoSuspend(on bool) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.enabled = on
}

// SetSuspend puts a reloaded config's auto-suspend in force.
func (a *Admission) SetSuspend(on bool, marks watermark.Watermarks) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.enabled, a.marks = on, marks
	a.publishMarks()
}

func (a *Admission) publishMarks() {
	for m, p := range a.marks {
		a.m.high.WithLabelValues(string(m)).Set(p.High)
		a.m.low.WithLabelValues(string(m)).Set(p.Low)
	}
}

// SetThrottle gives every group that takes sessions a fresh throttle of c
// (none when c is not enabled).
func (a *Admission) SetThrottle(c throttle.Config) {
	a.mu.Lock()
	gates := a.gates
	a.mu.Unlock()
	for _, g := range gates {
		if !g.throttles {
			continue
		}
		g.setThrottle(c)
		a.m.share.WithLabelValues(g.name).Set(0)
	}
}

// EchoTick feeds the worst echo round trip of the last interval to the
// group's throttle. pending is the age of the oldest echo still
// unanswered, so that a stuck worker reads as slow, not as silent.
func (a *Admission) EchoTick(g *Gate, pending time.Duration, now time.Time) {
	worst := max(g.worstRTT.Swap(0), pending)
	g.lastRTT.Store(worst)
	a.m.rtt.WithLabelValues(g.name).Set(worst.Seconds())
	t := g.throttle.Load()
	if t == nil {
		return
	}
	share, changed := t.Observe(worst)
	a.m.share.WithLabelValues(g.name).Set(share)
	if changed {
		a.flips.Observe("throttle/"+g.name, share == 0, now)
		if share > 0 {
			a.in.Log.Warn("throttling new sessions: worker round trip over threshold", "group", g.name, "rtt", worst, "refused_share", share)
		} else {
			a.in.Log.Info("throttle removed", "group", g.name, "rtt", worst)
		}
	}
}

// WorkersStarted records the first reading of a group's workers: a state,
// not a flip.
func (a *Admission) WorkersStarted(group string, now time.Time) {
	a.flips.Observe("workers/"+group, true, now)
}

// WorkerCrashed records a crash as a flip of the group's health, and its
// restart as another.
func (a *Admission) WorkerCrashed(group string, now time.Time) {
	a.flips.Observe("workers/"+group, false, now)
	a.flips.Observe("workers/"+group, true, now)
}

// Healthy reports whether no component flapped more than the flip
// threshold within the window, and publishes the flips.
func (a *Admission) Healthy(now time.Time) (bool, string) {
	ok, reason := a.flips.Healthy(now)
	for c, n := range a.flips.Counts(now) {
		a.m.flips.WithLabelValues(c).Set(float64(n))
	}
	if ok {
		a.m.healthy.Set(1)
	} else {
		a.m.healthy.Set(0)
	}
	return ok, reason
}

// Flips is flip health's tracker, for reports.
func (a *Admission) Flips() *fliphealth.Tracker { return a.flips }

// SetFlipHealth puts new flip health settings in force.
func (a *Admission) SetFlipHealth(c fliphealth.Config) { a.flips.Set(c.Window, c.Threshold) }
