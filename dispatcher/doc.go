// Package dispatcher is the policy of destination sets, the dispatcher of
// Kamailio's and OpenSIPS's users: the list of backend servers (Parse, in
// Kamailio's dispatcher.list format), the choice of a destination for a
// request and the order of those to fail over to (Selector), and each
// destination's health as OPTIONS probes and the hand of an operator make
// it (Health). It does no I/O and reads no clock: callers pass the time, so
// every rule is table-tested.
//
// Who holds what: the supervisor probes every destination and keeps its
// Health, the one truth of its state; each worker keeps a Selector over
// the Table the config gives it and the Status of each destination the
// supervisor last sent it (EncodeStates). A worker's round-robin and
// weight counters are its own: over many workers the spread is the same in
// the sum.
//
// # Overload feedback
//
// A destination's Health is where what its responses say about its load
// goes: Hold takes it out of the rotation until a time (a 503 with
// Retry-After and no oc, RFC 3261 21.5.4), and Status reports it held
// meanwhile; TakeOC keeps its RFC 7339 loss with its expiry (package
// overload/oc), newest oc-seq only. A worker takes either from the
// responses it reads, applies it at once, and reports it (Report.OC,
// Report.Hold); the supervisor keeps it in the Health and sends it to
// every worker (States.OC), each of which sheds that share of the new
// sessions it would send there, never a request within a dialog.
package dispatcher
