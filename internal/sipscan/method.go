package sipscan

// Method is a request method the front door treats by name. Methods are
// case-sensitive in SIP, so "invite" is OtherMethod.
type Method uint8

// The zero Method is what a response carries in Msg.Method.
const (
	NoMethod Method = iota
	Invite
	Ack
	Bye
	Cancel
	Register
	Options
	Subscribe
	Notify
	Message
	Info
	Update
	Prack
	Refer
	Publish
	OtherMethod
)

var methodNames = [...]string{
	NoMethod:    "",
	Invite:      "INVITE",
	Ack:         "ACK",
	Bye:         "BYE",
	Cancel:      "CANCEL",
	Register:    "REGISTER",
	Options:     "OPTIONS",
	Subscribe:   "SUBSCRIBE",
	Notify:      "NOTIFY",
	Message:     "MESSAGE",
	Info:        "INFO",
	Update:      "UPDATE",
	Prack:       "PRACK",
	Refer:       "REFER",
	Publish:     "PUBLISH",
	OtherMethod: "other",
}

// String names the method as on the wire; OtherMethod is "other" so that it
// can serve as a bounded metric label.
func (m Method) String() string {
	if int(m) < len(methodNames) {
		return methodNames[m]
	}
	return "other"
}

// ParseMethod is the Method named by b, OtherMethod for one not listed.
func ParseMethod(b []byte) Method { return lookupMethod(b) }

func lookupMethod(b []byte) Method {
	// A switch on string(b) compiles to length-then-content comparisons and
	// does not allocate.
	switch string(b) {
	case "INVITE":
		return Invite
	case "ACK":
		return Ack
	case "BYE":
		return Bye
	case "CANCEL":
		return Cancel
	case "REGISTER":
		return Register
	case "OPTIONS":
		return Options
	case "SUBSCRIBE":
		return Subscribe
	case "NOTIFY":
		return Notify
	case "MESSAGE":
		return Message
	case "INFO":
		return Info
	case "UPDATE":
		return Update
	case "PRACK":
		return Prack
	case "REFER":
		return Refer
	case "PUBLISH":
		return Publish
	}
	return OtherMethod
}

// Kind groups sessions for per-kind session limits.
type Kind uint8

// Kinds of session.
const (
	KindOther Kind = iota
	KindCall
	KindRegistration
	KindSubscription
)

var kindNames = [...]string{
	KindOther:        "other",
	KindCall:         "call",
	KindRegistration: "registration",
	KindSubscription: "subscription",
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return "other"
}

// Kind classifies the message by its CSeq method, so that a response counts
// against the same kind as the request it answers.
func (m *Msg) Kind() Kind {
	switch m.CSeqMethod {
	case Invite:
		return KindCall
	case Register:
		return KindRegistration
	case Subscribe, Notify, Publish:
		return KindSubscription
	}
	return KindOther
}
