package overload

import (
	"github.com/sipvisor/sipvisor/internal/sipscan"
)

// Class is what admission makes of a message: whether it may be refused at
// all, and by which rules.
type Class uint8

// Classes of message. Only a new session, a REGISTER that may add a binding
// and a probe of the server are ever refused.
const (
	// ClassExisting belongs to what is already there, or is no session:
	// a response, an ACK, a CANCEL, a request inside a dialog, and the
	// requests that start nothing (MESSAGE, OPTIONS to a user, PUBLISH,
	// NOTIFY, INFO...). Never refused: a dispatcher or script in front of
	// the server limits those, as Kamailio's and OpenSIPS's do.
	ClassExisting Class = iota
	// ClassNew is an INVITE or SUBSCRIBE outside a dialog.
	ClassNew
	// ClassRegister is a REGISTER that may add a binding: max_registrations
	// and the load guards weigh it, unless it refreshes a live binding.
	ClassRegister
	// ClassRemoval is a REGISTER with Expires: 0: it adds no binding.
	ClassRemoval
	// ClassProbe is an OPTIONS outside a dialog to the server itself (no
	// user part), as dispatchers probe their destinations: refused only
	// while every new session is.
	ClassProbe
	numClasses
)

var classNames = [numClasses]string{"existing", "new_session", "register", "register_removal", "probe"}

func (c Class) String() string {
	if c < numClasses {
		return classNames[c]
	}
	return "unknown"
}

// Request is what admission needs to know of a message, what every entry
// point can tell: the front door from its scan, a worker from its parse.
type Request struct {
	IsRequest bool
	Method    sipscan.Method
	// InDialog: the To header has a tag.
	InDialog bool
	// Expires is the Expires header's delta-seconds, -1 when absent.
	Expires int
	// NoUser: the Request-URI names no user (sip:host), as a probe of
	// the server's does.
	NoUser bool
}

// RequestOf is what admission reads of a scanned message.
func RequestOf(m *sipscan.Msg) Request {
	r := Request{IsRequest: m.IsRequest, Method: m.Method, InDialog: m.HasToTag, Expires: m.Expires}
	if m.IsRequest && m.Method == sipscan.Options {
		r.NoUser = noUser(m.RequestURI)
	}
	return r
}

// noUser reports whether a SIP URI names no user: a user part is the only
// place one may hold an unescaped "@".
func noUser(u []byte) bool {
	if !hasPrefixFold(u, "sip:") && !hasPrefixFold(u, "sips:") {
		return false
	}
	for _, c := range u {
		if c == '@' {
			return false
		}
	}
	return true
}

func hasPrefixFold(b []byte, prefix string) bool {
	if len(b) < len(prefix) {
		return false
	}
	for i := 0; i < len(prefix); i++ {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != prefix[i] {
			return false
		}
	}
	return true
}

// Classify is the one classifier of messages for admission, and the kind
// of session (for the limits by kind) of what it may refuse.
func Classify(r Request) (Class, sipscan.Kind) {
	if !r.IsRequest || r.InDialog {
		return ClassExisting, sipscan.KindOther
	}
	switch r.Method {
	case sipscan.Invite:
		return ClassNew, sipscan.KindCall
	case sipscan.Subscribe:
		return ClassNew, sipscan.KindSubscription
	case sipscan.Register:
		if r.Expires == 0 {
			return ClassRemoval, sipscan.KindRegistration
		}
		return ClassRegister, sipscan.KindRegistration
	case sipscan.Options:
		if r.NoUser {
			return ClassProbe, sipscan.KindOther
		}
	}
	return ClassExisting, sipscan.KindOther
}

// State is the admission state one decision weighs, as its entry point
// knows it: the supervisor knows all of it; a worker reading its own
// socket knows the gate and quotas the supervisor wrote into its page, and
// asks (Answer.Ask) where that is not enough.
type State struct {
	// RefuseAll: the server refuses every new session (suspended, or
	// draining to stop).
	RefuseAll bool
	// RetryAfter is the configured Retry-After, in seconds, of a refusal.
	RetryAfter int
	// Refreshes: the REGISTER refreshes a live binding. RefreshUnknown:
	// whether it does is not known here; a REGISTER about to be refused
	// is then asked about instead.
	Refreshes, RefreshUnknown bool
	// Room is how many more sessions of each kind (sipscan.Kind order) the
	// limits let in now (Admission.Room; a worker's quota less what it
	// admitted). RoomIsQuota: it is a worker's share of the room, and one
	// over it asks rather than refuses.
	Room        [4]int64
	RoomIsQuota bool
	// QueueFull: the group's queues are over queue_admission, or new work
	// waits longer than queue_delay_admission.
	QueueFull bool
	// LoadUnknown: the queues and the throttle are not known to be far
	// from refusing (a worker whose gate is not open): ask.
	LoadUnknown bool
	// Throttle draws whether the RTT throttle lets this session in; nil
	// when no throttle is on. It is drawn only when every other check
	// passed, so that a session refused for another reason takes no
	// number of the throttle's pattern.
	Throttle Throttler
}

// Throttler is the RTT throttle as a decision draws it.
type Throttler interface {
	// Pass draws whether the next session passes the throttle.
	Pass() bool
}

// Answer is one admission decision.
type Answer struct {
	Refusal Refusal
	// RetryAfter is the configured Retry-After, in seconds: of this
	// refusal, or of one further on (no worker could take it).
	RetryAfter int
	// Ask: the entry point does not know enough to decide; the supervisor
	// does (wire.AdmitRequest).
	Ask bool
}

// Refused reports whether the answer refuses.
func (a Answer) Refused() bool { return a.Refusal != RefuseNone }

// Decide is the one admission decision: given what a message is and the
// state, admit, refuse (with why and the Retry-After) or ask. Cheapest
// checks first: what is never refused, the server refusing all, the
// session limits, the queues, the RTT throttle.
//
// Rules: only a new session, a REGISTER that may add a binding and a
// probe are refused. A probe is refused only while every new session is:
// the limits and load guards refuse some sessions, and a dispatcher that
// marked the server down for them would move all its traffic, the
// overload with it, onto its peers. A binding is no session: a new
// REGISTER is bounded by max_registrations alone among the limits, and
// passes the load guards as a call does; its refresh and its removal are
// never refused.
func Decide(c Class, k sipscan.Kind, st State) Answer {
	admit := Answer{RetryAfter: st.RetryAfter}
	switch c {
	case ClassNew, ClassRegister:
	case ClassProbe:
		if st.RefuseAll {
			return Answer{Refusal: RefuseSuspended, RetryAfter: st.RetryAfter}
		}
		return admit
	default:
		return admit
	}
	register := c == ClassRegister
	if register && st.Refreshes {
		return admit
	}
	ask := false
	refuse := func(r Refusal) Answer {
		if register && st.RefreshUnknown {
			return Answer{RetryAfter: st.RetryAfter, Ask: true}
		}
		return Answer{Refusal: r, RetryAfter: st.RetryAfter}
	}
	if st.RefuseAll {
		return refuse(RefuseSuspended)
	}
	if int(k) < len(st.Room) && st.Room[k] <= 0 {
		if !st.RoomIsQuota {
			if register {
				return refuse(RefuseRegistrations)
			}
			return refuse(RefuseLimit)
		}
		ask = true
	}
	if st.QueueFull {
		return refuse(RefuseQueue)
	}
	if ask || st.LoadUnknown {
		return Answer{RetryAfter: st.RetryAfter, Ask: true}
	}
	if st.Throttle != nil && !st.Throttle.Pass() {
		return refuse(RefuseThrottle)
	}
	return admit
}
