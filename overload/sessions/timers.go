package sessions

import "time"

// The times below must agree between the worker, which holds a
// transaction, and the supervisor, which routes its messages and drains
// the worker: each is derived here, from RFC 3261's and OpenSIPS's
// defaults, and nowhere else.
const (
	// T1 is RFC 3261's estimate of a round trip.
	T1 = 500 * time.Millisecond
	// TransactionLifetime is 64×T1, the longest a SIP transaction lives
	// once it has its final answer or timed out (timers B, F and H).
	TransactionLifetime = 64 * T1
	// InviteTimeout bounds an INVITE branch after its first provisional
	// reply: OpenSIPS's and Kamailio's default fr_inv_timeout.
	InviteTimeout = 120 * time.Second
	// PendingInvite is the longest an INVITE may be pending, from the
	// request to its ACK: it may ring for InviteTimeout and then live a
	// transaction's lifetime more.
	PendingInvite = InviteTimeout + TransactionLifetime
	// DrainTimeout is the default bound on a draining worker's wait for
	// its transactions: past PendingInvite, so that scaling down never cuts
	// a call still ringing, with a margin for its last answers to leave.
	DrainTimeout = PendingInvite + 8*time.Second
)
