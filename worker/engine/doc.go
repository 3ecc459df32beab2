// Package engine is the SIP engine of a worker process: it reads each
// message the supervisor hands over or the worker reads, runs the routing
// script (route, onreply_route, failure_route, timer_route; see
// docs/SCRIPT.md) and relays requests statefully, sending from the
// supervisor's own sockets so the source address is the listening one.
//
// # The message path
//
// A request is read once into offsets (package internal/sipmsg, on the
// door's scanner) and the script runs on them: the functions a call goes
// through note what they change and t_relay splices it into the bytes as
// received (fast.go). Any other function or pseudo-variable decodes the
// request into github.com/emiago/sipgo's message types, with those changes
// applied, and the script goes on with it; requests the bytes path does
// not take (TCP and TLS, CANCEL, re-INVITE, NAT, flows, IPv6) are decoded
// from the start. Responses are matched by the scanner's branch and relayed
// without a parse (relayResponse) unless an onreply_route or a final reply
// of 300 and up needs them decoded. A transaction keeps the bytes it
// resends and the keys it is matched by. The transaction layer (their
// states, table, heap of deadlines and timer rules, the keys) is package
// txn; the engine embeds its transactions in its own (txn.go), with what
// depends on the worker: where a request came from and its replies go,
// sending, the script's routes. docs/DESIGN.md, "The message path", tells
// the whole of it; TestAllocs holds what each exchange allocates. It is the worker's Handler (package
// worker): everything it does runs on the worker's one loop, so it holds no
// locks, and what it holds is what Held reports to a draining worker.
//
// New is worker.Run's newHandler; NewWorker builds one from Options, as
// tests do. Registrations go to a location.Store outside the worker, so
// that no worker's exit loses one: the SQLite file or Redis server of
// location_store, which the worker opens itself, or the supervisor's memory
// store through env.Call.
//
// # Why a transaction table of our own, not sipgo's transaction layer
//
// sipgo's transaction layer starts a goroutine per message and keeps each
// transaction (~4 KB) for 32 s after it ends: at 8,000 calls/s that is
// ≈740 MB of heap, and the time a handler appears busy then measures
// goroutine scheduling rather than work (662 µs measured against 55 µs of
// CPU; see docs/DESIGN.md, "Why it is built this way"). A worker's load
// must mean what OpenSIPS's does, the share of wall time spent handling
// messages in one loop, and a draining worker must be able to tell when it
// holds nothing. So the worker keeps a
// compact table of its own, driven from the loop (HandleMessage and Tick):
// no goroutine per message or transaction, one heap of deadlines in which
// each transaction has at most one entry (moved in place, removed when the
// transaction ends), and a transaction is dropped as soon as its RFC 3261
// timers allow. BenchmarkCallHandled measures the worker's own cost of a
// whole proxied call (INVITE, 180, 200, ACK, BYE, 200 in; eight datagrams
// out; lookup and record-routing): 4 allocations and about 580 bytes
// (129 and 13 KB when every request was decoded; 10 and 4.8 KB before
// transactions came from a free list, txpool.go); sendto takes most of
// its time. Decoded requests and the worker's replies to them are written
// by write.go rather than sipgo's writers, to the same bytes.
// TestCallMemory measures what a call holds: about 410 bytes while its
// INVITE's and BYE's transactions linger (settled records, txpool.go;
// 2.6 KB while they kept their pairs), nothing once their timers have
// ended.
//
// # Transactions
//
// A request relayed with t_relay gets a server transaction (keyed by top
// Via branch, sent-by and method, RFC 3261 17.2.3) and one client
// transaction per branch (keyed by the branch this server put in its own
// Via). The rules it keeps:
//
//   - A retransmitted request gets the last reply sent upstream again (for an
//     INVITE, 100 Trying or the last provisional) and is not relayed again.
//   - An INVITE is answered 100 Trying at once. Client transactions over UDP
//     retransmit (timers A and E) until a reply, and time out with a local
//     408 (timers B and F, or fr_inv after a provisional: InviteTimeout),
//     which feeds failure_route like a received final reply. A branch that
//     cannot be sent at all makes t_relay false.
//   - A non-2xx final reply is ACKed hop by hop by this server and passed
//     upstream, where it is resent (timer G) until the caller's ACK, which
//     ends here. A 2xx is passed on; its ACK is end-to-end and is relayed
//     like any in-dialog request (loose_route), matched to the INVITE by
//     Call-ID, From-tag and CSeq while the transaction lingers.
//   - A CANCEL matching an INVITE transaction is answered 200 and sent down
//     every branch with the branch's own Via, once it has had a provisional
//     reply (RFC 3261 9.1).
//   - Replies that match no transaction (a UAS's 2xx retransmissions after
//     the INVITE ended) are passed on statelessly by their next Via when the
//     top one is this server's.
//
// Finished transactions linger for Options.Linger (T4, 5 s, like OpenSIPS's
// wait timer, where RFC 3261 allows up to 64*T1 for timers D and J), over
// UDP only; over TCP they end at once. A pair relayed on the bytes over
// UDP lingers as a settled record of its keys (txpool.go, compact), which
// Held counts as one. So Held drops to 0 at most Linger
// after the last reply of the last call, or 64*T1 after a final reply whose
// ACK never came, well within the supervisor's drain timeout.
//
// # Limits
//
// One branch at a time (serial forking through failure_route; no parallel
// forking). TCP and TLS connections live in the worker that reads them, and
// a peer that accepts no connections is reached only over its own: a
// request that came over UDP for such a peer is handed to that worker
// through the supervisor (Options.PassToHolder), which runs the script for
// it; one for a phone's flow (lookup's, or of a call to it), or that came
// over another connection, stays with its worker, which has the holder
// write it (Options.WriteVia, flow.go), the peer's responses coming back
// by the pid in their branch. A phone's flow is
// never connected to: gone, its contact is, only when it names an IP
// address of its own, else the branch is 480 or 430. A next hop that is
// not a flow and that no worker holds a connection from is connected to. A TLS
// connection moves to another worker on scale-down only for TLS 1.3 with
// AES-GCM (tlsmove.go). Next hops named by a host name are resolved on the
// loop.
package engine
