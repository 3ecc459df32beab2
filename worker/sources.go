package worker

import (
	"net/netip"
	"syscall"
	"time"

	"github.com/sipvisor/sipvisor/internal/rawio"
	"github.com/sipvisor/sipvisor/internal/wire"
	"golang.org/x/sys/unix"
)

// sourceReader reads what the worker's loop waits for: the data channel,
// the reply sockets and the direct socket, in turn, so that none can
// starve another. Each recv leaves one read in hand: src says from which
// source (-1 the data channel; else the reply socket read, or the direct
// socket after them), rerr its error, and the fields of that source its
// bytes.
type sourceReader struct {
	dataFD   int
	replyFDs []int
	directFD int // -1 without a direct socket

	// wait is how long, in nanoseconds, the next recv that finds nothing
	// waits in the poll set itself (rawio.EpollWait) before it returns
	// false; 0 polls the set only, for a loop that waits through the
	// network poller. blocked sums the time spent waiting so.
	wait    int64
	blocked time.Duration
	// blockOn: the reader waits on the direct socket itself first (see
	// recv); not with reply sockets, which would wait behind it.
	blockOn bool
	// waits says where the next wait goes first (see waitHistory): on the
	// socket first, a wait that outlasts blockFor costs two wake-ups and
	// three system calls, against one and two.
	waits waitHistory
	// setQuiet says the set's last wait ended with nothing ready and
	// nothing has been read since: its ready list is empty, as a poll
	// would leave it, and the poll before the network poller's wait is
	// spared (a wait that outlasts the loop's span, at a new INVITE every
	// 10 ms or more, is half of a worker's at 200 refusals a second).
	// polls counts the polls made.
	setQuiet bool
	polls    int
	// socketWaits counts the waits that went to the socket first.
	socketWaits int
	// setAt is when the set last answered the reader. Datagrams that never
	// stop for blockFor would keep every wait on the socket, and the data
	// channel's frames unread (the supervisor's echo unanswered, which its
	// RTT throttle takes for a stalled worker): a wait blockFor after the
	// set's last goes to the set, which says what both have.
	setAt time.Time
	// polled says the reader was called in the network poller's wait
	// (recvPolled) since that wait began: a call after the first follows a
	// wake-up of the poller, which waits on the set.
	polled bool
	// out holds the responses the loop sent (sendSocket.batch): they
	// leave before the reader reads the sockets or waits again, so that
	// a wake-up's responses share a call and none waits longer than the
	// handling of one batch.
	out *sendSocket

	sources int
	// maybe says, by source (the data channel first), whether it may have
	// something to read: a source found empty is not read again until the
	// poll set says it is ready, so that a wake-up costs a read of what
	// came and no read that finds nothing.
	maybe    []bool
	sourceOf map[int32]int
	ready    [4]syscall.EpollEvent
	turn     int

	// The data channel's frame, or a reply socket's datagram after
	// wire.MsgHeaderLen: n bytes of buf, oobn of oob.
	buf, oob []byte
	n, oobn  int
	from     netip.AddrPort
	src      int
	rerr     error
	// The direct socket is read in batches (recvmmsg); dframe and doob are
	// the datagram of it in hand, bn and bi how many the last batch read
	// and which is next.
	batch        *rawio.Batch
	bn, bi       int
	dframe, doob []byte
}

// echo says whether the read in hand is the supervisor's echo.
func (r *sourceReader) echo() bool {
	return r.src == -1 && r.rerr == nil && r.n > 0 && r.buf[0] == wire.FrameEcho
}

// rawEpollPoll polls the set, and says when.
func rawEpollPoll(set uintptr, ready []syscall.EpollEvent) (int, time.Time) {
	k, _ := rawio.EpollPoll(int(set), ready)
	return k, time.Now()
}

// poll polls the set, and counts it.
func (r *sourceReader) poll(set uintptr) (int, time.Time) {
	r.polls++
	return rawEpollPoll(set, r.ready[:])
}

// blockFor is how long a wait on the direct socket alone lasts at most
// (its SO_RCVTIMEO, set by openDirect): a frame of the data channel, the
// socket's neighbour in the poll set, waits that long at worst to be read.
const blockFor = 2 * time.Millisecond

// slowWaits is how many short waits in a row (shorter than blockFor) it
// takes, after one as long, before a wait goes to the socket first.
// Datagrams that come in pairs, as a refused INVITE and its ACK do, wait
// short then long in turn: one short wait would send the long one to the
// socket first, where it times out, every time.
const slowWaits = 3

// afterWait is slow after a wait that took took: slowWaits after a long
// one, one less after a short one, down to 0, when the next wait goes to
// the socket first.
func afterWait(slow int, took time.Duration) int {
	if took >= blockFor {
		return slowWaits
	}
	return max(slow-1, 0)
}

// waitHistory is what the reader's last waits say of the next: whether
// it goes to the socket first. Two patterns end most waits with a
// datagram of the socket soon: a stream of datagrams (three short waits
// in a row, slow at 0), and a burst after a quiet spell, when the
// datagram that ended a long wait is answered at once (a refused INVITE's
// ACK, a relayed INVITE's provisional responses). The second is trusted
// while the last wait that followed a long one was short: datagrams that
// come alone (INVITEs never acknowledged, as a scanner sends them) stop
// it after one wait that timed out.
type waitHistory struct {
	// slow counts the short waits still to come before a stream is
	// trusted (afterWait).
	slow int
	// afterLong says the last wait took blockFor or more; burst that the
	// last wait after such a one was short.
	afterLong, burst bool
}

// socketFirst says whether the next wait goes to the socket first.
func (h waitHistory) socketFirst() bool {
	return h.slow == 0 || (h.afterLong && h.burst)
}

// waited is h after a wait that took took.
func (h waitHistory) waited(took time.Duration) waitHistory {
	long := took >= blockFor
	if h.afterLong {
		h.burst = !long
	}
	h.afterLong = long
	h.slow = afterWait(h.slow, took)
	return h
}

// framed is h after a frame of the data channel other than the echo (the
// datagrams the supervisor's door hands on, above all): a wait on the
// socket first would leave the next for up to blockFor, so the next waits
// go to the set until the history earns it again.
func (h waitHistory) framed() waitHistory {
	h.slow, h.burst = slowWaits, false
	return h
}

func newSourceReader(dataFD int, replies []*sendSocket, direct *direct) *sourceReader {
	r := &sourceReader{
		dataFD:   dataFD,
		directFD: -1,
		sources:  1 + len(replies),
		buf:      make([]byte, wire.MaxFrame),
		oob:      make([]byte, unix.CmsgSpace(4)),
		sourceOf: map[int32]int{int32(dataFD): 0},
	}
	for i, s := range replies {
		r.replyFDs = append(r.replyFDs, s.fd)
		r.sourceOf[int32(s.fd)] = 1 + i
	}
	if direct != nil {
		r.directFD = direct.fd
		r.sources++
		r.sourceOf[int32(direct.fd)] = r.sources - 1
		r.batch = rawio.NewBatch(directBatch, wire.MsgHeaderLen, wire.MaxFrame-wire.MsgHeaderLen, len(direct.oob))
		r.blockOn = len(replies) == 0
	}
	r.maybe = make([]bool, r.sources)
	for j := range r.maybe {
		r.maybe[j] = true
	}
	return r
}

// recvPolled is recv for the network poller's wait (rawConn.Read), which
// calls it once, and again each time the poller's wait on the set wakes:
// that wake-up is the set answering, as its own wait does, and the wait
// that follows may go to the socket first (a refused INVITE's ACK after
// the INVITE woke the poller: one system call, not the set's wait and a
// read). The poller wakes at the first thing the set has, and the reader
// emptied every source before it waited: a frame of the data channel
// unread then came with the datagram, and waits blockFor at most.
// The caller clears polled before the poller's wait.
func (r *sourceReader) recvPolled(set uintptr) bool {
	if r.polled {
		r.setAt = time.Now()
	}
	r.polled = true
	return r.recv(set)
}

// recv reads from the next source that has something, and reports whether
// it read (or failed to); false means there is nothing to read (after the
// wait r.wait asked for, if any), and the loop waits, or goes round.
func (r *sourceReader) recv(set uintptr) bool {
	var e syscall.Errno
	if r.sources == 1 {
		r.n, r.oobn, e = rawio.Recvmsg(r.dataFD, r.buf, r.oob)
		r.src, r.rerr = -1, nil
		if e != 0 {
			r.rerr = e
		}
		return e != rawio.EAGAIN && e != rawio.EINTR
	}
	direct := r.sources - 1
	quiet := r.setQuiet
	r.setQuiet = false
	for {
		if r.bi < r.bn {
			r.dframe, r.doob, r.from = r.batch.Msg(r.bi)
			r.bi++
			r.src, r.rerr = len(r.replyFDs), nil
			return true
		}
		r.out.flush()
		for k := 0; k < r.sources; k++ {
			j := (r.turn + k) % r.sources
			if !r.maybe[j] {
				continue
			}
			i := j - 1
			switch {
			case i < 0:
				r.n, r.oobn, e = rawio.Recvmsg(r.dataFD, r.buf, r.oob)
				if e == 0 && r.n > 0 && r.buf[0] != wire.FrameEcho {
					// Frames other than the echo (the datagrams the
					// supervisor's door hands on, above all) come on
					// the data channel, where a wait on the socket
					// first would leave them for up to blockFor.
					r.waits = r.waits.framed()
				}
			case i < len(r.replyFDs):
				r.n, r.from, e = rawio.Recvfrom(r.replyFDs[i], r.buf[wire.MsgHeaderLen:])
			default:
				// A short batch emptied the socket: it is read again once
				// the poller or the set says it is ready. A full one may
				// have left more, which no wake-up would announce (the
				// network poller waits edge-triggered: the datagrams that
				// came before the read woke it once, and only a new one
				// wakes it again), so the socket is read again after the
				// other sources' turn.
				r.bn, r.bi = 0, 0
				r.bn, e = rawio.Recvmmsg(r.directFD, r.batch)
				r.maybe[j] = e == 0 && r.bn == r.batch.Len()
			}
			if e == rawio.EAGAIN {
				r.maybe[j] = false
				continue
			}
			r.turn = j + 1
			if e == 0 && i >= len(r.replyFDs) {
				break
			}
			r.src, r.rerr = i, nil
			if e != 0 {
				r.rerr = e
			}
			return e != rawio.EINTR
		}
		if r.bi < r.bn {
			continue
		}
		// Nothing known to read: the set says what is ready, and the poll
		// empties it of what was ready and no longer is, without which it
		// never signals again once the network poller waits on it.
		var k int
		if wait := r.wait; wait > 0 {
			r.wait = 0
			start := time.Now()
			if wait >= int64(blockFor) && r.blockOn && r.waits.socketFirst() && start.Sub(r.setAt) < blockFor {
				// Most waits of a busy worker end with a datagram of its
				// socket: waited for on the socket itself, it comes with
				// one system call, not two (the set's wait, then the
				// read). The set is asked for what is left of the wait
				// only after blockFor without one, which is as long as a
				// data channel's frame may wait.
				r.socketWaits++
				r.bn, r.bi = 0, 0
				r.bn, e = rawio.RecvmmsgWait(r.directFD, r.batch)
				if e == 0 {
					took := time.Since(start)
					r.blocked += took
					// A datagram on the socket is what the history
					// foretold, however long it took: a short wait to it.
					r.waits = r.waits.waited(min(took, blockFor-1))
					r.maybe[direct] = r.bn == r.batch.Len()
					r.turn = direct + 1
					continue
				}
				if e != rawio.EAGAIN && e != rawio.EINTR {
					r.blocked += time.Since(start)
					r.src, r.rerr, r.turn = len(r.replyFDs), e, direct+1
					return true
				}
				wait -= int64(time.Since(start))
			}
			if wait > 0 {
				// The set is asked as the wait ends: what it says then
				// covers the data channel up to that moment.
				k, _ = rawio.EpollWait(int(set), r.ready[:], wait)
				r.setAt = time.Now()
			}
			took := time.Since(start)
			r.blocked += took
			r.waits = r.waits.waited(took)
			if k <= 0 {
				// Nothing was read in this call before the wait (a read
				// would have returned): the set is as a poll leaves it,
				// unless the wait went to the socket alone.
				r.setQuiet = k == 0 && wait > 0
				r.rerr = nil
				return false
			}
		} else {
			// Polled or known empty (setQuiet), k stays 0.
			if !quiet {
				k, r.setAt = r.poll(set)
			}
			if k <= 0 {
				// What wakes the network poller's wait is most often a
				// datagram of the direct socket: it is read first then,
				// without asking the set.
				if r.directFD >= 0 {
					r.maybe[direct] = true
				}
				r.rerr = nil
				return false
			}
		}
		for _, ev := range r.ready[:k] {
			if j, ok := r.sourceOf[ev.Fd]; ok {
				r.maybe[j] = true
			}
		}
	}
}
