package pool

import "testing"

// Every (state, event) pair, so that a new state or event cannot be added
// without deciding what it does everywhere.
func TestNext(t *testing.T) {
	t.Parallel()
	type row struct {
		s      State
		e      Event
		want   State
		action Action
	}
	rows := []row{
		{Spawning, EvReady, Ready, None},
		{Spawning, EvReadyTimeout, Draining, Kill},
		{Spawning, EvDrain, Draining, Kill},
		{Spawning, EvDrainDeadline, Spawning, None},
		{Spawning, EvExit, Exited, Replace},

		{Ready, EvReady, Ready, None},
		{Ready, EvReadyTimeout, Ready, None},
		{Ready, EvDrain, Draining, SendDrain},
		{Ready, EvDrainDeadline, Ready, None},
		{Ready, EvExit, Exited, Replace},

		{Draining, EvReady, Draining, None},
		{Draining, EvReadyTimeout, Draining, None},
		{Draining, EvDrain, Draining, None},
		{Draining, EvDrainDeadline, Draining, Kill},
		{Draining, EvExit, Exited, Retire},

		{Exited, EvReady, Exited, None},
		{Exited, EvReadyTimeout, Exited, None},
		{Exited, EvDrain, Exited, None},
		{Exited, EvDrainDeadline, Exited, None},
		{Exited, EvExit, Exited, None},
	}
	if len(rows) != len(stateNames)*len(eventNames) {
		t.Fatalf("want a row for each of %d pairs, have %d", len(stateNames)*len(eventNames), len(rows))
	}
	for _, r := range rows {
		s, a := next(r.s, r.e)
		if s != r.want || a != r.action {
			t.Errorf("%v + %v: want %v/%v, have %v/%v", r.s, r.e, r.want, r.action, s, a)
		}
	}
}
