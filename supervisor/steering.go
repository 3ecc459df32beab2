package supervisor

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sipvisor/sipvisor/internal/rawio"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/listeners"
	"github.com/sipvisor/sipvisor/listeners/steer"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/overload/sessions"
	"github.com/sipvisor/sipvisor/pool"
	"golang.org/x/sys/unix"
)

// steering is one UDP group's direct reads (udp_direct_reads): the sockets
// its workers read in the port's SO_REUSEPORT group, the table of the
// kernel program that places each datagram by its Call-ID, and the gate the
// workers' own doors read.
//
// Rule: the program spreads datagrams over the workers only while
// admission is open to all but for the session limits
// (overload.Admission.OpenToAll; the limits are kept by the quotas each
// worker is given, Admission.Room) and no worker is in slow start;
// otherwise every datagram goes to the supervisor's door as without direct
// reads, so refusals and ramps are decided where they always were. The
// door places new sessions by the same buckets while no worker ramps, so a
// switch moves no call. A bucket that moves keeps a note of the worker that
// had it for a pending INVITE's lifetime: a call of that worker's still
// reaches it, through the door.
type steering struct {
	s        *Supervisor
	gr       *groupRun
	sock     *listeners.Socket
	udpIndex int
	u        *udpDoor

	refreshMu sync.Mutex
	mu        sync.Mutex
	slots     []*slot // slot i is member i+1 of the port's group
	// shadow is each bucket's worker; table is the program's, shadow while
	// datagrams go to the workers and all the door's (0) otherwise.
	shadow steer.Table
	table  steer.Table
	since  [steer.Buckets]int64
	prev   [steer.Buckets]prevOwner
	direct bool
	// openSince is when the gate was last seen to open (or the group to be
	// suspended), 0 while it is closed otherwise: datagrams go to workers
	// only after it has been so a while, so that a gate near a threshold
	// does not move buckets back and forth.
	openSince time.Time
	gen       int
	sent      map[int]int // worker ID → the table generation it was sent
	// fresh is, by bucket, when the door last placed a new session of it
	// on another worker than the bucket's (unix ns): a new session of the
	// bucket read by its worker within a transaction's lifetime of that may
	// be a retransmission, which the worker passes to the door. sentFresh is
	// fresh as the workers were last sent it.
	fresh     [steer.Buckets]atomic.Int64
	sentFresh [steer.Buckets]int64
	// placed is, by bucket, when the door last placed a message of it on
	// the bucket's worker, and directAt when datagrams last went to the
	// workers (unix ns): a bucket that moves leaves calls behind only if
	// either came after it was given to the worker it leaves.
	placed   [steer.Buckets]atomic.Int64
	directAt int64

	view atomic.Pointer[steerView]
	kick chan struct{}
	// closed is admission's closed state as the last refresh found it,
	// changedAt when it, the table or the freshness last changed, and pace
	// the time to the next refresh the loop makes unasked (steerPace).
	closed    atomic.Pointer[string]
	changedAt time.Time
	pace      atomic.Int64
	// members is how many workers the program places datagrams on.
	members atomic.Int64
	// retired is the counters of workers that exited, by page offset
	// (counterWords), so that a group's totals never go down.
	retired map[int]uint64
}

// counterWords are the counters of the workers' pages that the supervisor
// adds up per group.
var counterWords = func() []int {
	w := []int{wire.OffDirectRead}
	for k := range 4 {
		w = append(w, wire.OffDoorAdmitted+8*k)
	}
	for r := range int(overload.NumRefusals) {
		w = append(w, wire.OffDoorRefused+8*r)
	}
	for i := range wire.DoorMalformed + int(sipscan.NumErrors) {
		w = append(w, wire.OffDoorCounters+8*i)
	}
	return w
}()

// slot is one member socket of the port's group, which a worker reads.
// It stays open for the group's life, so that members keep their numbers.
type slot struct {
	f  *os.File
	fd int
	id int // the worker that holds it, 0 when free, -id while it closes
	w  *pool.Worker
}

// prevOwner is the worker that had a bucket before it moved.
type prevOwner struct {
	w     *pool.Worker
	until int64 // unix ns
}

// steerView is what the door reads on its goroutine, swapped whole.
type steerView struct {
	gen    int
	direct bool
	owner  [steer.Buckets]*pool.Worker
	prev   [steer.Buckets]prevOwner
}

// directAfter is how long the gate must stay open before datagrams go to
// the workers again.
const directAfter = time.Second

// directBlocked is why datagrams go to the supervisor's door, not to the
// workers, or "" if nothing keeps them from the workers: closed is why
// admission is closed ("" if open), members the ready workers, ramps those
// still in slow start, readableFor how long admission has been open or
// suspended. A closed admission sends them to the door, which decides
// each new session, but a suspension, which refuses every one: the workers
// refuse them as the door would (wire.GateRefuseAll).
func directBlocked(closed string, members, ramps int, readableFor time.Duration) string {
	switch {
	case closed != "" && closed != overload.ClosedSuspended:
		return closed
	case members == 0:
		return "no ready worker"
	case ramps > 0:
		return "slow start"
	case readableFor < directAfter:
		return "admission just opened"
	}
	return ""
}

// steerEvery is how often the gate is evaluated when nothing else asks
// while it may change by itself: the longest a worker admits by itself
// after a limit comes near.
const steerEvery = 100 * time.Millisecond

// steerQuiet is how often it is evaluated while nothing in it changes but
// by an event that asks for a refresh at once (a worker's state, admission
// opening or closing, a setting, the throttle at its echo): an idle
// server's supervisor then wakes a few times a second rather than ten.
const steerQuiet = time.Second

// steerSettle is how long after the last change of the table, the gate or
// the buckets' freshness the refresh keeps to steerEvery.
const steerSettle = 5 * time.Second

// steerPace is the time to the next refresh no event asks for: closed is
// why admission is closed ("" if open), limited whether a session limit or
// queue admission is set (the quotas and the queues' fill move with every
// session), direct whether datagrams go to the workers (until they do,
// directAfter or a ramp runs out by the clock), sinceChange the time since
// the table, the gate or the freshness last changed.
func steerPace(closed string, limited, direct bool, sinceChange time.Duration) time.Duration {
	if closed != "" || limited || !direct || sinceChange < steerSettle {
		return steerEvery
	}
	return steerQuiet
}

func newSteering(s *Supervisor, gr *groupRun, sock *listeners.Socket, udpIndex int) *steering {
	st := &steering{s: s, gr: gr, sock: sock, udpIndex: udpIndex, sent: map[int]int{}, kick: make(chan struct{}, 1),
		retired: map[int]uint64{}}
	st.view.Store(&steerView{})
	st.pace.Store(int64(steerEvery))
	// Until the first refresh every datagram is the door's: without a
	// program the kernel would spread them over the members by address.
	if err := st.attach(steer.DoorProgram()); err != nil {
		s.log.Warn("steering program not installed; the kernel spreads datagrams by address until it is", "group", gr.g.Name(), "error", err)
	}
	return st
}

// workerFiles gives a worker about to start its socket of the group: a free
// slot's, or a new member's.
func (st *steering) workerFiles(id int) ([]*os.File, []string, error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	k := slices.IndexFunc(st.slots, func(sl *slot) bool { return sl.id == 0 })
	if k < 0 {
		f, err := listeners.JoinGroup(st.sock)
		if err != nil {
			return nil, nil, err
		}
		// Not f.Fd(), which would make the socket blocking for the
		// workers too: the flag belongs to the socket, not the descriptor.
		fd := -1
		if rc, err := f.SyscallConn(); err == nil {
			rc.Control(func(x uintptr) { fd = int(x) })
		}
		st.slots = append(st.slots, &slot{f: f, fd: fd})
		k = len(st.slots) - 1
	}
	st.slots[k].id = id
	st.slots[k].w = nil
	return []*os.File{st.slots[k].f}, []string{fmt.Sprintf("%s=%d:%d", wire.EnvDirect, st.udpIndex, k+1)}, nil
}

// poke asks for a refresh soon; it never blocks (pool.GroupOptions.OnRoutable).
func (st *steering) poke() {
	select {
	case st.kick <- struct{}{}:
	default:
	}
}

// loop refreshes on every change of the group and at the pace the last
// refresh set (steerPace).
func (st *steering) loop(ctx context.Context) error {
	t := newTicks(steerEvery)
	defer t.Stop()
	for {
		fired := false
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			fired = true
		case <-st.kick:
		}
		st.refresh(time.Now())
		t.arm(time.Duration(st.pace.Load()), fired)
	}
}

// noteClosed asks for a refresh if admission's closed state is no longer
// the one the last refresh wrote (the throttle, which moves at its echo).
func (st *steering) noteClosed(closed string) {
	if p := st.closed.Load(); p == nil || *p != closed {
		st.poke()
	}
}

// refresh writes the gate into every worker's page, places the buckets,
// and installs the program and tells the workers when the table changed.
func (st *steering) refresh(now time.Time) {
	s, gr := st.s, st.gr
	// One refresh at a time, from reading the state to writing the pages:
	// two interleaved could leave an older gate in force. refreshMu is
	// never held by one who holds the group's lock (workerFiles runs under
	// it and takes st.mu), and the group's lock is never taken under st.mu.
	st.refreshMu.Lock()
	defer st.refreshMu.Unlock()
	ws := gr.g.Workers()
	closed := s.ov.Closed(gr.gate)
	if p := st.closed.Load(); p == nil || *p != closed {
		st.closed.Store(&closed)
		st.changedAt = now
	}
	open := closed == ""
	probes, retry := s.ov.ProbeRefused()
	if !probes {
		retry = s.retryAfter()
	}
	gate := wire.Gate(open, probes, retry)
	if probes {
		// Suspended or stopping: every new session is refused, and the
		// workers need not ask to refuse one.
		gate |= wire.GateRefuseAll
	}
	delayLimit := uint64(max(s.ov.Limits().QueueDelay.Load(), 0))
	var maxCall uint64
	if gr.door != nil {
		maxCall = uint64(gr.door.Sessions.MaxCallDuration.Load())
	}
	room := s.ov.Room(gr.gate)
	limited := s.ov.Limits().QueueAdmission.Load() > 0
	for _, r := range room {
		limited = limited || r != overload.Unlimited
	}
	// A refresh from elsewhere than the loop may find the pace should
	// quicken: the loop, asleep for steerQuiet, is told.
	defer func() {
		pace := steerPace(closed, limited, st.direct, now.Sub(st.changedAt))
		if old := time.Duration(st.pace.Swap(int64(pace))); pace < old {
			st.poke()
		}
	}()
	for _, w := range ws {
		p := w.Page()
		p.Store(wire.OffQueueDelayLimit, delayLimit)
		p.Store(wire.OffMaxCallDuration, maxCall)
		for k, r := range room {
			p.Store(wire.OffQuota+8*k, quota(p.Load(wire.OffDoorAdmitted+8*k), r, len(ws)))
		}
		// The gate last: a worker that sees it open sees its quota.
		p.Store(wire.OffGate, gate)
	}

	st.mu.Lock()
	defer st.mu.Unlock()
	byID := make(map[int]*pool.Worker, len(ws))
	for _, w := range ws {
		byID[w.ID] = w
	}
	// A slot keeps its worker once it has it, gone or not, until exited
	// frees it: the group's counters add up the workers' pages through it.
	for _, sl := range st.slots {
		if w := byID[sl.id]; sl.id > 0 && w != nil {
			sl.w = w
		}
	}
	// A suspended group's workers read on: they refuse new sessions
	// themselves (wire.GateRefuseAll), without the supervisor's hop.
	switch readable := open || closed == overload.ClosedSuspended; {
	case !readable:
		st.openSince = time.Time{}
	case st.openSince.IsZero():
		st.openSince = now
	}
	// The buckets' workers, whether datagrams go to them or to the door:
	// the door places new sessions by the same table while no worker ramps,
	// so that a call's worker is the same either way and a switch moves
	// nothing.
	var members []uint8
	for i, sl := range st.slots {
		if sl.w != nil && sl.w.State() == pool.Ready {
			members = append(members, uint8(i+1))
		}
	}
	nowNs := now.UnixNano()
	if shadow := assignBuckets(st.shadow, members); shadow != st.shadow {
		for b := range shadow {
			if shadow[b] == st.shadow[b] {
				continue
			}
			// The worker that had the bucket holds calls of it only if
			// datagrams went to it or the door placed some there.
			if old := st.shadow[b]; old != 0 && (st.directAt >= st.since[b] || st.placed[b].Load() >= st.since[b]) {
				st.prev[b] = prevOwner{w: st.slots[old-1].w, until: nowNs + int64(sessions.PendingInvite)}
				st.fresh[b].Store(nowNs)
			}
			st.since[b] = nowNs
		}
		st.shadow = shadow
		st.gen++
		st.changedAt = now
	}
	why := directBlocked(closed, len(members), gr.ramps.Len(), now.Sub(st.openSince))
	var table steer.Table
	if why == "" {
		table = st.shadow
	}
	if st.direct || why == "" {
		st.directAt = nowNs
	}
	if table != st.table || st.view.Load().gen != st.gen {
		if table != st.table {
			prog := steer.DoorProgram()
			if why == "" {
				prog = steer.Program(&table)
			}
			if err := st.attach(prog); err != nil {
				s.log.Warn("steering program not installed; datagrams keep their way", "group", gr.g.Name(), "error", err)
				return
			}
			if direct := why == ""; direct != st.direct {
				if direct {
					s.log.Info("direct reads", "group", gr.g.Name(), "on", true, "workers", len(members))
				} else {
					s.log.Info("direct reads", "group", gr.g.Name(), "on", false, "reason", why)
				}
			}
			st.table = table
			st.direct = why == ""
			st.changedAt = now
		}
		n := 0
		if st.direct {
			n = len(members)
		}
		st.members.Store(int64(n))
		v := &steerView{direct: st.direct, prev: st.prev, gen: st.gen}
		for b, m := range st.shadow {
			if m != 0 {
				v.owner[b] = st.slots[m-1].w
			}
		}
		st.view.Store(v)
	}
	var fresh [steer.Buckets]int64
	for b := range fresh {
		fresh[b] = st.fresh[b].Load()
	}
	// Workers read the buckets' freshness only while datagrams go to them.
	if st.direct && fresh != st.sentFresh {
		st.gen++
		st.changedAt = now
	}
	// Every worker learns the table once per change, a new one at its
	// first refresh.
	var frame []byte
	for _, w := range ws {
		if st.sent[w.ID] == st.gen && st.gen != 0 {
			continue
		}
		if frame == nil {
			frame = wire.SteerFrame(st.shadow[:], st.since[:], fresh[:])
			st.sentFresh = fresh
		}
		if w.SendOwn(frame) == nil {
			st.sent[w.ID] = st.gen
		}
	}
	for id := range st.sent {
		if byID[id] == nil {
			delete(st.sent, id)
		}
	}
}

// attach installs prog for the port's group, through the supervisor's
// socket, which replaces the group's program at once.
func (st *steering) attach(prog []unix.SockFilter) error {
	rc, err := st.sock.UDP.SyscallConn()
	if err != nil {
		return err
	}
	var aerr error
	if err := rc.Control(func(fd uintptr) { aerr = steer.Attach(int(fd), prog) }); err != nil {
		return err
	}
	return aerr
}

// exited frees a worker's slot once the program no longer names it, and
// passes what is left in its socket through the door: datagrams the kernel
// queued for the worker before the table moved are not lost.
func (st *steering) exited(w *pool.Worker) {
	st.mu.Lock()
	k := slices.IndexFunc(st.slots, func(sl *slot) bool { return sl.id == w.ID })
	if k < 0 {
		st.mu.Unlock()
		return
	}
	sl := st.slots[k]
	// Its count moves to retired at once, so that the total never dips;
	// the slot is closing (no worker, not free) until its socket is empty.
	for _, off := range counterWords {
		st.retired[off] += w.Page().Load(off)
	}
	sl.id, sl.w = -w.ID, nil
	st.mu.Unlock()
	st.refresh(time.Now())
	if st.u != nil {
		st.u.drainFD(sl.fd)
	}
	st.mu.Lock()
	sl.id = 0
	st.mu.Unlock()
}

// pick is the door's choice for a message of a Call-ID it holds no
// affinity for, in a group with direct reads: a call's message goes to the
// worker that had its bucket while the call may live there, else to the
// bucket's worker; a new session, to the bucket's worker while datagrams
// go to workers, so that its call's later messages meet it there. A
// draining worker may be the one that had the bucket: it still holds its
// calls.
func (st *steering) pick(m *sipscan.Msg, newSession bool, now int64) *pool.Worker {
	v := st.view.Load()
	b := steer.Bucket(m.CallID)
	if p := v.prev[b]; p.w != nil && now < p.until && live(p.w) {
		// A new session only within a transaction's lifetime of the move:
		// it may be a retransmission of a request that worker holds.
		if !newSession {
			return p.w
		}
		if now < p.until-int64(sessions.PendingInvite-sessions.TransactionLifetime) {
			st.markFresh(b, now)
			return p.w
		}
	}
	// A new session goes to the bucket's worker unless slow start shapes
	// the pick, which weighs the workers' queues.
	if w := v.owner[b]; w != nil && w.State() == pool.Ready && (!newSession || v.direct || st.gr.ramps.Len() == 0) {
		st.placed[b].Store(now)
		if newSession {
			st.gr.ramps.Pick(w, st.gr.g.Routable, true, time.Unix(0, now))
		}
		return w
	}
	if newSession {
		// The door places it as it would without direct reads: elsewhere
		// than its bucket's worker, maybe.
		st.markFresh(b, now)
	}
	return nil
}

// markFresh notes that the door placed a new session of bucket b on
// another worker than the bucket's: the workers must learn it within
// steerEvery, as a worker that is sent it later may take a retransmission
// of that session as a new one.
func (st *steering) markFresh(b int, now int64) {
	st.fresh[b].Store(now)
	if time.Duration(st.pace.Load()) > steerEvery {
		st.poke()
	}
}

// live reports whether w may still hold calls and take their messages: a
// draining worker does until it has drained and been sent its end.
func live(w *pool.Worker) bool {
	s := w.State()
	return (s == pool.Ready || s == pool.Draining) && !w.Ended()
}

// sessions is the sessions in progress the group's workers follow, by kind.
func (st *steering) sessions(k sipscan.Kind) int64 {
	var n int64
	for _, w := range st.gr.g.Workers() {
		n += int64(w.Page().Load(wire.OffKindSessions + 8*int(k)))
	}
	return n
}

// counter is the total of one of counterWords over the group's workers,
// those gone included.
func (st *steering) counter(off int) uint64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	n := st.retired[off]
	for _, sl := range st.slots {
		if sl.id > 0 && sl.w != nil {
			n += sl.w.Page().Load(off)
		}
	}
	return n
}

// socketUsage is how full the fullest of the workers' sockets is, in
// percent of its receive buffer: with direct reads the socket is a worker's
// queue, and what queue admission and the event_queue_usage monitor weigh.
func (st *steering) socketUsage() float64 {
	st.mu.Lock()
	defer st.mu.Unlock()
	var u float64
	for _, sl := range st.slots {
		if sl.id <= 0 || sl.fd < 0 {
			continue
		}
		// SO_MEMINFO: the bytes queued (SK_MEMINFO_RMEM_ALLOC) and the
		// buffer (SK_MEMINFO_RCVBUF), as 32-bit words.
		queued, size, e := rawio.SocketMemory(sl.fd)
		if e != 0 {
			continue
		}
		if size > 0 {
			u = max(u, 100*float64(queued)/float64(size))
		}
	}
	return u
}

// longestWait is the longest a datagram waited in a worker's socket lately.
func (st *steering) longestWait() time.Duration {
	var d uint64
	for _, w := range st.gr.g.Routable() {
		d = max(d, w.Page().Load(wire.OffWait))
	}
	return time.Duration(d)
}

// quota is a worker's OffQuota word for a kind of which it has admitted
// admitted sessions, when the limits leave room for that many more among n
// workers: half the room, shared out, so that what the workers admit before
// the next refresh cannot pass a limit; the rest is decided by asking.
func quota(admitted uint64, room int64, n int) uint64 {
	if room == overload.Unlimited {
		return math.MaxUint64
	}
	return admitted + uint64(room/int64(2*max(n, 1)))
}

// assignBuckets places the buckets on members (member numbers of the
// port's group), evenly, moving as few as it can from prev: a bucket stays
// where it is while its member is there and under its share. With no
// members every bucket is the door's (0).
func assignBuckets(prev steer.Table, members []uint8) steer.Table {
	var t steer.Table
	if len(members) == 0 {
		return t
	}
	members = slices.Sorted(slices.Values(members))
	quota := make(map[uint8]int, len(members))
	for i, m := range members {
		quota[m] = steer.Buckets / len(members)
		if i < steer.Buckets%len(members) {
			quota[m]++
		}
	}
	var free []int
	for b, m := range prev {
		if quota[m] > 0 {
			t[b] = m
			quota[m]--
			continue
		}
		free = append(free, b)
	}
	for _, m := range members {
		for ; quota[m] > 0; quota[m]-- {
			t[free[0]] = m
			free = free[1:]
		}
	}
	return t
}

// steerNow refreshes every group's direct reads at once: admission began
// or stopped refusing, or a setting changed.
func (s *Supervisor) steerNow() {
	for _, gr := range s.udp {
		if gr.steer != nil {
			gr.steer.refresh(time.Now())
		}
	}
}

// toDoor passes a datagram a worker of a group with direct reads gave back
// (wire.DoorNote) through its group's door. It reports whether the note
// was one.
func (s *Supervisor) toDoor(w *pool.Worker, note []byte) bool {
	frame, ok := wire.ParseDoorNote(note)
	if !ok {
		return false
	}
	if gr := s.groupOf(w); gr != nil && gr.steer != nil && gr.steer.u != nil {
		gr.steer.u.handleFrame(frame)
	}
	return true
}
