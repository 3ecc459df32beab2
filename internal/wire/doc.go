// Package wire is the protocol between the supervisor (package pool) and
// its worker processes (package worker): the descriptors and environment a
// worker inherits, the frames and control messages, the calls and notes,
// the profile pipe, and the layout of the shared stats page. Both sides
// import it and nothing else of each other, so the protocol is defined once;
// it does no I/O beyond ControlConn and the stats page's mapping.
//
// Invariants: a worker is the supervisor's own binary re-executed, so both
// ends always speak the same version and nothing here is negotiated; each
// word of the stats page has one writer, named at its offset.
//
// # Descriptors
//
// Inherited descriptors (passed to syscall.ForkExec; see pool's start):
//
//	fd 3  control  unix SOCK_SEQPACKET, both ways, one message per packet.
//	               Worker → supervisor: 'R' ready, 'e' echo answer,
//	               'd' drained, 'c' call (id, request), 'n' note (no
//	               answer); supervisor → worker: 'a' answer (the call's
//	               id, answer). EOF tells the worker its supervisor is
//	               gone, and it exits at once
//	fd 4  data     unix SOCK_SEQPACKET, supervisor → worker, one frame per
//	               packet, handled strictly in order: 'M' SIP message,
//	               'E' echo, 'J' timer job, 'C' TCP connection (SCM_RIGHTS),
//	               'H' a connection handed back by a draining worker
//	               (SCM_RIGHTS; the bytes after the kind were read from
//	               it by that worker, and a WebSocket one had its Upgrade),
//	               'R' reload in place (the config snapshot's path),
//	               'P' profile (SCM_RIGHTS: a pipe's write end; see below),
//	               'D' drain, 'Z' end of work, 'T' steering table
//	               (direct reads, below), 'B' bans (below), 'S' a TLS
//	               1.3 connection (SCM_RIGHTS) with its record layer's
//	               state (HandOffTLSNote), 'W' a message another worker
//	               made, to write on a connection this one reads
//	               (WriteFrame), 'X' the states of the destination
//	               sets (dispatcher.EncodeStates), 'L' a copy of the
//	               supervisor's end of a TCP worker's data channel
//	               (SCM_RIGHTS) and its pid, given to each UDP worker,
//	               which writes on it 'm' a response whose branch that
//	               worker made ('M''s layout, not counted as handled, as
//	               the supervisor did not send it)
//	fd 5  stats    a shared memory page. The worker writes and the
//	               supervisor reads: frames handled, busy nanoseconds, the
//	               start of the frame in progress, heap in use, sessions
//	               held, GC CPU seconds, requests dropped (UDP) or refused
//	               (TCP) for having waited too long. The supervisor writes
//	               and the worker reads: how
//	               long a request may wait ('M' frames carry the time the
//	               datagram was read), and the RFC 7339 feedback to put in
//	               responses (OffOverloadControl)
//	fd 6… sockets  the UDP SIP sockets, named in SIPVISOR_SOCKETS; with
//	               direct reads, then the worker's own socket in the port's
//	               SO_REUSEPORT group, named in SIPVISOR_DIRECT
//
// Environment: SIPVISOR_WORKER (cookie), SIPVISOR_GROUP, SIPVISOR_KIND (the
// group's kind: udp, tcp or timer), SIPVISOR_WORKER_ID,
// SIPVISOR_SOCKETS (comma-separated socket names), SIPVISOR_CONFIG (the file
// the worker loads its script from), GOMEMLIMIT, SIPVISOR_DIRECT (direct
// reads: "SOCKET:SLOT"), SIPVISOR_LOG_FORMAT (text or json: the one stream
// the supervisor and its workers share has one format),
// SIPVISOR_WORKER_GENERATION (the supervisor's generation, which ends each
// of the worker's log lines).
//
// Exit codes: 0 after a drain ('Z' received), anything else is a crash.
//
// # Calls
//
// A worker's call ('c', answered by 'a') carries a request the worker waits
// for: the destination sets' states as they are now, at a worker's start
// (DispatchStatesRequest, which the supervisor tells by
// IsDispatchStatesRequest); an admission question (AdmitRequest: a new session's method and
// Call-ID, read by a worker from a TCP connection no front door saw),
// answered with the door's decision; a request to pass to the worker that
// holds a connection to its destination (PassRequest); a message to write
// on a connection another worker reads (WriteRequest: a phone's flow),
// which the supervisor gives that worker in a 'W' frame; or, with the memory location
// store, a location operation (location's binary format).
//
// # Notes
//
// A note ('n') tells the supervisor something without waiting, in order with
// the worker's calls: a request read from a connection that moves a session
// on (SessionNote, or AppendSessionNote into a buffer), a connection that ended and why (ConnClosedNote), a
// draining worker's connection given back at a message boundary with the
// bytes read past it (HandOffNote; a TLS one with its record layer's
// state, HandOffTLSNote), and a response whose branch another
// worker made, to pass to that worker (ForwardNote), a datagram a worker
// read itself but leaves to the supervisor's door (DoorNote), a source whose
// requests in the counting window grew by a step (PikeNote), and a failed
// digest authentication (AuthFailNote), and what a worker sent to each
// destination of the destination sets and what its script marked
// (DispatchNote). Notes that may wait a little (session notes) travel
// several to a message ('N' with CtlNotes: each note's length and payload,
// AppendNote, read by EachNote), sent before the worker's next note or
// call.
//
// # Bans
//
// The supervisor is the authority on which sources are banned (package
// overload/pike): it sums the PikeNote and AuthFailNote reports with what
// its own door counts, and sends every UDP and TCP worker the bans in force
// and how to count ('B', FrameBans) at each change and to each new worker.
// A worker drops (or answers 403) a banned source's datagrams as it reads
// them, before its script, and closes a banned source's connection at its
// next request; the supervisor refuses its connections at accept.
//
// # Direct reads
//
// With udp_direct_reads, a UDP worker reads the group's port through its
// own socket of the port's SO_REUSEPORT group, whose kernel program places
// each datagram by its Call-ID (package listeners/steer); the supervisor's
// socket, first in the group, takes the rest. The worker runs a front door
// of its own over what it reads: its admission (overload.Decide) reads the
// gate the supervisor writes in the stats page (open: admit within its
// quota; else ask with AdmitRequest; the Retry-After of refusals), refuses by itself a new
// session that waited in its socket longer than queue_delay_admission, and
// counts its sessions by kind, and the sessions it admitted and refused, in
// the page, which the supervisor sums; max_call_duration comes the other
// way. A 'T'
// frame tells it which slot has each bucket, since when, and when another
// last took a new session of it; a message of a Call-ID it does not know,
// in a bucket that became its own less than a pending INVITE's lifetime
// ago, may belong to a call of the bucket's previous worker, and a new
// session less than a transaction's lifetime after another took one of its
// bucket may be a retransmission: both go to the supervisor's door
// (DoorNote), which knows the history. Messages the supervisor's door
// hands over ('M' frames) were admitted there; the worker's door follows
// their sessions without asking again.
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
package wire
