package overload

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
