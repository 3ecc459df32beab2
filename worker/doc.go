// Package worker is the runtime of a worker process, the sipvisor binary
// re-executed by the supervisor (package pool): Run rebuilds what the
// supervisor passed (package internal/wire names the descriptors and the
// environment), makes the Handler, says ready, and runs the worker's one
// loop, which handles frames strictly in the order the supervisor queued
// them, the handler's timers, and work the handler submits. It keeps the
// worker's stats page, answers echoes and profile requests, and makes the
// worker's calls and notes to the supervisor. The SIP engine is a Handler
// (package worker/engine). With direct reads (wire.EnvDirect), a UDP worker
// also reads a socket of its own in the port's SO_REUSEPORT group, through
// a front door of its own (package frontdoor) that admits by the gate the
// supervisor writes in the stats page and passes what it must not decide
// about to the supervisor's door.
//
// Invariants: every Handler method runs on the one loop, so a handler needs
// no locks for state only the loop touches; a frame handled is counted on
// the stats page only after it is handled, so the supervisor's queue length
// is exact (datagrams read directly are no frames and are not counted
// there); a worker sends from the supervisor's UDP sockets but never reads
// them, and exits when its supervisor is gone.
package worker
