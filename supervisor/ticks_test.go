package supervisor

import (
	"testing"
	"time"
)

func TestTickAfter(t *testing.T) {
	sec := time.Unix(1_700_000_000, 0)
	for _, c := range []struct {
		name   string
		t      time.Time
		period time.Duration
		want   time.Time
	}{
		{"on a whole second: the next one", sec, time.Second, sec.Add(time.Second)},
		{"just after one", sec.Add(time.Microsecond), time.Second, sec.Add(time.Second)},
		{"just before one", sec.Add(-time.Millisecond), time.Second, sec},
		{"a tenth: the next tenth", sec.Add(250 * time.Millisecond), 100 * time.Millisecond, sec.Add(300 * time.Millisecond)},
		{"5 s: the next multiple of 5 s since the epoch", sec.Add(2 * time.Second), 5 * time.Second, sec.Add(5 * time.Second)},
		{"no period: now", sec.Add(time.Millisecond), 0, sec.Add(time.Millisecond)},
	} {
		if got := tickAfter(c.t, c.period); !got.Equal(c.want) {
			t.Errorf("%s: want %v, have %v", c.name, c.want, got)
		}
	}
	// Periods that divide one another meet: the next whole second is also
	// a tenth's tick, so the loops at their defaults wake together.
	now := sec.Add(937 * time.Millisecond)
	at := tickAfter(now, time.Second)
	if got := tickAfter(at.Add(-time.Nanosecond), 100*time.Millisecond); !got.Equal(at) {
		t.Errorf("the second's tick %v is not a tenth's: the tenth's is %v", at, got)
	}
}

func TestNextTick(t *testing.T) {
	sec := time.Unix(1_700_000_000, 0)
	for _, c := range []struct {
		name      string
		now, last time.Time
		period    time.Duration
		fired     bool
		want      time.Time
	}{
		{"fired on its tick", sec.Add(50 * time.Microsecond), sec, time.Second, true, sec.Add(time.Second)},
		// The timer ran by the monotonic clock; the wall clock is a little
		// behind: the same tick must not be armed again.
		{"fired with the wall clock just short of its tick", sec.Add(-10 * time.Microsecond), sec, time.Second, true, sec.Add(time.Second)},
		{"fired after a round that overran two ticks", sec.Add(2500 * time.Millisecond), sec, time.Second, true, sec.Add(3 * time.Second)},
		{"not fired (a kick): after now, even before the tick armed", sec.Add(200 * time.Millisecond), sec.Add(time.Second), 100 * time.Millisecond, false, sec.Add(300 * time.Millisecond)},
		{"not fired, the period lengthened", sec.Add(200 * time.Millisecond), sec.Add(300 * time.Millisecond), time.Second, false, sec.Add(time.Second)},
	} {
		if got := nextTick(c.now, c.last, c.period, c.fired); !got.Equal(c.want) {
			t.Errorf("%s: want %v, have %v", c.name, c.want, got)
		}
	}
}
