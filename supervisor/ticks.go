package supervisor

import "time"

// ticks wakes a periodic loop of the supervisor at whole multiples of its
// period since the epoch, so that loops whose periods divide one another
// (the cycle, the echoes, the steering, the count of bindings, at their
// defaults) wake together: an idle server's runtime then wakes once for
// all of them, and each wake-up of a Go process costs its scheduler and
// monitor thread more than the work it runs. Ticks keep a steady period: a
// slow round does not push the next one later, it skips those it overran.
type ticks struct {
	*time.Timer
	next time.Time
}

func newTicks(period time.Duration) *ticks {
	k := &ticks{next: tickAfter(time.Now(), period)}
	k.Timer = time.NewTimer(time.Until(k.next))
	return k
}

// arm sets the next tick of period: after the one that fired, if fired,
// else (the period changed, or the loop ran for another reason) after now.
// A timer runs by the monotonic clock and a tick is placed by the wall
// clock, which may be a little behind when the timer fires: the tick after
// the one that fired, not after now, is never the same one again.
func (k *ticks) arm(period time.Duration, fired bool) {
	k.next = nextTick(time.Now(), k.next, period, fired)
	k.Reset(time.Until(k.next))
}

// nextTick is the tick of period to arm at now, last the one armed before.
func nextTick(now, last time.Time, period time.Duration, fired bool) time.Time {
	if fired && now.Before(last) {
		now = last
	}
	return tickAfter(now, period)
}

// tickAfter is the first whole multiple of period since the epoch after t.
func tickAfter(t time.Time, period time.Duration) time.Time {
	if period <= 0 {
		return t
	}
	p := int64(period)
	return time.Unix(0, (t.UnixNano()/p+1)*p)
}
