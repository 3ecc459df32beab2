// Package txn is the transaction layer's parts that know nothing of the
// script or the transports: the heap of deadlines a worker drives its
// transactions' timers by (one heap per worker, read from its loop, no
// runtime timer per transaction), and the keys transactions are matched
// by, written alike from a request's bytes (the engine's message path on
// offsets, package sipmsg) and from a decoded message.
//
// The transactions themselves (their states, what each keeps to resend)
// are the engine's: see worker/engine's documentation and docs/DESIGN.md,
// "The message path".
package txn
