package overload

import (
	"sync/atomic"
	"time"

	uatomic "go.uber.org/atomic"

	"github.com/sipvisor/sipvisor/overload/throttle"
)

// Group is what admission weighs of one worker group.
type Group interface {
	// Sessions is the sessions in progress that came in through the group
	// (its door's, or for the TCP group those over connections): what the
	// per-group and per-socket limits count. ok is false for a group that
	// takes none.
	Sessions() (n int64, ok bool)
	// QueueUsage is the share, in percent, of the queues of the group's
	// workers that take new work that is in use.
	QueueUsage() float64
	// QueueDelay is how long a new message would wait in the least waiting
	// of those queues.
	QueueDelay() time.Duration
}

// Gate is one group's admission state: the group it weighs, its RTT
// throttle and the round trips its echoes measured.
type Gate struct {
	name  string
	group Group
	// ownConns: the group's workers read their own connections (TCP).
	ownConns bool
	// throttles: the group takes sessions, so a throttle may refuse some.
	throttles bool

	// throttle is nil when switched off. admitted numbers the group's new
	// sessions for Throttle.Admit; worstRTT is the worst echo round trip
	// since the last echo tick, lastRTT the worst of the last interval.
	throttle atomic.Pointer[throttle.Throttle]
	admitted atomic.Uint64
	worstRTT uatomic.Duration
	lastRTT  uatomic.Duration
}

// GateOptions describe a group to admission.
type GateOptions struct {
	Name  string
	Group Group
	// OwnConnections: the group's workers read their own connections, so
	// no queue of the supervisor's holds what waits for them.
	OwnConnections bool
	// NoSessions: the group takes no sessions (timers): nothing to
	// throttle.
	NoSessions bool
	Throttle   throttle.Config
}

// NewGate makes a group's gate.
func (a *Admission) NewGate(o GateOptions) *Gate {
	g := &Gate{name: o.Name, group: o.Group, ownConns: o.OwnConnections, throttles: !o.NoSessions}
	if g.throttles {
		g.setThrottle(o.Throttle)
		// The group's series exist from the start, at 0, for the alerts
		// that read them.
		a.m.share.WithLabelValues(g.name)
		a.m.rtt.WithLabelValues(g.name)
		a.m.flips.WithLabelValues("throttle/" + g.name)
	}
	a.m.flips.WithLabelValues("workers/" + g.name)
	a.mu.Lock()
	a.gates = append(a.gates, g)
	a.mu.Unlock()
	return g
}

func (g *Gate) setThrottle(c throttle.Config) {
	if !c.Enabled {
		g.throttle.Store(nil)
		return
	}
	g.throttle.Store(throttle.New(c))
}

// Name is the group's.
func (g *Gate) Name() string { return g.name }

// Throttle is the group's throttle, nil when switched off.
func (g *Gate) Throttle() *throttle.Throttle { return g.throttle.Load() }

// Pass draws whether the group's next new session passes its RTT
// throttle (Throttler): every session that reaches the throttle takes the
// next number of its pattern.
func (g *Gate) Pass() bool {
	t := g.throttle.Load()
	return t == nil || t.Admit(g.admitted.Add(1))
}

// LastRTT is the worst echo round trip of the last echo interval.
func (g *Gate) LastRTT() time.Duration { return g.lastRTT.Load() }

// Echoed takes one echo's round trip.
func (g *Gate) Echoed(rtt time.Duration) {
	for {
		old := g.worstRTT.Load()
		if rtt <= old || g.worstRTT.CompareAndSwap(old, rtt) {
			return
		}
	}
}

// QueueDelay is how long new work waits for the group. Workers that read
// their own connections (TCP) get messages from no queue of the
// supervisor's: how long they take to come to new work is what an echo,
// queued behind the messages they have read, waits for them.
func (g *Gate) QueueDelay() time.Duration {
	d := g.group.QueueDelay()
	if g.ownConns {
		d = max(d, g.lastRTT.Load())
	}
	return d
}
