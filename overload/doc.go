// Package overload decides which new sessions the server takes: the one
// admission type that the UDP front doors and the supervisor's TCP and
// session paths ask, and the slow start ramps that pick a worker for an
// admitted session.
//
// It owns the suspension state (auto-suspend on watermarks, and the
// operator's), the session limits and queue admission, each group's RTT
// throttle, flip health, and the ramps of workers in slow start. The pure
// rules live in its sub-packages (watermark, throttle, slowstart,
// fliphealth, sessions); this package holds their state in force and applies
// them to the inputs the supervisor supplies through small interfaces
// (SessionCounter, Registrations, Group), so that every decision here can be
// tested without a process or a socket.
//
// Invariant: one decision for every transport. Classify tells what a message
// is (a new session, a REGISTER that may add a binding, a removal, a probe,
// or what is never refused) and Decide, a pure function of that and a State,
// answers admit, refuse (with why and the configured Retry-After) or ask.
// The supervisor's doors and answers fill the State from Admission; a worker
// reading its own socket fills it from the gate and quota in its page and
// asks where that is not enough. A new session is refused, by the cheapest
// check first, for being stopped or suspended, over a limit, behind a queue
// or throttled; a refresh of a live registration and a removal are never
// refused; what is refused never reaches a worker.
package overload
