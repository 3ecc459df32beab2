package overload

import (
	"sync/atomic"
	"time"

	"github.com/sipvisor/sipvisor/internal/sipscan"
)

// Refusal is why a new session was turned away; RefuseNone admits it.
type Refusal uint8

// Reasons for refusing a new session. RefuseNoWorker is the front door's
// own: admission let the session in and no worker could take it.
// RefuseRegistrations is a REGISTER that would add a binding past
// max_registrations. A worker publishes its counts by reason in 8 words
// (wire.OffDoorRefused): there is room for one more.
const (
	RefuseNone Refusal = iota
	RefuseSuspended
	RefuseLimit
	RefuseQueue
	RefuseThrottle
	RefuseNoWorker
	RefuseRegistrations
	NumRefusals
)

var refusalNames = [NumRefusals]string{"none", "suspended", "limit", "queue", "throttle", "no_worker", "max_registrations"}

func (r Refusal) String() string {
	if r < NumRefusals {
		return refusalNames[r]
	}
	return "unknown"
}

// RefusalLogEvery is the least time between two log lines of refusals for
// one reason: a server at a limit refuses every new session, and one line
// per refusal would flood the log. Each line says how many were refused
// since the last one.
const RefusalLogEvery = 10 * time.Second

// RefusalLog paces the log lines of refusals, one pace per reason, so that
// no refusal goes untold and none floods the log. Every entry point that
// refuses (the supervisor's doors and answers, a worker's own door) keeps
// one. Safe for concurrent use.
type RefusalLog struct {
	by [NumRefusals]Pacer
}

// Pacer paces the log lines of one kind of event: at most one every
// RefusalLogEvery, counting the events it held back. Safe for concurrent
// use.
type Pacer struct {
	last    atomic.Int64 // unix ns of the last line
	skipped atomic.Int64
}

// Line reports whether this event gets a log line now, and then how many
// events the line tells of: this one and those held back since the last.
func (p *Pacer) Line() (ok bool, n int64) {
	now := time.Now().UnixNano()
	last := p.last.Load()
	if now-last < int64(RefusalLogEvery) || !p.last.CompareAndSwap(last, now) {
		p.skipped.Add(1)
		return false, 0
	}
	return true, p.skipped.Swap(0) + 1
}

// Note tells of one refusal: where (the entry point), why, of what. It
// logs a line unless one for the same reason was logged within
// RefusalLogEvery; detail adds key-value pairs to the line.
func (l *RefusalLog) Note(log Logger, where string, r Refusal, c Class, k sipscan.Kind, detail ...any) {
	if log == nil || r >= NumRefusals {
		return
	}
	ok, n := l.by[r].Line()
	if !ok {
		return
	}
	if r == RefuseRegistrations {
		log.Warn("new registration refused: the location store holds max_registrations bindings; refreshes and removals still pass",
			append([]any{"event", "registrations_full", "where", where, "refused_since_last_line", n}, detail...)...)
		return
	}
	what := "new session refused"
	if c == ClassProbe {
		what = "probe of the server refused: every new session is"
	}
	log.Warn(what, append([]any{"event", "refused", "reason", r.String(), "class", c.String(), "kind", k.String(),
		"where", where, "refused_since_last_line", n}, detail...)...)
}
