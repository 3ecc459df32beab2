package steering

import (
	"math"
	"slices"
	"time"

	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/listeners/steer"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/overload/sessions"
)

// Kinds is the number of kinds of new session a worker has a quota of
// (sipscan.Kind order), the length of overload.Admission.Room.
const Kinds = 4

// Inputs is what a refresh weighs, read at one instant: admission's state,
// the group's workers and the members of the port's group, what the door
// did since the last refresh, and the state the last refresh left.
type Inputs struct {
	Now time.Time
	// Closed is why admission is not open to all but for the session
	// limits (overload.Admission.Closed), "" when it is.
	Closed string
	// ProbesRefused is overload.Admission.ProbeRefused: the server refuses
	// every new session. RetryAfter is the refusals' Retry-After, seconds.
	ProbesRefused bool
	RetryAfter    int
	// RetryAfterDrawn: the Retry-After is drawn from a range, anew at
	// each refresh, so that clients refused in one second do not all
	// come back in one.
	RetryAfterDrawn bool
	// QueueDelay (queue_delay_admission) and MaxCallDuration are written
	// as they are into every worker's page, in ns.
	QueueDelay, MaxCallDuration uint64
	// Room is overload.Admission.Room: the new sessions of each kind the
	// limits let the group admit now.
	Room [Kinds]int64
	// QueueAdmission is set while queue admission is on: the queues' fill
	// moves with every session, as the room does under a limit.
	QueueAdmission bool
	// Ramps is how many of the group's workers are in slow start.
	Ramps int
	// HandedOver is set once the supervisor has handed the node to the
	// next generation at an upgrade: its admission stops, but a new
	// session its workers still read (what their sockets held) is no
	// more refused for that than a draining worker's is.
	HandedOver bool
	// Workers are the group's workers, each with a page, whatever their
	// state.
	Workers []Worker
	// Slots are the member sockets of the port's group: slot i is member
	// i+1.
	Slots []Slot
	// Placed is, by bucket, when the door last placed a message of it on
	// the bucket's worker, and Fresh when it last placed a new session of
	// it on another worker (unix ns).
	Placed, Fresh [steer.Buckets]int64
	// ViewGen is the table generation of the view the door reads.
	ViewGen int
	Last    State
}

// Worker is one of the group's workers as a refresh sees it.
type Worker struct {
	ID int
	// Admitted is how many new sessions of each kind its door has
	// admitted (wire.OffDoorAdmitted).
	Admitted [Kinds]uint64
	// Sent is the table generation it was last sent, 0 for none.
	Sent int
}

// Slot is one member socket of the port's group.
type Slot struct {
	// Worker is the worker that holds it, 0 for none: free, closing, or
	// its worker exited.
	Worker int
	// Ready is whether that worker is ready: only a ready worker's socket
	// is given buckets.
	Ready bool
}

// State is what one refresh leaves the next. Its zero value is the state
// before the first refresh: every bucket the door's.
type State struct {
	// Refreshed is set once a refresh has run; Closed is the admission's
	// closed state it found, ChangedAt when that, the table or the
	// buckets' freshness last changed (the pace settles after it).
	Refreshed bool
	Closed    string
	ChangedAt time.Time
	// OpenSince is when the gate was last seen to open (or the group to
	// be suspended), zero while it is closed otherwise: datagrams go to
	// the workers only after it has been so a while, so that a gate near a
	// threshold does not move buckets back and forth.
	OpenSince time.Time
	// Shadow is each bucket's member; Table is the program's: Shadow while
	// datagrams go to the workers, all the door's (0) otherwise.
	Shadow, Table steer.Table
	// Since is when each bucket was given to its member (unix ns).
	Since [steer.Buckets]int64
	// Prev is the worker that had each bucket before it moved, while a
	// pending INVITE of it may live there.
	Prev [steer.Buckets]Prev
	// Gen is the table's generation: the workers are sent each one once.
	Gen int
	// Direct is whether datagrams go to the workers, and DirectAt when
	// they last did (unix ns).
	Direct   bool
	DirectAt int64
	// SentFresh is the buckets' freshness as the workers were last sent
	// it.
	SentFresh [steer.Buckets]int64
}

// Prev is the worker that had a bucket before it moved, until when.
type Prev struct {
	Worker int
	Until  int64 // unix ns
}

// Actions is what a refresh does, in order: write every worker's page,
// note the buckets that moved away from a worker holding calls, install a
// program, publish the door's view, send the table.
type Actions struct {
	// Gate, QueueDelay and MaxCallDuration are the words every worker's
	// page is given; Quotas each worker's quota by kind, in the order of
	// Inputs.Workers.
	Gate, QueueDelay, MaxCallDuration uint64
	Quotas                            [][Kinds]uint64
	// Fresh are the buckets that moved from a worker that may hold calls
	// of them: the door marks them fresh (Inputs.Fresh) at Now.
	Fresh []int
	// Attach is set when the program changes: Table's, or the door's
	// program (every datagram to the supervisor) when Why says why
	// datagrams go to the door.
	Attach bool
	Table  steer.Table
	Why    string
	// Publish is set when the door's view changes; Members is then how
	// many workers the program places datagrams on.
	Publish bool
	Members int
	// Frame is the table to send to the workers SendTo (IDs), nil when
	// none needs it.
	Frame  []byte
	SendTo []int
	// Pace is the time to the next refresh no event asks for.
	Pace time.Duration
	// Next is the state once the actions are done.
	Next State
}

// Plan decides a refresh: the gate and quotas each worker's page gets,
// where the buckets go, which program the kernel runs and who is sent the
// table. It does no I/O; Port.Refresh reads the inputs and applies it.
//
// Rule: the program spreads datagrams over the workers only while
// admission is open to all but for the session limits (which the quotas
// keep) and no worker is in slow start; otherwise every datagram goes to
// the supervisor's door as without direct reads, so refusals and ramps are
// decided where they always were. The buckets' members are kept either
// way, since the door places new sessions by them while no worker ramps: a
// switch moves no call.
func Plan(in Inputs) Actions {
	last, next := in.Last, in.Last
	now, nowNs := in.Now, in.Now.UnixNano()
	if !last.Refreshed || last.Closed != in.Closed {
		next.Refreshed, next.Closed, next.ChangedAt = true, in.Closed, now
	}
	open := in.Closed == ""
	a := Actions{MaxCallDuration: in.MaxCallDuration}
	limited := gateWords(in, &a)

	// A suspended group's workers read on: they refuse new sessions
	// themselves (wire.GateRefuseAll), without the supervisor's hop.
	switch readable := open || in.Closed == overload.ClosedSuspended; {
	case !readable:
		next.OpenSince = time.Time{}
	case next.OpenSince.IsZero():
		next.OpenSince = now
	}
	var members []uint8
	for i, sl := range in.Slots {
		if sl.Worker != 0 && sl.Ready {
			members = append(members, uint8(i+1))
		}
	}
	fresh := in.Fresh
	if shadow := assignBuckets(last.Shadow, members); shadow != last.Shadow {
		for b := range shadow {
			if shadow[b] == last.Shadow[b] {
				continue
			}
			// The worker that had the bucket holds calls of it only if
			// datagrams went to it or the door placed some there.
			if old := last.Shadow[b]; old != 0 && (last.DirectAt >= last.Since[b] || in.Placed[b] >= last.Since[b]) {
				prev := 0
				if int(old) <= len(in.Slots) {
					prev = in.Slots[old-1].Worker
				}
				next.Prev[b] = Prev{Worker: prev, Until: nowNs + int64(sessions.PendingInvite)}
				a.Fresh = append(a.Fresh, b)
				fresh[b] = nowNs
			}
			next.Since[b] = nowNs
		}
		next.Shadow = shadow
		next.Gen++
		next.ChangedAt = now
	}

	why := directBlocked(in.Closed, len(members), in.Ramps, now.Sub(next.OpenSince))
	if in.HandedOver {
		why = "handed over"
	}
	var table steer.Table
	if why == "" {
		table = next.Shadow
	}
	if last.Direct || why == "" {
		next.DirectAt = nowNs
	}
	if table != last.Table {
		a.Attach, a.Table, a.Why = true, table, why
		next.Table, next.Direct, next.ChangedAt = table, why == "", now
	}
	// Workers read the buckets' freshness only while datagrams go to them.
	if next.Direct && fresh != last.SentFresh {
		next.Gen++
		next.ChangedAt = now
	}
	if a.Attach || in.ViewGen != next.Gen {
		a.Publish = true
		if next.Direct {
			a.Members = len(members)
		}
	}
	// Every worker learns the table once per change, a new one at its
	// first refresh.
	for _, w := range in.Workers {
		if w.Sent != next.Gen || next.Gen == 0 {
			a.SendTo = append(a.SendTo, w.ID)
		}
	}
	if len(a.SendTo) > 0 {
		a.Frame = wire.SteerFrame(next.Shadow[:], next.Since[:], fresh[:])
		next.SentFresh = fresh
	}
	a.Pace = pace(in.Closed, in.RetryAfterDrawn, limited, next.Direct, now.Sub(next.ChangedAt))
	a.Next = next
	return a
}

// gateWords sets a's gate, queue delay and quotas, the words of every
// worker that admits by itself, and reports whether a session limit or
// queue admission is set.
func gateWords(in Inputs, a *Actions) (limited bool) {
	a.Gate, a.QueueDelay = wire.Gate(in.Closed == "", in.ProbesRefused, in.RetryAfter), in.QueueDelay
	if in.ProbesRefused {
		// Suspended or stopping: every new session is refused, and the
		// workers need not ask to refuse one.
		a.Gate |= wire.GateRefuseAll
	}
	if in.HandedOver {
		// Handed over: a worker reading what its socket or connection
		// still held before its drain asks about each new session, which
		// the supervisor admits (the next generation weighs the node's
		// load, not the old workers' queues).
		a.Gate, a.QueueDelay = wire.Gate(false, false, in.RetryAfter), 0
	}
	limited = in.QueueAdmission
	for _, r := range in.Room {
		limited = limited || r != overload.Unlimited
	}
	a.Quotas = make([][Kinds]uint64, len(in.Workers))
	for i, w := range in.Workers {
		for k, r := range in.Room {
			a.Quotas[i][k] = quota(w.Admitted[k], r, len(in.Workers))
		}
	}
	return limited
}

// PlanStream decides a refresh of a group whose workers read connections
// (TCP, TLS, WebSocket): the gate and quotas of each worker's page, as
// Plan decides them for a port's, and the pace. Such a worker admits the
// new sessions it reads by the words as a worker reading its own socket
// does, and asks the supervisor beyond them; which worker holds a
// connection the supervisor decides at accept, so there is no table.
func PlanStream(in Inputs) Actions {
	var a Actions
	limited := gateWords(in, &a)
	a.Next = in.Last
	if !in.Last.Refreshed || in.Last.Closed != in.Closed {
		a.Next.Refreshed, a.Next.Closed, a.Next.ChangedAt = true, in.Closed, in.Now
	}
	a.Pace = quiet
	if changing(in.Closed, in.RetryAfterDrawn) || limited || in.Now.Sub(a.Next.ChangedAt) < settle {
		a.Pace = Every
	}
	return a
}

// directAfter is how long the gate must stay open before datagrams go to
// the workers again.
const directAfter = time.Second

// directBlocked is why datagrams go to the supervisor's door, not to the
// workers, or "" if nothing keeps them from the workers: closed is why
// admission is closed ("" if open), members the ready workers, ramps those
// still in slow start, readableFor how long admission has been open or
// suspended. A closed admission sends them to the door, which decides
// each new session, but a suspension, which refuses every one: the workers
// refuse them as the door would (wire.GateRefuseAll).
func directBlocked(closed string, members, ramps int, readableFor time.Duration) string {
	switch {
	case closed != "" && closed != overload.ClosedSuspended:
		return closed
	case members == 0:
		return "no ready worker"
	case ramps > 0:
		return "slow start"
	case readableFor < directAfter:
		return "admission just opened"
	}
	return ""
}

// Every is how often the gate is evaluated when nothing else asks while
// it may change by itself: the longest a worker admits by itself after a
// limit comes near.
const Every = 100 * time.Millisecond

// quiet is how often it is evaluated while nothing in it changes but by an
// event that asks for a refresh at once (a worker's state, admission
// opening or closing, a setting, the throttle at its echo): an idle
// server's supervisor then wakes a few times a second rather than ten.
const quiet = time.Second

// settle is how long after the last change of the table, the gate or the
// buckets' freshness the refresh keeps to Every.
const settle = 5 * time.Second

// pace is the time to the next refresh no event asks for: closed is why
// admission is closed ("" if open), drawn whether the Retry-After is
// drawn from a range, limited whether a session limit or
// queue admission is set (the quotas and the queues' fill move with every
// session), direct whether datagrams go to the workers (until they do,
// directAfter or a ramp runs out by the clock), sinceChange the time since
// the table, the gate or the freshness last changed.
func pace(closed string, drawn, limited, direct bool, sinceChange time.Duration) time.Duration {
	if changing(closed, drawn) || limited || !direct || sinceChange < settle {
		return Every
	}
	return quiet
}

// changing reports whether a closed admission (closed, "" if open) may
// change what the workers' pages say without an event: the throttle and
// a stop move by themselves, and a Retry-After drawn from a range is drawn
// again at each refresh. A suspension ends by an event (ctl resume, or the
// watermarks at the echo's tick, which notes a change of closed), and
// refreshing it ten times a second took a suspended server's supervisor
// from 1.6 to 4.6 ms of CPU a second (bench/profile.sh --kind idle).
func changing(closed string, drawn bool) bool {
	return closed != "" && (closed != overload.ClosedSuspended || drawn)
}

// quota is a worker's OffQuota word for a kind of which it has admitted
// admitted sessions, when the limits leave room for that many more among n
// workers: half the room, shared out, so that what the workers admit before
// the next refresh cannot pass a limit; the rest is decided by asking.
func quota(admitted uint64, room int64, n int) uint64 {
	if room == overload.Unlimited {
		return math.MaxUint64
	}
	return admitted + uint64(room/int64(2*max(n, 1)))
}

// assignBuckets places the buckets on members (member numbers of the
// port's group), evenly, moving as few as it can from prev: a bucket stays
// where it is while its member is there and under its share. With no
// members every bucket is the door's (0).
func assignBuckets(prev steer.Table, members []uint8) steer.Table {
	var t steer.Table
	if len(members) == 0 {
		return t
	}
	members = slices.Sorted(slices.Values(members))
	quota := make(map[uint8]int, len(members))
	for i, m := range members {
		quota[m] = steer.Buckets / len(members)
		if i < steer.Buckets%len(members) {
			quota[m]++
		}
	}
	var free []int
	for b, m := range prev {
		if quota[m] > 0 {
			t[b] = m
			quota[m]--
			continue
		}
		free = append(free, b)
	}
	for _, m := range members {
		for ; quota[m] > 0; quota[m]-- {
			t[free[0]] = m
			free = free[1:]
		}
	}
	return t
}
