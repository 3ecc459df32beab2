// Package txn is the transaction layer of RFC 3261 17, as every SIP stack
// separates it (sipgo's transaction package, Kamailio's tm): the
// transactions (their states, the reply or request each resends, the keys
// it is matched by), a worker's table of them, the heap of deadlines the
// worker drives their timers by (one heap per worker, read from its loop,
// no runtime timer per transaction), and the rules of timers A to K that
// move a transaction on. A server transaction and its one branch with
// nothing left but to linger are kept as a settled record instead (Settle):
// their keys and the reply to resend, in a ring and an arena that free in
// the order records end. The keys are written alike from a request's
// bytes (the engine's message path on offsets, package sipmsg) and from a
// decoded message.
//
// It knows nothing of the script or the transports: the engine embeds
// Server and Client in its own transactions, with where a request came
// from and its replies go, and does what a deadline asks (Fired: resend,
// time out). See worker/engine's documentation and docs/DESIGN.md, "The
// message path".
package txn
