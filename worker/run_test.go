package worker

import (
	"errors"
	"net"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/wire"
)

type idle struct{}

func (idle) HandleMessage(*Message) {}
func (idle) HandleJob(string)       {}
func (idle) HandleConn(c net.Conn)  { c.Close() }
func (idle) Tick(time.Time)         {}
func (idle) Held() int              { return 0 }

func TestRunRefusedByHand(t *testing.T) {
	t.Setenv(wire.EnvCookie, "")
	err := Run(t.Context(), nil, func(*Env) (Handler, error) { return idle{}, nil })
	if !errors.Is(err, ErrNotChild) {
		t.Fatalf("want %v, have %v", ErrNotChild, err)
	}
}

type fixedTimer struct {
	at time.Time
	ok bool
}

func (f fixedTimer) NextTimer() (time.Time, bool) { return f.at, f.ok }

func TestNextTick(t *testing.T) {
	t.Parallel()
	now := time.Unix(1000, 0)
	for _, c := range []struct {
		name  string
		timer Timed
		want  time.Duration // after now
	}{
		{"no timer: sleep the idle wait", fixedTimer{}, idleWait},
		{"timer in 300 ms", fixedTimer{now.Add(300 * time.Millisecond), true}, 300 * time.Millisecond},
		{"timer overdue: one grain on", fixedTimer{now.Add(-time.Second), true}, tickEvery},
		{"timer within the grain: the grain", fixedTimer{now.Add(10 * time.Millisecond), true}, tickEvery},
		{"timer beyond the idle wait: the idle wait", fixedTimer{now.Add(time.Minute), true}, idleWait},
		{"handler without timers: every grain", tickTimed{}, tickEvery},
	} {
		w := &workerLoop{timed: c.timer}
		if have := w.nextTick(now).Sub(now); have != c.want {
			t.Errorf("%s: want %v, have %v", c.name, c.want, have)
		}
	}
}

func TestEchoRunsTick(t *testing.T) {
	t.Parallel()
	last := time.Unix(1000, 0)
	for _, c := range []struct {
		name  string
		after time.Duration
		want  bool
	}{
		{"a second after the last tick", time.Second, true},
		{"an echo a little early", 800 * time.Millisecond, true},
		{"long after: the tick's own wake-up did not come", idleWait, true},
		{"half a second after: the tick ran for a timer", 500 * time.Millisecond, false},
		{"right after a tick under load", tickEvery, false},
	} {
		if have := echoRunsTick(last.Add(c.after), last); have != c.want {
			t.Errorf("%s: want %v, have %v", c.name, c.want, have)
		}
	}
}

func TestCatchUpFirst(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, c := range []struct {
		name   string
		next   time.Time
		caught bool
		want   bool
	}{
		{"due now", now, false, false},
		{"late by a grain: a busy loop", now.Add(-tickEvery), false, false},
		{"late by more: stalled", now.Add(-tickEvery - time.Millisecond), false, true},
		{"stalled long", now.Add(-time.Minute), false, true},
		{"the tick put off already: it runs", now.Add(-time.Minute), true, false},
	} {
		if got := catchUpFirst(now, c.next, c.caught); got != c.want {
			t.Errorf("%s: catchUpFirst = %v, want %v", c.name, got, c.want)
		}
	}
}
