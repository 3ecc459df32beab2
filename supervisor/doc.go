// Package supervisor is the sipvisor process: it owns the SIP sockets and
// the control address, runs the worker groups (package pool) and decides,
// every cycle, how large each one is, and in front of the workers it
// decides which new sessions are taken.
//
// One process, several loops, joined with oklog/run (Run in supervisor.go):
// a front door per UDP socket reading datagrams (udpdoors.go, the routing
// itself in package frontdoor), an accept loop per TCP or TLS socket
// (conns.go), the scaling cycle (supervisor.go: sample each group's
// load, ask its profile, fork or drain), the overload monitors and the echo
// ticker of the RTT throttle (admission.go, the decisions in package
// overload), the slow start ticks (ramps.go),
// timer routes (timers.go), and the HTTP control server (http.go, ctl's
// handler over backend.go).
//
// Started as "sipvisor worker", the same binary is a worker process
// instead: cmd/sipvisor sends that to package worker's loop around the SIP
// engine of package worker/engine before the supervisor is involved, so this
// package imports neither. The direct reads of a UDP group (the kernel's
// steering of datagrams to the workers' own sockets) are package
// supervisor/steering's; steering.go lends it the group and admission.
//
// Where each decision lives:
//   - admission of a new session, on every transport: overload.Decide over
//     overload.Admission's state, asked by the UDP doors and, for what
//     workers ask, by answerAdmit (Admission.AnswerAsk); it logs every
//     refusal they send (Admission.Refused); admission.go supplies what it weighs (sessions,
//     registrations, queues) and holds no decision of its own;
//   - the sessions counted: the doors' tables and, for connections,
//     connsessions.go;
//   - TCP and TLS connections: conns.go counts them for the connection
//     limits, keeps a copy of each to move it off a draining worker, and
//     passes responses and requests to the worker that holds their
//     transaction or connection (pass.go);
//   - a reload: reload.go plans it (a pure function of the config in force
//     and the new one), signals.go applies it.
//
// The Supervisor's state is in parts, each a struct of the fields the same
// code uses together (supervisor.go), so that no struct of the package
// holds more than about fifteen fields (shape_test.go keeps it so):
//   - sockets (s.sockets): the SIP sockets, their descriptors and front
//     doors, the control listener, the TLS ticket keys, the connections the
//     workers hold and the requests passed to them (udpdoors.go, conns.go,
//     pass.go); it closes them all at the end;
//   - scaling: the worker groups (each a groupRun, its admission state in
//     groupAdmission), the cycle count, the config snapshot workers load,
//     and the wake-ups of the cycle and timer loops;
//   - admission: what the admission decision weighs (overload.Admission,
//     the throttle in force, slow start, the overload control of
//     oc.go, the sessions over connections) and the echo loop's wake-up;
//   - store (s.store): the location store, its spec and state, and the
//     count and Call-IDs of the live registrations; it counts them, tells a
//     refresh from a new REGISTER, and answers ul show (registrations.go);
//   - control: ctl's parameters, the ban authority (bans.go), the
//     destination sets (dispatch.go), the reload and SIGHUP channels, and
//     the profiling state (pprof.go);
//   - upgrade (s.up): this process's part in an upgrade (upgrade.go).
//
// scaling, admission and control are embedded, their fields read as
// s.groups, s.ov or s.bans by loops that span several parts.
//
// The invariant the package keeps: every message of a transaction reaches
// the worker that holds it, and no call or connection that is up is lost to
// a scale-down, a reload or an overload; what is refused is refused before
// any worker spends work on it, with 503 and Retry-After.
package supervisor
