package worker

import (
	"math"
	"sync/atomic"

	"github.com/sipvisor/sipvisor/listeners/steer"

	"errors"
	"fmt"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sipvisor/sipvisor/frontdoor"
	"github.com/sipvisor/sipvisor/internal/rawio"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/overload/oc"
	"github.com/sipvisor/sipvisor/overload/sessions"
)

// Direct reads (wire.EnvDirect): a UDP worker reads the group's port through
// a socket of its own in the port's SO_REUSEPORT group, whose kernel program
// places each datagram by its Call-ID, so that the supervisor's hop costs
// nothing for most messages. The worker runs a front door of its own over
// what it reads there and over the messages the supervisor's door hands it:
// one door per worker follows every session of the worker's calls, wherever
// their messages came in, and counts them in the stats page.

// steerTable is the last FrameSteer: the slot of each bucket, and since
// when (unix ns) it has had it.
type steerTable struct {
	slots []uint8
	since []int64
	// fresh is, by bucket, when another than its slot last took a new
	// session of it (unix ns, 0 for never).
	fresh []int64
}

// settled reports whether the bucket of callID has been slot's long enough
// that no call of its previous worker may still be pending: a message of a
// Call-ID this worker does not know then belongs to no call anywhere.
// Without a table, or with one that gives the bucket to another slot (the
// kernel's program has moved it and the frame that says so is still on its
// way), nothing is settled.
func (t *steerTable) settled(slot uint8, callID []byte, now int64) bool {
	n := len(t.slots)
	if n != steer.Buckets || len(t.since) != n {
		return false
	}
	// The kernel's program places the Call-ID by the same function.
	b := steer.Bucket(callID)
	return t.slots[b] == slot && now-t.since[b] >= int64(sessions.PendingInvite)
}

// newSettled reports whether a new session of callID's bucket is this
// slot's to take: the bucket is its own, and no other took a new session of
// it within a transaction's lifetime, so that this cannot be the
// retransmission of a request another holds.
func (t *steerTable) newSettled(slot uint8, callID []byte, now int64) bool {
	n := len(t.slots)
	if n != steer.Buckets || len(t.fresh) != n {
		return false
	}
	b := steer.Bucket(callID)
	return t.slots[b] == slot && now-t.fresh[b] >= int64(sessions.TransactionLifetime)
}

// toDoor decides where a message goes that the worker's door has no
// affinity for: to the supervisor's door (true), or to this worker. One the
// supervisor's door handed over stays. A new session goes there from a
// draining worker, which takes none, and while another took a new session
// of its bucket less than a transaction's lifetime ago: it may be the
// retransmission of a request that one holds (read before the bucket
// moved, or by the supervisor's door), which that one must absorb. Any
// other message of a Call-ID unknown here goes there while its bucket is
// not settled: its call may live in the worker that had the bucket, which
// the supervisor's door knows; but a response whose branch names the
// worker that made it (owned), which the engine finds by its branch, not
// by its Call-ID: its own transaction, or passed to that worker through
// the supervisor (a TCP worker's call to a UDP callee, whose answers the
// kernel places by Call-ID on a UDP worker).
func toDoor(handed, draining, newSession, owned bool, t *steerTable, slot uint8, callID []byte, now int64) bool {
	switch {
	case handed, owned:
		return false
	case newSession:
		return draining || !t.newSettled(slot, callID, now)
	}
	return !t.settled(slot, callID, now)
}

// admitLocal is the one admission decision (overload.Decide) over what a
// worker reading its own socket knows: the gate word the supervisor wrote
// into its page (the server refusing all, the gate open, the Retry-After),
// its quota of the kind less what it admitted, and how long the datagram
// waited in its socket against queue_delay_admission (limit, ns; 0 for
// none), which it alone measures. Where that is not enough the answer
// asks the supervisor: a gate not open, a quota used up, a REGISTER about
// to be refused (it may refresh a live binding, which only the supervisor
// knows).
func admitLocal(c overload.Class, k sipscan.Kind, gate, quota, admitted uint64, limit, wait int64) overload.Answer {
	st := overload.State{RefuseAll: gate&wire.GateRefuseAll != 0, RetryAfter: wire.GateRetryAfter(gate),
		RefreshUnknown: true, RoomIsQuota: true, QueueFull: limit > 0 && wait > limit, LoadUnknown: gate&wire.GateOpen == 0}
	for i := range st.Room {
		st.Room[i] = overload.Unlimited
	}
	switch {
	case quota == math.MaxUint64:
	case quota > admitted:
		st.Room[k] = int64(min(quota-admitted, overload.Unlimited))
	default:
		st.Room[k] = 0
	}
	return overload.Decide(c, k, st)
}

// parseDirect reads wire.EnvDirect, "SOCKET:SLOT": SOCKET indexes the
// sockets named in wire.EnvSockets (sockets of them).
func parseDirect(s string, sockets int) (socket int, slot uint8, err error) {
	a, b, ok := strings.Cut(s, ":")
	if !ok {
		return 0, 0, errors.New("want SOCKET:SLOT")
	}
	socket, err = strconv.Atoi(a)
	if err != nil || socket < 0 || socket >= sockets {
		return 0, 0, fmt.Errorf("socket %q: want the index of one of the %d UDP sockets named in %s", a, sockets, wire.EnvSockets)
	}
	v, err := strconv.ParseUint(b, 10, 8)
	if err != nil {
		return 0, 0, fmt.Errorf("slot %q: want 0 to 255", b)
	}
	return socket, uint8(v), nil
}

// openDirect readies the passed socket fd for the loop: non-blocking, and
// stamped with each datagram's arrival, whence how long it waited. It
// reports whether the socket is an AF_INET6 one.
func openDirect(fd int) (v6 bool, err error) {
	unix.CloseOnExec(fd)
	typ, err := unix.GetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TYPE)
	if err != nil {
		return false, fmt.Errorf("descriptor %d: %w", fd, err)
	}
	if typ != unix.SOCK_DGRAM {
		return false, fmt.Errorf("descriptor %d: not a datagram socket", fd)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return false, fmt.Errorf("descriptor %d: %w", fd, err)
	}
	switch sa.(type) {
	case *unix.SockaddrInet4:
	case *unix.SockaddrInet6:
		v6 = true
	default:
		return false, fmt.Errorf("descriptor %d: not an IP socket", fd)
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		return false, fmt.Errorf("descriptor %d: %w", fd, err)
	}
	tv := unix.NsecToTimeval(int64(blockFor))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		return false, fmt.Errorf("descriptor %d: %w", fd, err)
	}
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_TIMESTAMPNS, 1); err != nil {
		return false, fmt.Errorf("descriptor %d: receive timestamps: %w", fd, err)
	}
	return v6, nil
}

var sizeofTimespec = int(unsafe.Sizeof(unix.Timespec{}))

// timestamp is the kernel's receive time (SO_TIMESTAMPNS) among a
// datagram's control messages, unix ns; 0 without one. Parsed in place:
// unix.ParseSocketControlMessage allocates per datagram.
func timestamp(oob []byte) int64 {
	for len(oob) >= unix.SizeofCmsghdr {
		h := (*unix.Cmsghdr)(unsafe.Pointer(&oob[0]))
		l := int(h.Len)
		if l < unix.SizeofCmsghdr || l > len(oob) {
			return 0
		}
		if h.Level == unix.SOL_SOCKET && h.Type == unix.SCM_TIMESTAMPNS && l >= unix.CmsgLen(sizeofTimespec) {
			return (*unix.Timespec)(unsafe.Pointer(&oob[unix.CmsgLen(0)])).Nano()
		}
		next := unix.CmsgSpace(l - unix.SizeofCmsghdr)
		if next > len(oob) {
			return 0
		}
		oob = oob[next:]
	}
	return 0
}

// drainQuiet is how long a draining worker's socket must read nothing
// before the worker says it drained: the supervisor takes its buckets from
// the kernel's program as the drain begins (within its refresh), so what
// comes after is what the socket had queued, read in the loop's next turns,
// and what the kernel placed until the program changed.
const drainQuiet = 2 * tickEvery

// sweepEvery is how often an idle worker expires its door's sessions: the
// door's own sweep runs on datagrams only.
const sweepEvery = int64(time.Second)

// direct is a worker's direct reading: its socket and its door.
type direct struct {
	w      *workerLoop
	fd     int
	v6     bool
	socket int   // index of the socket among Env.Sockets
	slot   uint8 // the worker's slot in the port's group
	oob    []byte
	door   *frontdoor.Door
	self   selfTarget
	pass   passTarget
	steer  steerTable

	// The datagram in hand: when the kernel received it (0 for a handed
	// frame, or without a timestamp), and the frame the door gave this
	// worker, if it did.
	arrived int64
	// behind is how many datagrams read in the same batch follow the one
	// in hand.
	behind int
	// emptied: the batch of the datagram in hand was short, so the socket
	// had nothing left when it was read.
	emptied bool
	// wait is how long the datagram in hand counts as having waited: what
	// it waited in the socket, but no longer than the backlog behind it
	// takes to handle (waitFor).
	wait int64
	// cost and size are moving averages of the handling time (ns) and
	// length of the datagrams read from the socket.
	cost, size float64
	took       bool
	frame      []byte

	seq      uint64
	lastRead int64 // unix ns of the last datagram read from the socket
	lastDoor int64 // door time of the last datagram through the door
	sweptAt  int64
	drainAt  int64
	peak     waitPeak
	shown    int64    // OffWait as last stored
	kinds    [4]int64 // OffKindSessions as last stored
	admitted [4]uint64
	refused  [overload.NumRefusals]uint64
	refusals overload.RefusalLog
	// asked: the supervisor refused the datagram in hand when asked, and
	// logged it; the door is about to tell of it.
	asked bool
	// counters are the door's other counters, in wire.DoorCounter order,
	// and shown their values as last stored.
	counters []*atomic.Uint64
	shownC   []uint64
}

func newDirect(w *workerLoop, fd int, v6 bool, socket int, slot uint8) *direct {
	d := &direct{w: w, fd: fd, v6: v6, socket: socket, slot: slot, oob: make([]byte, 64)}
	d.self.d, d.pass.d = d, d
	d.door = frontdoor.New(socket, d.pick, d.admit, d.reply)
	d.door.Probe = d.probe
	d.door.RetryAfter = func() int { return wire.GateRetryAfter(w.stats.Load(wire.OffGate)) }
	// The supervisor logs what it refused when asked; what this door
	// refuses alone is logged here.
	d.door.OnRefused = func(r overload.Refusal, c overload.Class, k sipscan.Kind) {
		if d.asked {
			d.asked = false
			return
		}
		d.refusals.Note(w.env.Logger, "worker door", r, c, k)
	}
	d.door.Feedback = func() (oc.Feedback, bool) { return wire.OCFeedback(w.stats.Load(wire.OffOverloadControl)) }
	// The worker's bans and its count of requests per source, which the
	// TCP reading of a worker shares; the supervisor sums the counts.
	d.door.Bans, d.door.Pike = &w.bans, &w.pike
	d.door.OnHeavy = w.notePike
	st := &d.door.Stats
	d.counters = []*atomic.Uint64{wire.DoorKeepalives: &st.Keepalives, wire.DoorReplied: &st.Replied,
		wire.DoorOwnAcks: &st.OwnAcks, wire.DoorProbesRefused: &st.ProbesRefused, wire.DoorAbsorbed: &st.Absorbed,
		wire.DoorDroppedNoWorker: &st.DroppedNoWorker, wire.DoorReplyFailed: &st.ReplyFailed,
		wire.DoorBanned: &st.Banned}
	for i := range st.Malformed[:min(len(st.Malformed), wire.MaxMalformed)] {
		d.counters = append(d.counters, &st.Malformed[i])
	}
	d.shownC = make([]uint64, len(d.counters))
	return d
}

// selfTarget is this worker as the door's target: the frame is kept, and
// handled once the door returns.
type selfTarget struct{ d *direct }

func (t *selfTarget) SendSeq(f []byte, now int64) (uint64, error) {
	t.d.took, t.d.frame = true, f
	t.d.seq++
	return t.d.seq, nil
}

// Waiting is false: a frame is handled before the door sees another.
func (t *selfTarget) Waiting(uint64) bool { return false }
func (t *selfTarget) Immediate() bool     { return true }

// passTarget is the supervisor's door as the worker's door's target.
type passTarget struct{ d *direct }

func (t *passTarget) SendSeq(f []byte, now int64) (uint64, error) {
	d := t.d
	// The supervisor's door placed it here: this worker holds its call now.
	// Sent back, it would come back again.
	if d.door.IsHanded() {
		return d.self.SendSeq(f, now)
	}
	if err := d.w.env.Note(wire.DoorNote(f)); err != nil {
		return 0, err
	}
	d.seq++
	return d.seq, nil
}

// Waiting is false: the supervisor's door decides about what it is passed,
// and absorbs its retransmissions there.
func (t *passTarget) Waiting(uint64) bool { return false }
func (t *passTarget) Immediate() bool     { return true }

// Passes is true but for a handed frame, which stays here: the supervisor's
// door decides about, counts and follows what is passed to it.
func (t *passTarget) Passes() bool { return !t.d.door.IsHanded() }

func (d *direct) pick(m *sipscan.Msg, newSession bool, now int64) frontdoor.Target {
	owned := false
	if m.StatusCode != 0 {
		_, owned = wire.BranchOwner(m.Branch)
	}
	if toDoor(d.door.IsHanded(), d.w.draining, newSession, owned, &d.steer, d.slot, m.CallID, now) {
		return &d.pass
	}
	return &d.self
}

func (d *direct) admit(m *sipscan.Msg, now int64) (overload.Refusal, int) {
	gate := d.w.stats.Load(wire.OffGate)
	if toDoor(false, d.w.draining, true, false, &d.steer, d.slot, m.CallID, now) {
		// The supervisor's door will decide (pick passes it there).
		return overload.RefuseNone, wire.GateRetryAfter(gate)
	}
	c, k := overload.Classify(overload.RequestOf(m))
	var wait int64
	if d.arrived > 0 {
		wait = d.wait
	}
	ans := admitLocal(c, k, gate, d.w.stats.Load(wire.OffQuota+8*int(k)), d.door.Stats.Admitted[k].Load(),
		int64(d.w.stats.Load(wire.OffQueueDelayLimit)), wait)
	if !ans.Ask {
		return ans.Refusal, ans.RetryAfter
	}
	r, retry := d.w.env.Ask(m.Method, m.CallID)
	d.asked = r != overload.RefuseNone
	if retry == 0 {
		retry = wire.GateRetryAfter(gate)
	}
	return r, retry
}

// waitCheck is the wait in the socket from which waitFor checks it
// against the backlog: below it, the wait counts as it is.
const waitCheck = int64(10 * time.Millisecond)

// skbOverhead is roughly what the kernel counts against a socket's buffer
// for a datagram beyond its bytes.
const skbOverhead = 768

// waitFor is how long a datagram that waited measured ns in the socket
// counts as having waited: no longer than the datagrams still in the
// socket take to handle, at what each cost lately. A datagram that waited
// while the worker was not scheduled at all (a busy machine) has no
// backlog behind it, and its wait says nothing of the worker's load, as
// the supervisor's door, which weighs queues, would not count it either;
// behind a burst it counts in full.
func (d *direct) waitFor(measured int64) int64 {
	if measured <= waitCheck || d.cost == 0 {
		return measured
	}
	// The datagrams read with it in one batch wait behind it as those in
	// the socket do.
	behind := float64(d.behind)
	if d.behind == 0 && d.emptied {
		// The last of a batch that emptied the socket: nothing waited
		// behind it, which spares the calls that would ask.
		return 0
	}
	// The next datagram's length, 0 with none: exact, where the buffer's
	// count below lags, as UDP frees read datagrams in batches.
	if next, err := unix.IoctlGetInt(d.fd, unix.SIOCINQ); err == nil && next == 0 {
		return min(measured, int64(behind*d.cost))
	}
	queued, _, e := rawio.SocketMemory(d.fd)
	if e != 0 {
		return measured
	}
	backlog := max(float64(queued)/(d.size+skbOverhead)+behind, 1) * d.cost
	return min(measured, int64(backlog))
}

func (d *direct) probe(int64) (bool, int) {
	ans := admitLocal(overload.ClassProbe, sipscan.KindOther, d.w.stats.Load(wire.OffGate), 0, 0, 0, 0)
	return ans.Refused(), ans.RetryAfter
}

// reply sends the door's stateless reply from the socket the request came
// to. A full send buffer is waited out briefly, then the reply dropped: the
// client retransmits, and the worker must not stall on one peer.
func (d *direct) reply(b []byte, to netip.AddrPort) {
	sa := rawio.MakeSockaddr(to, d.v6)
	for tries := 0; ; tries++ {
		_, e := rawio.Sendto(d.fd, b, &sa)
		switch {
		case e == rawio.EINTR:
			continue
		case e == rawio.EAGAIN && tries < 3:
			unix.Poll([]unix.PollFd{{Fd: int32(d.fd), Events: unix.POLLOUT}}, 1)
			continue
		case e != 0:
			d.door.Stats.ReplyFailed.Add(1)
		}
		return
	}
}

// read handles a datagram read from the socket: f is the read buffer up to
// its end, the datagram after wire.MsgHeaderLen free bytes; oob its control
// messages.
func (d *direct) read(f []byte, from netip.AddrPort, oob []byte) {
	now := time.Now().UnixNano()
	d.arrived = timestamp(oob)
	d.lastRead, d.lastDoor = now, now
	d.w.stats.Add(wire.OffDirectRead, 1)
	if d.arrived > 0 {
		d.wait = d.waitFor(max(now-d.arrived, 0))
		d.peak.add(now, d.wait)
		d.showWait()
	}
	d.size += (float64(len(f)-wire.MsgHeaderLen) - d.size) / 16
	d.door.Handle(f, from, now)
	// The socket was the datagram's queue: its wait there counts against
	// max_queue_wait as a frame's wait in the data channel does.
	at := now
	if d.arrived > 0 {
		at = d.arrived
	}
	d.take(d.socket, from, at)
}

// handed handles a message frame the supervisor's door handed over.
func (d *direct) handed(f []byte) {
	sock, from, at := wire.ParseMsgHeader(f)
	d.arrived = 0
	d.lastDoor = at
	d.door.Handed(f, from, at)
	// The door wrote its own socket over the frame's: the reply must leave
	// from the one the message came to.
	d.take(sock, from, at)
}

// take handles the frame the door gave this worker, if it did, as the data
// channel's message frames are handled.
func (d *direct) take(sock int, from netip.AddrPort, at int64) {
	d.showSessions()
	if !d.took {
		return
	}
	d.took = false
	m := Message{Socket: sock, From: from, Data: d.frame[wire.MsgHeaderLen:]}
	d.frame = nil
	if d.w.stale(m.Data, at) {
		d.w.stats.Add(wire.OffStale, 1)
		return
	}
	took := d.w.busy(func() { d.w.h.HandleMessage(&m) })
	d.cost += (float64(took) - d.cost) / 16
}

// setSteer takes a FrameSteer.
func (d *direct) setSteer(b []byte) {
	slots, since, fresh, err := wire.ParseSteerFrame(b)
	if err != nil {
		d.w.env.Logger.Warn("steering table", "error", err)
		return
	}
	d.steer = steerTable{slots: slots, since: since, fresh: fresh}
}

// tick does, from the loop's timer, what the datagrams do when none come.
func (d *direct) tick(now int64) {
	d.peak.roll(now)
	d.showWait()
	if v := int64(d.w.stats.Load(wire.OffMaxCallDuration)); v > 0 {
		d.door.Sessions.MaxCallDuration.Store(v)
	}
	if now-d.lastDoor >= sweepEvery && now-d.sweptAt >= sweepEvery {
		d.door.Sessions.Expire(now)
		d.sweptAt = now
		d.showSessions()
	}
}

// quiet reports whether a draining worker's socket has read nothing for
// drainQuiet.
func (d *direct) quiet(now int64) bool { return now >= d.quietAt() }

func (d *direct) quietAt() int64 { return max(d.drainAt, d.lastRead) + int64(drainQuiet) }

// wake is when the loop must tick, at the latest next: when the wait shown
// is to fall, and when a draining worker's socket will have been quiet.
func (d *direct) wake(next time.Time, now int64, draining bool) time.Time {
	if t := d.due(); t > now && t < next.UnixNano() {
		next = time.Unix(0, t)
	}
	if draining {
		if t := d.quietAt(); t > now && t < next.UnixNano() {
			next = time.Unix(0, t)
		}
	}
	return next
}

// due is when the wait shown moves next with no datagram, 0 for never.
func (d *direct) due() int64 {
	if d.shown == 0 {
		return 0
	}
	return d.peak.start + wire.WaitWindow
}

func (d *direct) showWait() {
	if v := d.peak.value(); v != d.shown {
		d.shown = v
		d.w.stats.Store(wire.OffWait, uint64(v))
	}
}

func (d *direct) showSessions() {
	st := &d.door.Stats
	for k := range d.kinds {
		if v := d.door.Sessions.Counts[k].Load(); v != d.kinds[k] {
			d.kinds[k] = v
			d.w.stats.Store(wire.OffKindSessions+8*k, uint64(v))
		}
		if v := st.Admitted[k].Load(); v != d.admitted[k] {
			d.admitted[k] = v
			d.w.stats.Store(wire.OffDoorAdmitted+8*k, v)
		}
	}
	for r := range d.refused {
		if v := st.Refused[r].Load(); v != d.refused[r] {
			d.refused[r] = v
			d.w.stats.Store(wire.OffDoorRefused+8*r, v)
		}
	}
	for i, c := range d.counters {
		if v := c.Load(); v != d.shownC[i] {
			d.shownC[i] = v
			d.w.stats.Store(wire.OffDoorCounters+8*i, v)
		}
	}
}

// waitPeak is the longest wait of the window in progress and of the one
// before it: the larger of the two is shown, so that a peak stays in view a
// whole window wherever in its own window it came, and a supervisor that
// samples once a window sees it.
type waitPeak struct{ start, cur, prev int64 }

func (p *waitPeak) roll(now int64) {
	if now-p.start < wire.WaitWindow {
		return
	}
	if now-p.start < 2*wire.WaitWindow {
		p.prev = p.cur
	} else {
		p.prev = 0
	}
	p.cur, p.start = 0, now
}

func (p *waitPeak) add(now, wait int64) {
	p.roll(now)
	p.cur = max(p.cur, wait)
}

func (p *waitPeak) value() int64 { return max(p.cur, p.prev) }
