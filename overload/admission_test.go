package overload

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/overload/throttle"
	"github.com/sipvisor/sipvisor/overload/watermark"
)

// The inputs below are plain values: what the supervisor would read from
// its doors, connections, location store and queues.

type counts [4]int64

func (c *counts) Sessions(k sipscan.Kind) int64 { return c[k] }

type bindings map[string]bool

func (b bindings) Refreshes(callID []byte) bool { return b[string(callID)] }

type load struct {
	own   int64
	takes bool
	usage float64
	delay time.Duration
}

func (l *load) Sessions() (int64, bool)   { return l.own, l.takes }
func (l *load) QueueUsage() float64       { return l.usage }
func (l *load) QueueDelay() time.Duration { return l.delay }
func (quiet) Info(string, ...any)         {}
func (quiet) Warn(string, ...any)         {}
func msg(method sipscan.Method, id string) *sipscan.Msg {
	return &sipscan.Msg{IsRequest: true, Method: method, CSeqMethod: method, CallID: []byte(id), MaxForwards: -1, ContentLength: -1, Expires: -1}
}

type quiet struct{}

func newAdmission(t *testing.T, c *counts, b bindings) *Admission {
	t.Helper()
	return New(prometheus.NewRegistry(), Inputs{Sessions: c, Registrations: b, RetryAfter: func() int { return 7 }, Log: quiet{}},
		Settings{Suspend: true, Marks: watermark.Defaults()})
}

func TestAdmit(t *testing.T) {
	t.Parallel()
	type limits struct {
		sessions, perGroup, perSocket, calls, regs, subs int64
		queue                                            float64
		delay                                            time.Duration
	}
	for _, tc := range []struct {
		name      string
		m         *sipscan.Msg
		sessions  counts
		g         load
		ownConns  bool
		lastRTT   time.Duration
		lim       limits
		suspended bool
		stopping  bool
		want      Refusal
	}{
		{name: "nothing set admits", m: msg(sipscan.Invite, "a"), g: load{takes: true}, want: RefuseNone},
		{name: "suspended refuses", m: msg(sipscan.Invite, "a"), suspended: true, want: RefuseSuspended},
		{name: "stopping refuses", m: msg(sipscan.Invite, "a"), stopping: true, want: RefuseSuspended},
		{name: "a refresh of a live binding passes a suspension", m: msg(sipscan.Register, "live"), suspended: true, want: RefuseNone},
		{name: "a new registration does not", m: msg(sipscan.Register, "new"), suspended: true, want: RefuseSuspended},
		{name: "a refresh passes the registration limit", m: msg(sipscan.Register, "live"),
			sessions: counts{sipscan.KindRegistration: 5}, lim: limits{regs: 5}, want: RefuseNone},
		{name: "registrations at their limit", m: msg(sipscan.Register, "new"),
			sessions: counts{sipscan.KindRegistration: 5}, lim: limits{regs: 5}, want: RefuseRegistrations},
		{name: "a removal passes the registration limit", m: func() *sipscan.Msg { m := msg(sipscan.Register, "new"); m.Expires = 0; return m }(),
			sessions: counts{sipscan.KindRegistration: 5}, lim: limits{regs: 5}, want: RefuseNone},
		{name: "a removal passes a suspension", m: func() *sipscan.Msg { m := msg(sipscan.Register, "new"); m.Expires = 0; return m }(),
			suspended: true, want: RefuseNone},
		{name: "registrations under their limit", m: msg(sipscan.Register, "new"),
			sessions: counts{sipscan.KindRegistration: 4}, lim: limits{regs: 5}, want: RefuseNone},
		{name: "bindings are no sessions for max_sessions", m: msg(sipscan.Invite, "a"),
			sessions: counts{sipscan.KindCall: 4, sipscan.KindRegistration: 300}, lim: limits{sessions: 10}, want: RefuseNone},
		{name: "max_sessions does not bound registrations", m: msg(sipscan.Register, "new"),
			sessions: counts{sipscan.KindCall: 10}, lim: limits{sessions: 10}, want: RefuseNone},
		{name: "nor do the group's limits", m: msg(sipscan.Register, "new"), g: load{own: 3, takes: true}, lim: limits{perGroup: 3, perSocket: 3}, want: RefuseNone},
		{name: "a new registration waits on full queues", m: msg(sipscan.Register, "new"), g: load{usage: 51}, lim: limits{queue: 50}, want: RefuseQueue},
		{name: "calls at their limit", m: msg(sipscan.Invite, "a"),
			sessions: counts{sipscan.KindCall: 10}, lim: limits{calls: 10}, want: RefuseLimit},
		{name: "calls under their limit", m: msg(sipscan.Invite, "a"),
			sessions: counts{sipscan.KindCall: 9, sipscan.KindSubscription: 100}, lim: limits{calls: 10}, want: RefuseNone},
		{name: "a subscription is no call", m: msg(sipscan.Subscribe, "s"),
			sessions: counts{sipscan.KindCall: 10}, lim: limits{calls: 10}, want: RefuseNone},
		{name: "calls and subscriptions at max_sessions", m: msg(sipscan.Subscribe, "s"),
			sessions: counts{sipscan.KindCall: 7, sipscan.KindSubscription: 3}, lim: limits{sessions: 10}, want: RefuseLimit},
		{name: "other requests are no sessions for max_sessions", m: msg(sipscan.Invite, "a"),
			sessions: counts{sipscan.KindOther: 50, sipscan.KindCall: 9}, lim: limits{sessions: 10}, want: RefuseNone},
		{name: "the group at its limit", m: msg(sipscan.Invite, "a"), g: load{own: 3, takes: true}, lim: limits{perGroup: 3}, want: RefuseLimit},
		{name: "the socket at its limit", m: msg(sipscan.Invite, "a"), g: load{own: 3, takes: true}, lim: limits{perSocket: 3}, want: RefuseLimit},
		{name: "a group that takes no sessions has no group limit", m: msg(sipscan.Invite, "a"), g: load{own: 3}, lim: limits{perGroup: 3}, want: RefuseNone},
		{name: "queues over the threshold", m: msg(sipscan.Invite, "a"), g: load{usage: 51}, lim: limits{queue: 50}, want: RefuseQueue},
		{name: "queues at the threshold", m: msg(sipscan.Invite, "a"), g: load{usage: 50}, lim: limits{queue: 50}, want: RefuseNone},
		{name: "a queue delay over the bound", m: msg(sipscan.Invite, "a"), g: load{delay: 2 * time.Second}, lim: limits{delay: time.Second}, want: RefuseQueue},
		{name: "connections: the echo's wait is the queue delay", m: msg(sipscan.Invite, "a"),
			ownConns: true, lastRTT: 2 * time.Second, lim: limits{delay: time.Second}, want: RefuseQueue},
		{name: "datagrams: the echo's wait is not", m: msg(sipscan.Invite, "a"),
			lastRTT: 2 * time.Second, lim: limits{delay: time.Second}, want: RefuseNone},
		{name: "suspension is weighed before limits", m: msg(sipscan.Invite, "a"),
			sessions: counts{sipscan.KindCall: 10}, lim: limits{calls: 10}, suspended: true, want: RefuseSuspended},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.sessions
			a := newAdmission(t, &c, bindings{"live": true})
			l := a.Limits()
			l.MaxSessions.Store(tc.lim.sessions)
			l.MaxPerGroup.Store(tc.lim.perGroup)
			l.MaxPerSocket.Store(tc.lim.perSocket)
			l.MaxByKind[sipscan.KindCall].Store(tc.lim.calls)
			l.MaxByKind[sipscan.KindRegistration].Store(tc.lim.regs)
			l.MaxByKind[sipscan.KindSubscription].Store(tc.lim.subs)
			l.QueueAdmission.Store(tc.lim.queue)
			l.QueueDelay.Store(int64(tc.lim.delay))
			g := tc.g
			gate := a.NewGate(GateOptions{Name: "g", Group: &g, OwnConnections: tc.ownConns})
			gate.lastRTT.Store(tc.lastRTT)
			if tc.suspended {
				a.SuspendManually(time.Unix(1, 0))
			}
			if tc.stopping {
				a.Stop()
			}
			r, retry := a.Decide(gate, tc.m)
			if r != tc.want {
				t.Fatalf("want %v, have %v", tc.want, r)
			}
			// The configured Retry-After either way: of this refusal, or
			// of the door's own further on (no worker).
			if retry != 7 {
				t.Fatalf("%v with Retry-After %d: want the configured 7", r, retry)
			}
		})
	}
}

// OpenToAll holds only with every threshold under half of its value, so
// that sessions admitted between two evaluations cannot pass one; limits
// are Room's, queue delay each worker's.
func TestOpenToAll(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name      string
		sessions  counts
		g         load
		calls     int64
		queue     float64
		delay     time.Duration
		lastRTT   time.Duration
		throttle  bool
		suspended bool
		stopping  bool
		want      bool
	}{
		{name: "nothing set", g: load{takes: true, own: 1000}, want: true},
		{name: "suspended", suspended: true},
		{name: "stopping", stopping: true},
		{name: "limits are the quotas' matter", sessions: counts{sipscan.KindCall: 10}, calls: 10, want: true},
		{name: "queues under half the threshold", g: load{usage: 20}, queue: 50, want: true},
		{name: "queues over half the threshold", g: load{usage: 26}, queue: 50},
		{name: "a delay under the bound", g: load{delay: 100 * time.Millisecond}, delay: 250 * time.Millisecond, want: true},
		{name: "a delay over the bound is the workers' own matter", g: load{delay: 300 * time.Millisecond}, delay: 250 * time.Millisecond, want: true},
		{name: "echoes well under the throttle's threshold", throttle: true, lastRTT: 100 * time.Millisecond, want: true},
		{name: "echoes near the throttle's threshold", throttle: true, lastRTT: 600 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.sessions
			a := newAdmission(t, &c, nil)
			l := a.Limits()
			l.MaxByKind[sipscan.KindCall].Store(tc.calls)
			l.QueueAdmission.Store(tc.queue)
			l.QueueDelay.Store(int64(tc.delay))
			g := tc.g
			gate := a.NewGate(GateOptions{Name: "g", Group: &g,
				Throttle: throttle.Config{Threshold: time.Second, Count: 2, Step: 0.5, Enabled: tc.throttle}})
			gate.lastRTT.Store(tc.lastRTT)
			if tc.suspended {
				a.SuspendManually(time.Unix(1, 0))
			}
			if tc.stopping {
				a.Stop()
			}
			if got := a.OpenToAll(gate); got != tc.want {
				t.Fatalf("OpenToAll = %v, want %v", got, tc.want)
			}
		})
	}
	// A throttle that refuses a share closes the gate.
	a := newAdmission(t, &counts{}, nil)
	gate := a.NewGate(GateOptions{Name: "g", Group: &load{}, Throttle: throttle.Config{Threshold: time.Second, Count: 1, Step: 0.5, Enabled: true}})
	gate.Echoed(3 * time.Second)
	a.EchoTick(gate, 0, time.Unix(100, 0))
	if gate.Throttle().Share() == 0 {
		t.Fatal("the throttle did not tighten")
	}
	gate.lastRTT.Store(0)
	if a.OpenToAll(gate) {
		t.Fatal("open while the throttle refuses a share")
	}
}

// Room is the least of what every limit that applies to a kind leaves.
func TestRoom(t *testing.T) {
	t.Parallel()
	const U = Unlimited
	for _, tc := range []struct {
		name                                    string
		sessions                                counts
		g                                       load
		total, perGroup, perSocket, calls, regs int64
		want                                    [4]int64
	}{
		{name: "no limit", want: [4]int64{U, U, U, U}},
		{name: "calls", sessions: counts{0, 3, 0, 0}, calls: 10, want: [4]int64{U, 7, U, U}},
		{name: "calls at their limit", sessions: counts{0, 12, 0, 0}, calls: 10, want: [4]int64{U, 0, U, U}},
		{name: "max_sessions bounds calls and subscriptions", sessions: counts{5, 3, 2, 3}, total: 10, want: [4]int64{U, 4, U, 4}},
		{name: "the least limit wins", sessions: counts{0, 3, 2, 2}, total: 10, calls: 5, regs: 20, want: [4]int64{U, 2, 18, 5}},
		{name: "the group's own", g: load{takes: true, own: 6}, perGroup: 8, want: [4]int64{2, 2, U, 2}},
		{name: "the socket's own", g: load{takes: true, own: 6}, perSocket: 7, perGroup: 100, want: [4]int64{1, 1, U, 1}},
		{name: "registrations at their limit", sessions: counts{0, 0, 25, 0}, regs: 20, want: [4]int64{U, U, 0, U}},
		{name: "a group of no sessions", g: load{own: 6}, perGroup: 8, want: [4]int64{U, U, U, U}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := tc.sessions
			a := newAdmission(t, &c, nil)
			l := a.Limits()
			l.MaxSessions.Store(tc.total)
			l.MaxPerGroup.Store(tc.perGroup)
			l.MaxPerSocket.Store(tc.perSocket)
			l.MaxByKind[sipscan.KindCall].Store(tc.calls)
			l.MaxByKind[sipscan.KindRegistration].Store(tc.regs)
			g := tc.g
			if got := a.Room(a.NewGate(GateOptions{Name: "g", Group: &g})); got != tc.want {
				t.Fatalf("Room = %v, want %v", got, tc.want)
			}
		})
	}
}

// The RTT throttle refuses its share of new sessions once the echoes have
// been slow Count times in a row, and lifts once they are fast again.
func TestThrottleShare(t *testing.T) {
	t.Parallel()
	a := newAdmission(t, &counts{}, nil)
	g := &load{}
	gate := a.NewGate(GateOptions{Name: "udp", Group: g, Throttle: throttle.Config{Threshold: time.Second, Count: 2, Step: 0.5, Enabled: true}})
	timers := a.NewGate(GateOptions{Name: "timer", Group: g, NoSessions: true, Throttle: throttle.Config{Threshold: time.Second, Count: 2, Step: 0.5, Enabled: true}})
	if timers.Throttle() != nil {
		t.Fatal("a group that takes no sessions has no throttle")
	}
	now := time.Unix(100, 0)
	refused := func() int {
		n := 0
		for range 100 {
			if a.Admit(gate, msg(sipscan.Invite, "x")) == RefuseThrottle {
				n++
			}
		}
		return n
	}
	gate.Echoed(3 * time.Second)
	a.EchoTick(gate, 0, now)
	if n := refused(); n != 0 {
		t.Fatalf("after one slow echo: want none refused, have %d", n)
	}
	// An echo still unanswered counts with its age.
	a.EchoTick(gate, 2*time.Second, now)
	if n := refused(); n != 50 {
		t.Fatalf("after two slow echoes: want half refused, have %d of 100", n)
	}
	if gate.LastRTT() != 2*time.Second {
		t.Fatalf("last RTT %v, want the pending echo's 2s", gate.LastRTT())
	}
	a.EchoTick(gate, 0, now)
	a.EchoTick(gate, 0, now)
	if n := refused(); n != 0 {
		t.Fatalf("after two fast echoes: want the throttle lifted, have %d refused", n)
	}
	a.SetThrottle(throttle.Config{})
	if gate.Throttle() != nil || timers.Throttle() != nil {
		t.Fatal("a throttle switched off is removed from every group")
	}
}

// Auto-suspend follows the samples; the operator's suspension outlasts
// them; a probe of the server is refused while either holds.
func TestSuspendAndResume(t *testing.T) {
	t.Parallel()
	a := newAdmission(t, &counts{}, nil)
	t0 := time.Unix(1000, 0)
	over := watermark.Sample{watermark.SystemMemoryUsage: 90}
	under := watermark.Sample{watermark.SystemMemoryUsage: 60}
	between := watermark.Sample{watermark.SystemMemoryUsage: 80}
	steps := []struct {
		do        func()
		suspended bool
	}{
		{func() { a.Observe(under, t0) }, false},
		{func() { a.Observe(over, t0.Add(time.Second)) }, true},
		{func() { a.Observe(between, t0.Add(2*time.Second)) }, true},
		{func() { a.Observe(under, t0.Add(3*time.Second)) }, false},
		{func() { a.SuspendManually(t0.Add(4 * time.Second)) }, true},
		{func() { a.Observe(under, t0.Add(5*time.Second)) }, true},
		{func() {
			if err := a.ResumeManually(t0.Add(6 * time.Second)); err != nil {
				t.Fatal(err)
			}
		}, false},
		{func() { a.Observe(over, t0.Add(7*time.Second)) }, true},
		// Auto-suspend switched off releases what a monitor held.
		{func() { a.SetAutoSuspend(false); a.Observe(over, t0.Add(8*time.Second)) }, false},
	}
	for i, s := range steps {
		s.do()
		if a.Suspended() != s.suspended {
			t.Fatalf("step %d: suspended %v, want %v", i, a.Suspended(), s.suspended)
		}
		refuse, retry := a.ProbeRefused()
		if refuse != s.suspended || refuse && retry != 7 {
			t.Fatalf("step %d: probe refused %v (Retry-After %d), want %v", i, refuse, retry, s.suspended)
		}
	}
	if err := a.ResumeManually(t0.Add(9 * time.Second)); err == nil {
		t.Fatal("resume without the operator's suspension: want an error")
	}
	// The first suspension is the component's first reading; each change
	// after it is a flip: resumed, suspended by hand, resumed, suspended,
	// released.
	if n := a.Flips().Counts(t0.Add(10 * time.Second))["suspend"]; n != 5 {
		t.Fatalf("want 5 flips of suspend, have %d", n)
	}
}

// A watermark set at run time must leave its pair valid.
func TestSetMark(t *testing.T) {
	t.Parallel()
	a := newAdmission(t, &counts{}, nil)
	if err := a.SetMark(watermark.SystemMemoryUsage, "low", 90); err == nil || !strings.Contains(err.Error(), "raise the high watermark first") {
		t.Fatalf("low over high: want refused with a hint, have %v", err)
	}
	if err := a.SetMark(watermark.SystemMemoryUsage, "high", 95); err != nil {
		t.Fatal(err)
	}
	if p := a.Marks()[watermark.SystemMemoryUsage]; p.High != 95 || p.Low != 70 {
		t.Fatalf("marks %+v, want high 95 low 70", p)
	}
}

// A crash and its restart are two flips of the group's health.
func TestWorkerCrashesFlipHealth(t *testing.T) {
	t.Parallel()
	a := newAdmission(t, &counts{}, nil)
	now := time.Unix(1000, 0)
	a.WorkersStarted("udp", now)
	for i := range 5 {
		if ok, _ := a.Healthy(now); !ok {
			t.Fatalf("after %d crashes: unhealthy already", i)
		}
		a.WorkerCrashed("udp", now)
	}
	ok, reason := a.Healthy(now)
	if ok || !strings.Contains(reason, "workers/udp flipped 10 times") {
		t.Fatalf("after 5 crashes: want unhealthy for 10 flips, have %v %q", ok, reason)
	}
}

type lines struct{ warn []string }

func (l *lines) Info(string, ...any)       {}
func (l *lines) Warn(msg string, _ ...any) { l.warn = append(l.warn, msg) }

// A registrar at max_registrations refuses every new phone: the log tells
// of it once per RefusalLogEvery, not once per REGISTER.
func TestRegistrationsFullLoggedOnce(t *testing.T) {
	t.Parallel()
	log := &lines{}
	c := counts{sipscan.KindRegistration: 5}
	a := New(prometheus.NewRegistry(), Inputs{Sessions: &c, Registrations: bindings{}, RetryAfter: func() int { return 7 }, Log: log},
		Settings{Marks: watermark.Defaults()})
	a.Limits().MaxByKind[sipscan.KindRegistration].Store(5)
	gate := a.NewGate(GateOptions{Name: "g", Group: &load{takes: true}})
	for range 100 {
		r := a.Admit(gate, msg(sipscan.Register, "new"))
		if r != RefuseRegistrations {
			t.Fatalf("want %v, have %v", RefuseRegistrations, r)
		}
		a.Refused("door", r, ClassRegister, sipscan.KindRegistration)
	}
	if len(log.warn) != 1 || !strings.Contains(log.warn[0], "max_registrations") {
		t.Fatalf("want one line naming max_registrations, have %q", log.warn)
	}
	if n := a.refusals.by[RefuseRegistrations].skipped.Load(); n != 99 {
		t.Fatalf("want the 99 refusals since counted for the next line, have %d", n)
	}
}

// Every series of admission's counters exists from the start at 0, so that
// the first event is an increase, and the operator's suspension counts.
func TestSeriesFromStart(t *testing.T) {
	t.Parallel()
	a := newAdmission(t, &counts{}, nil)
	a.NewGate(GateOptions{Name: "udp", Group: &load{takes: true}, Throttle: throttle.Config{Threshold: time.Second, Count: 2, Step: 0.5, Enabled: true}})
	for _, c := range []struct {
		vec   *prometheus.CounterVec
		label string
		want  float64
	}{
		{a.m.suspensions, "operator", 0},
		{a.m.suspensions, string(watermark.NumberOfSessions), 0},
	} {
		if n := testutil.CollectAndCount(c.vec); n < 2 {
			t.Fatalf("want a series per reason from the start, have %d", n)
		}
		if v := testutil.ToFloat64(c.vec.WithLabelValues(c.label)); v != c.want {
			t.Errorf("%s: want %v, have %v", c.label, c.want, v)
		}
	}
	for _, g := range []*prometheus.GaugeVec{a.m.share, a.m.rtt, a.m.value, a.m.flips} {
		if testutil.CollectAndCount(g) == 0 {
			t.Errorf("a gauge with no series at start")
		}
	}
	a.SuspendManually(time.Unix(1, 0))
	if v := testutil.ToFloat64(a.m.suspensions.WithLabelValues("operator")); v != 1 {
		t.Errorf("suspensions{operator} after ctl suspend: want 1, have %v", v)
	}
}
