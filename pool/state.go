package pool

// State is where a worker is in its life.
type State int

// The states, in the order a worker passes through them.
const (
	Spawning State = iota
	Ready
	Draining
	Exited
)

var stateNames = [...]string{"spawning", "ready", "draining", "exited"}

func (s State) String() string {
	if int(s) < len(stateNames) {
		return stateNames[s]
	}
	return "unknown"
}

// Event is something that happens to a worker.
type Event int

// The events.
const (
	EvReady         Event = iota // the worker wrote its ready byte
	EvReadyTimeout               // no ready byte within the ready timeout
	EvDrain                      // the group decided to retire the worker
	EvDrainDeadline              // the drain timeout ran out
	EvExit                       // the process ended
)

var eventNames = [...]string{"ready", "ready_timeout", "drain", "drain_deadline", "exit"}

func (e Event) String() string {
	if int(e) < len(eventNames) {
		return eventNames[e]
	}
	return "unknown"
}

// Action is what the owner of a worker must do after a transition.
type Action int

// The actions.
const (
	None      Action = iota
	SendDrain        // send the drain frame
	Kill             // SIGKILL the process
	Replace          // the worker is gone without being asked: start another
	Retire           // the worker is gone as asked: forget it
)

var actionNames = [...]string{"none", "send_drain", "kill", "replace", "retire"}

func (a Action) String() string {
	if int(a) < len(actionNames) {
		return actionNames[a]
	}
	return "unknown"
}

// next is the whole lifecycle of a worker as one pure function. A spawning
// worker asked to drain is killed: it holds nothing yet. A worker that exits
// while not draining is replaced, whatever its exit code, because the group
// still wants it.
func next(s State, e Event) (State, Action) {
	switch s {
	case Spawning:
		switch e {
		case EvReady:
			return Ready, None
		case EvReadyTimeout, EvDrain:
			return Draining, Kill
		case EvExit:
			return Exited, Replace
		}
	case Ready:
		switch e {
		case EvDrain:
			return Draining, SendDrain
		case EvExit:
			return Exited, Replace
		}
	case Draining:
		switch e {
		case EvDrainDeadline:
			return Draining, Kill
		case EvExit:
			return Exited, Retire
		}
	}
	return s, None
}
