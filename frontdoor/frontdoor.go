// Package frontdoor decides, for each SIP datagram the supervisor reads, which
// worker gets it — or answers it without any worker.
//
// Every message of a transaction must reach the worker that holds it
// (retransmissions, responses from downstream, ACK, CANCEL): workers are
// separate processes and share no transaction state. The door keeps Call-ID
// affinity for as long as a transaction of the call may live, and hands new
// work to the least loaded worker. It refuses new sessions that admission
// control (package overload: Classify, then Decide) turns away with a 503
// built from the raw bytes, so a refusal costs no worker, no transaction and
// no full parse.
//
// Before all that, the door refuses a banned source's datagrams (package
// overload/pike: dropped, or a 403), and counts the requests it reads per
// source for the supervisor's table of bans.
//
// The door also counts the sessions in progress (a call from its INVITE to
// its BYE, a subscription until it expires; package overload/sessions), which
// session limits weigh, and drops a retransmitted request while its original still waits in a
// worker's queue, so that a slow worker never handles a request twice.
//
// A Door is used by one goroutine (the socket's reader). It does not allocate
// per datagram on the common path; counters are atomics so that metrics can
// read them from elsewhere. It knows a worker only as a Target, the queue it
// hands frames to, so it holds no process of its own.
package frontdoor

import (
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/overload/oc"
	"github.com/sipvisor/sipvisor/overload/pike"
	"github.com/sipvisor/sipvisor/overload/sessions"
)

// AffinityTTL is how long a Call-ID stays with its worker after its last
// message: 64×T1, the longest a SIP transaction lives (timer B/F/H). A
// dialog silent for longer loses nothing: its next request is a new
// transaction that any worker can route by its Route headers.
const AffinityTTL = sessions.TransactionLifetime

// PendingInviteTTL is how long a Call-ID stays with its worker after an
// INVITE, until the door sees the ACK that ends the INVITE's transaction: a
// proxied INVITE may ring for up to the worker's fr_inv timeout (120 s,
// sessions.InviteTimeout) after its first provisional reply, and then
// live 64×T1 more (sessions.PendingInvite). Its CANCEL, its retransmissions and, without reply
// sockets, its final response must reach the worker that holds it all that
// time; with AffinityTTL alone, a call ringing longer than 32 s could not
// be cancelled and its answer went to a worker that knew nothing of it.
const PendingInviteTTL = sessions.PendingInvite

// Admission decides about one new session (overload.Decide). retryAfter is
// the configured Retry-After, in seconds, whether it refuses or not: the
// door gives it to its own refusal of the session further on (no worker
// could take it).
type Admission func(m *sipscan.Msg, now int64) (r overload.Refusal, retryAfter int)

// Target is what the door hands frames to: a worker's queue.
type Target interface {
	// SendSeq queues a frame for the worker and numbers it; the error is
	// wire.ErrQueueFull for a full queue, another one for a worker that
	// has ended.
	SendSeq(frame []byte, now int64) (seq uint64, err error)
	// Waiting reports whether the frame numbered seq still waits in the
	// queue.
	Waiting(seq uint64) bool
}

// Immediate is a Target that handles each frame before the door sees
// another (a worker's door and the worker itself, or the supervisor's door
// it passes to): none of its requests waits in a queue, so the door keeps
// no record of them for absorbing retransmissions, which would only be
// written and swept.
type Immediate interface {
	Immediate() bool
}

func immediate(w Target) bool {
	i, ok := w.(Immediate)
	return ok && i.Immediate()
}

// Passer is a Target that passes datagrams on to another door, which
// decides and counts them (a worker reading its own socket passes some to
// the supervisor's): when Passes reports true the door neither counts the
// datagram forwarded or admitted, nor follows its session, nor binds its
// Call-ID, so that the next message of the call is decided afresh.
type Passer interface {
	Passes() bool
}

// Picker chooses a worker for new work; nil when none can take it.
// newSession says whether m starts a session, as the door classified it;
// now is the datagram's time, unix ns.
type Picker func(m *sipscan.Msg, newSession bool, now int64) Target

// Replier sends a stateless reply from the door's socket.
type Replier func(b []byte, to netip.AddrPort)

// Door is the per-socket front door.
type Door struct {
	socket int
	pick   Picker
	admit  Admission
	reply  Replier
	// RetryAfter, when set, is the configured Retry-After, in seconds, of
	// the door's own refusals of a new session that admission did not
	// decide here (one another door let in and handed over).
	RetryAfter func() int
	// OnRefused, when set, is told of every refusal the door sends,
	// admission's or its own (no worker, a full queue), and of every probe
	// refused, to log it; the door counts them in Stats. It runs on the
	// door's goroutine.
	OnRefused func(r overload.Refusal, c overload.Class, k sipscan.Kind)
	// Sessions counts the calls and subscriptions in progress that came in
	// through this door: what session limits and the number_of_sessions
	// monitor count. Its MaxCallDuration may be set while the door runs.
	Sessions *sessions.Table
	// OnUnknownEnd, when set, is told of a BYE of a call the door did not
	// see begin (one that came in over another transport); it runs on the
	// door's goroutine.
	OnUnknownEnd func(key uint64)
	// Probe, when set, decides about a probe of the server itself (see
	// IsProbe) before any worker sees it: refuse answers it 503 with
	// Retry-After retryAfter. A probe that is not refused goes to a worker
	// like any request, so that the script answers it.
	Probe func(now int64) (refuse bool, retryAfter int)
	// NoTrack leaves the sessions to other doors: with direct reads the
	// workers' doors follow every session of the group, the supervisor's
	// door only hands messages over.
	NoTrack bool
	// Bans, when set, are the sources refused before anything else (package
	// overload/pike): their datagrams are dropped, or when the list says
	// Reply their requests answered 403, unscanned but for that answer.
	Bans *pike.List
	// Pike, when set, counts the requests read from the socket per source;
	// OnHeavy is told of a source each time its count grows by the
	// counter's step, to report to the supervisor's table.
	Pike    *pike.Counter
	OnHeavy func(src netip.Addr, n uint32)
	// Feedback, when set, is the RFC 7339 feedback in force (package
	// overload/oc): every reply the door sends to a request whose top Via
	// offers oc carries it, its refusals first of all, which tell the
	// sender how much to shed before it sends.
	Feedback func() (oc.Feedback, bool)

	msg    sipscan.Msg
	limits sipscan.Limits
	aff    map[uint64]entry
	ends   endInbox
	queued map[uint64]queuedReq
	out    []byte
	from   netip.AddrPort // source of the datagram in hand
	handed bool           // the datagram in hand was admitted by another door
	read   bool           // the datagram in hand was read from the socket
	sweep  int64          // next sweep, unix ns

	Stats Stats
}

type entry struct {
	w     Target
	until int64 // unix ns: the Call-ID is forgotten from then on
}

// queuedReq is a request handed to a worker, by its transaction: the frame's
// sequence number says whether it still waits in the worker's queue.
type queuedReq struct {
	w   Target
	seq uint64
}

// affinitySlack is how much longer than its time a Call-ID may stay bound:
// a binding moves on only when its time would grow, and then by the slack
// too, so that a call's messages of the next second leave the table as it
// is instead of writing it at each one.
const affinitySlack = int64(time.Second)

// ttl is until when the Call-ID of m stays bound after m: long after an
// INVITE, short again after its ACK, and never shortened by anything else
// while an INVITE may still be pending.
func ttl(m *sipscan.Msg, now, until int64) int64 {
	want := now + int64(AffinityTTL)
	switch {
	case m.IsRequest && m.Method == sipscan.Invite:
		want = now + int64(PendingInviteTTL)
	case m.IsRequest && m.Method == sipscan.Ack:
		return want
	}
	if until >= want {
		return until
	}
	return want + affinitySlack
}

// Stats are the door's counters.
type Stats struct {
	Received   atomic.Uint64
	Passed     atomic.Uint64 // datagrams another door passed on (Passed)
	Forwarded  atomic.Uint64
	Keepalives atomic.Uint64
	Replied    atomic.Uint64 // stateless replies sent (400 and refusals)
	OwnAcks    atomic.Uint64 // ACKs of those replies, absorbed by the door
	// Malformed counts datagrams that could not be scanned, by reason.
	Malformed [sipscan.NumErrors]atomic.Uint64
	// Refused counts refused new sessions, by reason.
	Refused [overload.NumRefusals]atomic.Uint64
	// ProbesRefused counts probes of the server itself answered 503
	// (Door.Probe).
	ProbesRefused atomic.Uint64
	// Banned counts datagrams from banned sources, dropped or answered 403
	// (Door.Bans).
	Banned atomic.Uint64
	// Dropped counts datagrams no worker could take: no worker (a response
	// or in-dialog message with none ready) or a full queue.
	DroppedNoWorker  atomic.Uint64
	DroppedQueueFull atomic.Uint64
	// ReplyFailed counts stateless replies the socket would not send (its
	// send buffer stayed full); the Replier counts them.
	ReplyFailed atomic.Uint64
	// Absorbed counts retransmitted requests dropped because the original
	// still waited in a worker's queue.
	Absorbed atomic.Uint64
	// Sessions admitted, by kind.
	Admitted [4]atomic.Uint64
	// Affinity is the number of Call-IDs currently bound to a worker.
	Affinity atomic.Int64
}

// New makes a door for the socket with the given index (as workers number
// their sockets).
func New(socket int, pick Picker, admit Admission, reply Replier) *Door {
	return &Door{socket: socket, pick: pick, admit: admit, reply: reply,
		aff: make(map[uint64]entry, 1024), Sessions: sessions.New(PendingInviteTTL),
		queued: make(map[uint64]queuedReq, 1024), out: make([]byte, 0, 4096)}
}

// Handle handles one datagram. frame holds wire.MsgHeaderLen free bytes and
// then the datagram; the door writes the header there and hands the frame to
// a worker as is.
func (d *Door) Handle(frame []byte, from netip.AddrPort, now int64) {
	d.Stats.Received.Add(1)
	if d.Bans != nil && d.Bans.Banned(from.Addr(), now) {
		d.banned(frame[wire.MsgHeaderLen:], from, d.Bans.Reply())
		return
	}
	d.handed = false
	d.read = true
	d.handle(frame, from, now)
	d.read = false
}

// banned refuses a datagram from a banned source: dropped unread, or a
// request answered 403. Another door's Passed or Handed datagrams were
// checked where they were read.
func (d *Door) banned(dgram []byte, from netip.AddrPort, reply bool) {
	d.Stats.Banned.Add(1)
	if !reply {
		return
	}
	d.from = from
	if err := d.limits.Scan(dgram, &d.msg); err == nil && d.msg.IsRequest {
		d.sendReply(dgram, 403, 0)
	}
}

// Passed handles a datagram another door read and passed on (a worker
// reading its own socket gives the supervisor's door what it must not
// decide about): as Handle, counted as passed rather than received.
func (d *Door) Passed(frame []byte, from netip.AddrPort, now int64) {
	d.Stats.Passed.Add(1)
	d.handed = false
	d.handle(frame, from, now)
}

// Handed handles a datagram another door already let in (a worker's door
// with direct reads hands it the messages the supervisor's door placed): it
// is neither a probe nor a new session to admit again, but its call is
// followed here from now on. Handed tells the picker so.
func (d *Door) Handed(frame []byte, from netip.AddrPort, now int64) {
	d.handed = true
	d.handle(frame, from, now)
	d.handed = false
}

// Socket is the index of the door's socket, as workers number their
// sockets.
func (d *Door) Socket() int { return d.socket }

// IsHanded reports, to a Picker, whether the datagram in hand came through
// Handed.
func (d *Door) IsHanded() bool { return d.handed }

func (d *Door) handle(frame []byte, from netip.AddrPort, now int64) {
	d.from = from
	if now >= d.sweep {
		d.expire(now)
	}
	if d.ends.waiting.Load() {
		d.ends.take(d.endSession)
	}
	dgram := frame[wire.MsgHeaderLen:]
	m := &d.msg
	if err := d.limits.Scan(dgram, m); err != nil {
		e := err.(sipscan.Error)
		if e == sipscan.ErrEmpty {
			d.Stats.Keepalives.Add(1)
			return
		}
		d.Stats.Malformed[e].Add(1)
		if m.IsRequest {
			code := 400
			if e == sipscan.ErrBadVersion {
				code = 505
			}
			d.sendReply(dgram, code, 0)
		}
		return
	}
	if d.read && d.Pike != nil && m.IsRequest {
		if n := d.Pike.Hit(from.Addr(), now); n > 0 && d.OnHeavy != nil {
			d.OnHeavy(from.Addr().Unmap(), n)
		}
	}
	wire.PutMsgHeader(frame, d.socket, from, now)
	key := sipscan.CallIDHash(m.CallID)

	// A retransmission whose original still waits in a worker's queue is
	// dropped: the worker will answer the original, and a slow group that
	// queued every retransmission would handle each request several times
	// over, making the wait that made the clients retransmit longer still.
	var tx uint64
	if m.IsRequest && m.Branch != nil {
		tx = sipscan.CallIDHash(m.Branch) ^ uint64(m.Method)<<56
		if q, ok := d.queued[tx]; ok && q.w.Waiting(q.seq) {
			d.Stats.Absorbed.Add(1)
			return
		}
	}

	if e, ok := d.aff[key]; ok && now < e.until {
		if seq, err := e.w.SendSeq(frame, now); err == nil {
			if u := ttl(m, now, e.until); u != e.until {
				e.until = u
				d.aff[key] = e
			}
			d.Stats.Forwarded.Add(1)
			d.track(m, key, now)
			if tx != 0 && !immediate(e.w) {
				d.queued[tx] = queuedReq{e.w, seq}
			}
			return
		} else if err == wire.ErrQueueFull {
			d.Stats.DroppedQueueFull.Add(1)
			return
		}
		// The worker has ended: the transaction is gone with it, so the
		// message is new work for another worker.
		d.unbind(key, e)
	}

	// The ACK of a reply the door sent itself ends a transaction that lives
	// nowhere else: without this, every refused INVITE would cost a worker
	// its ACK.
	if m.Method == sipscan.Ack && sipscan.IsOwnAck(m) {
		d.Stats.OwnAcks.Add(1)
		return
	}
	class, kind := overload.Classify(overload.RequestOf(m))
	if class == overload.ClassProbe && d.Probe != nil && !d.handed {
		if refuse, retry := d.Probe(now); refuse {
			d.Stats.ProbesRefused.Add(1)
			d.refused(overload.RefuseSuspended, class, kind)
			d.sendReply(dgram, 503, retry)
			return
		}
	}
	// A new session or a REGISTER is new work for the pick, a removal
	// too, which admission always lets pass. retry is admission's
	// Retry-After once it decided, -1 before.
	newSession := class == overload.ClassNew || class == overload.ClassRegister || class == overload.ClassRemoval
	retry := -1
	if newSession && d.admit != nil && !d.handed {
		var r overload.Refusal
		if r, retry = d.admit(m, now); r != overload.RefuseNone {
			d.Stats.Refused[r].Add(1)
			d.refused(r, class, kind)
			d.sendReply(dgram, 503, retry)
			return
		}
	}
	w := d.pick(m, newSession, now)
	if w == nil {
		if newSession {
			d.Stats.Refused[overload.RefuseNoWorker].Add(1)
			d.refused(overload.RefuseNoWorker, class, kind)
			d.sendReply(dgram, 503, d.ownRetry(retry))
			return
		}
		d.Stats.DroppedNoWorker.Add(1)
		return
	}
	seq, err := w.SendSeq(frame, now)
	if err != nil && err != wire.ErrQueueFull {
		// The worker ended between the pick and the send (a draining one
		// the pick still held calls for, which has just drained): whatever
		// it held is over, so the message is work for the next pick.
		if w2 := d.pick(m, newSession, now); w2 != nil && w2 != w {
			w = w2
			seq, err = w.SendSeq(frame, now)
		}
	}
	if p, ok := w.(Passer); ok && err == nil && p.Passes() {
		return
	}
	if err != nil {
		if newSession {
			d.Stats.Refused[overload.RefuseQueue].Add(1)
			d.refused(overload.RefuseQueue, class, kind)
			d.sendReply(dgram, 503, d.ownRetry(retry))
			return
		}
		if err == wire.ErrQueueFull {
			d.Stats.DroppedQueueFull.Add(1)
		} else {
			d.Stats.DroppedNoWorker.Add(1)
		}
		return
	}
	d.Stats.Forwarded.Add(1)
	if newSession && !d.handed {
		// A handed session was counted by the door that let it in.
		d.Stats.Admitted[kind].Add(1)
	}
	d.track(m, key, now)
	if tx != 0 && !immediate(w) {
		d.queued[tx] = queuedReq{w, seq}
	}
	// Stray ACKs for non-2xx answers and responses nobody waits for need no
	// affinity; everything else may be followed by more of its transaction.
	if m.IsRequest && m.Method != sipscan.Ack || !m.IsRequest && m.StatusCode < 200 {
		d.aff[key] = entry{w: w, until: ttl(m, now, 0)}
		d.Stats.Affinity.Add(1)
	}
}

// track follows the sessions through the requests a worker was handed.
func (d *Door) track(m *sipscan.Msg, key uint64, now int64) {
	if d.NoTrack {
		return
	}
	if d.Sessions.Track(m, key, now) && d.OnUnknownEnd != nil {
		d.OnUnknownEnd(key)
	}
}

// IsProbe reports whether m is a keepalive probe of the server itself: an
// OPTIONS outside a dialog whose Request-URI names no user, such as
// sip:10.0.0.1:5060 (overload.ClassProbe). Kamailio's dispatcher and
// OpenSIPS's load_balancer probe their destinations this way, and mark one
// that answers 503 as down, so new calls go to another node. An OPTIONS to
// a user (sip:alice@host) is a request to relay, not a probe.
func IsProbe(m *sipscan.Msg) bool {
	c, _ := overload.Classify(overload.RequestOf(m))
	return c == overload.ClassProbe
}

// ownRetry is the Retry-After of the door's own refusal of a new session:
// admission's, when it decided (retry >= 0), else the configured one.
func (d *Door) ownRetry(retry int) int {
	if retry < 0 && d.RetryAfter != nil {
		retry = d.RetryAfter()
	}
	return max(retry, 0)
}

// refused tells OnRefused of a refusal.
func (d *Door) refused(r overload.Refusal, c overload.Class, k sipscan.Kind) {
	if d.OnRefused != nil {
		d.OnRefused(r, c, k)
	}
}

// EndSession ends the call of key at the door's next datagram or sweep: its
// BYE was seen elsewhere (over another transport). Safe for concurrent use.
func (d *Door) EndSession(key uint64) { d.ends.push(key) }

func (d *Door) endSession(key uint64) { d.Sessions.End(key) }

// endInbox holds the ends other goroutines pass to the door; waiting lets
// the door look without a lock at every datagram.
type endInbox struct {
	mu      sync.Mutex
	keys    []uint64
	waiting atomic.Bool
}

func (e *endInbox) push(key uint64) {
	e.mu.Lock()
	e.keys = append(e.keys, key)
	e.waiting.Store(true)
	e.mu.Unlock()
}

func (e *endInbox) take(fn func(uint64)) {
	e.mu.Lock()
	keys := e.keys
	e.keys = nil
	e.waiting.Store(false)
	e.mu.Unlock()
	for _, k := range keys {
		fn(k)
	}
}

func (d *Door) sendReply(req []byte, code, retryAfter int) {
	if d.reply == nil {
		return
	}
	r := sipscan.Reply{Code: code, RetryAfter: retryAfter}
	d.out = r.Append(d.out[:0], req, &d.msg)
	if len(d.out) == 0 {
		return
	}
	if d.Feedback != nil {
		if fb, ok := d.Feedback(); ok {
			d.out, _ = oc.StampResponse(d.out, fb)
		}
	}
	if ap, ok := d.fromAddr(); ok {
		d.reply(d.out, ap)
		d.Stats.Replied.Add(1)
	}
}

func (d *Door) fromAddr() (netip.AddrPort, bool) { return d.from, d.from.IsValid() }

// expire forgets Call-IDs whose transactions can no longer be alive, and
// sessions past their time.
func (d *Door) expire(now int64) {
	d.sweep = now + int64(time.Second)
	for k, e := range d.aff {
		if now >= e.until {
			d.unbind(k, e)
		}
	}
	d.Sessions.Expire(now)
	for k, q := range d.queued {
		if !q.w.Waiting(q.seq) {
			delete(d.queued, k)
		}
	}
}

func (d *Door) unbind(key uint64, e entry) {
	delete(d.aff, key)
	d.Stats.Affinity.Add(-1)
}
