package overload

// Refusal is why a new session was turned away; RefuseNone admits it.
type Refusal uint8

// Reasons for refusing a new session. RefuseNoWorker is the front door's
// own: admission let the session in and no worker could take it.
const (
	RefuseNone Refusal = iota
	RefuseSuspended
	RefuseLimit
	RefuseQueue
	RefuseThrottle
	RefuseNoWorker
	NumRefusals
)

var refusalNames = [NumRefusals]string{"none", "suspended", "limit", "queue", "throttle", "no_worker"}

func (r Refusal) String() string {
	if r < NumRefusals {
		return refusalNames[r]
	}
	return "unknown"
}
