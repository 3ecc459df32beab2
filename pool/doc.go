// Package pool is the supervisor's side of its worker processes: it spawns
// groups of them, hands them work, samples their load, drains and retires
// them, and replaces the ones that crash. What runs inside a worker is
// package worker; what the two say to each other is package internal/wire.
//
// A worker is the sipvisor binary re-executed with the argument "worker" and
// the environment variable SIPVISOR_WORKER set to a cookie; started by hand it
// says so in one sentence and exits 2.
//
// # How work reaches a worker
//
// Every message of a transaction must reach the process that holds it: the
// supervisor's front door hands each datagram it reads to one worker by its
// call, and with direct reads the kernel's steering program places the
// others the same way (docs/DESIGN.md, "How a datagram travels").
//
// Echo frames travel behind real work in the same queue, so their round trip
// measures queueing delay. A drain is a frame too: everything handed to a
// worker before its 'Z' is handled before it exits, which is why draining
// never loses a message.
//
// # Invariants
//
//   - A group never has more live workers than its ceiling.
//   - A worker is handed new work only while Ready; a Draining worker only gets
//     messages for what it already holds.
//   - Workers never outlive the supervisor: Pdeathsig kills them when it dies,
//     and EOF on the control channel makes them exit if that ever fails.
//   - The supervisor, not the worker, holds every SIP socket for its whole life,
//     and a copy of every TCP connection it hands on, so that a draining
//     worker can give one back and none is closed by a scale-down.
package pool
