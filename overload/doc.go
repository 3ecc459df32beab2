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
// Invariant: one decision for every transport. A new session is refused, by
// the cheapest check first, for being stopped or suspended, over a limit,
// behind a queue or throttled, and a refresh of a live registration is never
// refused; what is refused never reaches a worker.
package overload
