// Package loadgen is sipload, sipvisor's SIPp-like SIP load generator, as a
// library: Run drives one SIPp XML scenario (a file, or a built-in one: uac,
// uas, register, options, embedded from scenarios/) over one UDP socket or
// one TCP or TLS connection and returns per-second rows and totals; Main is
// the command line around it (flags, CSV, status line, summary, chart, exit
// code), documented in docs/SIPLOAD.md. One engine runs every scenario
// (xmlrun.go); it reaches the rates the hand-written one it replaced did.
//
// One goroutine owns every call, timer and counter; socket readers only hand
// it messages, so nothing on the hot path takes a lock. Calls start when the
// rate schedule says they are due, never when the server answers (open loop),
// and the loop measures how late it starts them, its own CPU time and the
// kernel's drops on its socket, so that a generator that falls behind says so
// instead of passing its limit off as the server's.
//
// Messages are built by appending into buffers and responses are read with
// a scanner that slices the datagram in place (no allocation), about seven
// times cheaper than a full parse (BenchmarkScan, BenchmarkSipgoParse).
package loadgen
