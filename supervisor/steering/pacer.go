package steering

import (
	"sync/atomic"
	"time"
)

// pacer is what a Port and a Stream share about when they refresh: the
// refreshes asked for, the pace the last refresh set, and the closed state
// of admission it found, which tells whether a change asks for another.
type pacer struct {
	kick   chan struct{}
	pace   atomic.Int64
	closed atomic.Pointer[string]
}

// init readies p: no refresh asked for, the quick pace until the first.
func (p *pacer) init() {
	p.kick = make(chan struct{}, 1)
	p.pace.Store(int64(Every))
}

// Poke asks for a refresh soon; it never blocks (pool.GroupOptions.OnRoutable).
func (p *pacer) Poke() {
	select {
	case p.kick <- struct{}{}:
	default:
	}
}

// Poked delivers the refreshes asked for.
func (p *pacer) Poked() <-chan struct{} { return p.kick }

// Pace is the time to the next refresh no event asks for, as the last
// refresh set it.
func (p *pacer) Pace() time.Duration { return time.Duration(p.pace.Load()) }

// NoteClosed asks for a refresh if admission's closed state is no longer
// the one the last refresh found (the throttle, which moves at its echo).
func (p *pacer) NoteClosed(closed string) {
	if c := p.closed.Load(); c == nil || *c != closed {
		p.Poke()
	}
}

// found notes the closed state a refresh found.
func (p *pacer) found(closed string) {
	if c := p.closed.Load(); c == nil || *c != closed {
		p.closed.Store(&closed)
	}
}
