// Package pool runs groups of worker OS processes: it spawns them, hands them
// work, samples their load, drains and retires them, and replaces the ones that
// crash.
//
// A worker is the sipvisor binary re-executed with the argument "worker" and
// the environment variable SIPVISOR_WORKER set to a cookie; started by hand it
// says so in one sentence and exits 2.
//
// # Supervisor ↔ worker protocol
//
// Inherited descriptors (passed to syscall.ForkExec; see start):
//
//	fd 3  control  unix SOCK_SEQPACKET, both ways, one message per packet.
//	               Worker → supervisor: 'R' ready, 'e' echo answer,
//	               'd' drained, 'c' call (id, request), 'n' note (no
//	               answer); supervisor → worker: 'a' answer (the call's
//	               id, answer). EOF tells the worker its supervisor is
//	               gone, and it exits at once
//	fd 4  data     unix SOCK_SEQPACKET, supervisor → worker, one frame per
//	               packet, handled strictly in order: 'M' SIP message,
//	               'E' echo, 'J' timer job, 'C' TCP connection (SCM_RIGHTS;
//	               any bytes after the kind were read from it by the
//	               worker that handed it back),
//	               'R' reload in place (the config snapshot's path),
//	               'P' profile (SCM_RIGHTS: a pipe's write end; see below),
//	               'D' drain, 'Z' end of work
//	fd 5  stats    a shared memory page. The worker writes and the
//	               supervisor reads: frames handled, busy nanoseconds, the
//	               start of the frame in progress, heap in use, sessions
//	               held, GC CPU seconds, requests dropped (UDP) or refused
//	               (TCP) for having waited too long. The supervisor writes
//	               and the worker reads: how
//	               long a request may wait ('M' frames carry the time the
//	               datagram was read)
//	fd 6… sockets  the UDP SIP sockets, named in SIPVISOR_SOCKETS
//
// Environment: SIPVISOR_WORKER (cookie), SIPVISOR_GROUP, SIPVISOR_KIND (the
// group's kind: udp, tcp or timer), SIPVISOR_WORKER_ID,
// SIPVISOR_SOCKETS (comma-separated socket names), SIPVISOR_CONFIG (the file
// the worker loads its script from), GOMEMLIMIT.
//
// Exit codes: 0 after a drain ('Z' received), anything else is a crash.
//
// # Calls
//
// A worker's call ('c', answered by 'a') carries a request the worker waits
// for: an admission question (AdmitRequest: a new session's method and
// Call-ID, read by a worker from a TCP connection no front door saw),
// answered with the door's decision; a request to pass to the worker that
// holds a connection to its destination; or, with the memory location
// store, a location operation (location's binary format).
//
// # Notes
//
// A note ('n') tells the supervisor something without waiting, in order with
// the worker's calls: a request read from a connection that moves a session
// on (SessionNote), a connection that ended and why (ConnClosedNote), a
// draining worker's connection given back at a message boundary with the
// bytes read past it (HandOffNote), and a response whose branch another
// worker made, to pass to that worker (ForwardNote).
//
// # Profiles
//
// A 'P' frame carries a CPU profile's length in seconds (2 bytes, big
// endian), a profile name (one of ProfileNames) and the write end of a pipe
// whose read end the supervisor keeps. The worker takes the profile in a
// goroutine of its own, so its loop goes on handling frames, and writes to
// the pipe one status byte: 0 then the profile's length (8 bytes, big
// endian) and the profile (pprof's gzipped protocol buffers); or 1 (a CPU
// profile is in progress: the runtime takes one at a time) or 2 (another
// failure), then an error message.
// It closes the pipe when done. Like every frame, a 'P' frame waits behind
// the work queued to the worker before it: a worker stuck on a message
// answers only when it is through with it, which is why the supervisor
// bounds its wait. A worker that exits closes the write end, in its hands
// or still in the frame it never read, so the supervisor reads end of file
// and stops waiting.
//
// # Why work goes through the supervisor
//
// The supervisor reads every datagram and hands it to one worker, so every
// message of a transaction reaches the process that holds it (see DESIGN.md).
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
