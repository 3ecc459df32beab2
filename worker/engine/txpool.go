package engine

import (
	"net/netip"
	"strings"
	"time"
	"unsafe"

	"github.com/sipvisor/sipvisor/worker/engine/txn"
)

// txPair is a request's server transaction and its first branch, made at
// once on the bytes path (relayBytes), with the bytes of their keys and
// of what they resend. Pairs are reused through the worker's free list:
// a proxied call makes two (its INVITE's and its BYE's), and allocating
// them was most of what a call allocated.
//
// A call's transactions linger for T4 after their final replies, which
// at thousands of calls a second was the most of a worker's memory. Once
// both of a pair's transactions have nothing left to do but linger over
// UDP, the pair is traded for a settled record of the table (compact):
// their keys, a non-INVITE's final reply, where replies go upstream,
// about 80 bytes for an INVITE and 400 for a BYE where the pair took 896
// and the BYE's buffer a kilobyte more. Where it cannot be (an
// onreply_route to run on a late reply), an INVITE answered 2xx over UDP
// still lets go of its buffer (settle): RFC 6026 lingering needs only its
// keys. Buffers go back to their own free list, so a pair takes any.
//
// A pair goes back to the list (release) when its server transaction has
// ended and no branch refers to it any more: then neither the table nor
// the heap of deadlines holds either transaction (txn.Table), and the
// script's contexts that pointed at it are done. What the worker sends
// over UDP is written before send returns, so no goroutine holds its
// bytes. Everything is cleared on the way back, so a recycled pair keeps
// no key, deadline or request of its last use; a key's bytes are not
// rewritten while the table holds a string of them.
type txPair struct {
	s serverTx
	c clientTx
	// keys are the bytes of the transactions' keys (keyString); buf the
	// request as relayed, an INVITE's 100 Trying and the room for replies.
	keys []byte
	buf  []byte
}

const (
	// maxFreePairs bounds the free list: it takes up the pairs that
	// end between two requests that make one, a few dozen at thousands of
	// calls a second; a burst's excess goes to the collector.
	maxFreePairs = 512
	// maxPairBuf is the largest buffer the free list keeps: one large
	// request's need not stay.
	maxPairBuf = 8 << 10
	// bufSearch is how far down the buffer free list a request looks for
	// one large enough: an INVITE's buffer is larger than a BYE's, and
	// both kinds come back to the list.
	bufSearch = 8
)

// newPair takes a pair from the free list, or makes one.
func (w *Worker) newPair() *txPair {
	n := len(w.pairs)
	if n == 0 {
		return new(txPair)
	}
	p := w.pairs[n-1]
	w.pairs[n-1] = nil
	w.pairs = w.pairs[:n-1]
	return p
}

// keyString is p's key bytes as a string, without a copy: the bytes stay
// as they are until p is released, and the table lets go of them when
// its transactions end.
func (p *txPair) keyString() string { return unsafe.String(unsafe.SliceData(p.keys), len(p.keys)) }

// buffer is p's buffer at n bytes, taken from the worker's free list
// when one near its top is large enough.
func (w *Worker) buffer(p *txPair, n int) []byte {
	if cap(p.buf) < n {
		w.putBuf(p.buf)
		p.buf = nil
		for i := len(w.bufs) - 1; i >= 0 && i >= len(w.bufs)-bufSearch; i-- {
			if b := w.bufs[i]; cap(b) >= n {
				last := len(w.bufs) - 1
				w.bufs[i], w.bufs[last] = w.bufs[last], nil
				w.bufs = w.bufs[:last]
				p.buf = b
				break
			}
		}
		if p.buf == nil {
			p.buf = make([]byte, n)
		}
	}
	return p.buf[:n]
}

// putBuf puts b on the worker's free list of buffers.
func (w *Worker) putBuf(b []byte) {
	if b != nil && cap(b) <= maxPairBuf && len(w.bufs) < maxFreePairs {
		w.bufs = append(w.bufs, b[:0])
	}
}

// settle lets go of what t, an INVITE just answered 2xx, keeps and its
// lingering does not need (RFC 6026): the server transaction in Accepted
// absorbs retransmitted INVITEs without a reply (a proxy passes the
// UAS's 2xx retransmissions on as they come, RFC 3261 16.7), and its
// branch in Accepted only matches late 2xx by its key. The pair's buffer (the relayed
// INVITE, the 100 Trying, the spare room) goes back to the free list
// when the branch that took the 2xx is the pair's own, and nothing but
// UDP sent from it: a stream may still hold bytes it was given.
func (w *Worker) settle(t *serverTx) {
	t.Last, t.Spare, t.bestBytes, t.bestRes = nil, nil, nil, nil
	p := t.pair
	if p == nil || p.buf == nil || p.c.stx != t || p.c.State != txn.Accepted ||
		t.src.conn != nil || stream(t.vdest.proto) || stream(p.c.dst.proto) {
		return
	}
	// t.req, when a reply of this server's needed it, was read from the
	// buffer; a pair's replies go by vdest without it.
	t.firstRelay, t.req, p.c.Bytes = nil, nil, nil
	w.putBuf(p.buf)
	p.buf = nil
}

// clientEnded is told that ct has left the table: its server
// transaction may be done with.
func (w *Worker) clientEnded(ct *clientTx) {
	if t := ct.stx; t != nil {
		t.open--
		w.release(t)
	}
}

// release puts t's pair back on the free list once t has ended and no
// branch refers to it.
func (w *Worker) release(t *serverTx) {
	p := t.pair
	if p == nil || t.State != txn.Terminated || t.open > 0 || p.s.Deadline().Scheduled() || p.c.Deadline().Scheduled() {
		return
	}
	keys, buf := p.keys[:0], p.buf[:0]
	if cap(buf) > maxPairBuf {
		buf = nil
	}
	*p = txPair{keys: keys, buf: buf}
	if len(w.pairs) < maxFreePairs {
		w.pairs = append(w.pairs, p)
	}
}

// compact trades t's pair, once both of its transactions have nothing
// left to do but linger over UDP, for a settled record of the table
// (txn.Settled): their keys, a non-INVITE's final reply, where replies go
// upstream. The pair goes back to the free list at once, buffer and all,
// rather than after Linger: at thousands of calls a second the pairs of
// the last Linger of calls, an INVITE's and a BYE's each, were most of a
// worker's heap. What a settled pair did while lingering its record does
// the same (serverTx, clientTx below): absorb a retransmitted request,
// resending a non-INVITE's final reply; pass on a 2xx its branch gets
// again; match the ACK of an INVITE's 2xx and a CANCEL.
//
// Only a pair whose one branch took a 2xx, with nothing over a stream,
// no script to run on a late reply (an onreply_route sees the
// transaction) and upstream an IPv4 address is compacted: its record
// notes where replies go in 8 bytes.
func (w *Worker) compact(t *serverTx, now time.Time) {
	p := t.pair
	if p == nil || p.c.stx != t || t.open != 1 || t.relayed != 1 || len(t.branches) != 0 ||
		p.c.State != txn.Accepted || t.Invite && t.State != txn.Accepted || !t.Invite && t.State != txn.Completed ||
		w.opt.Script.OnReply[""] != nil || stream(p.c.dst.proto) {
		return
	}
	up, ok := upstream(t)
	if !ok {
		return
	}
	var last []byte
	if !t.Invite {
		last = t.Last
	}
	w.txns.Settle(t, &p.c, last, up, now)
	w.clientEnded(&p.c)
}

// upstream is where t's replies go, packed in a settled record's 8
// bytes: an IPv4 address, a port and the socket; false when t's replies
// go anywhere else.
func upstream(t *serverTx) (uint64, bool) {
	d := t.vdest
	if !d.addr.Addr().Is4() || d.sock < 0 || d.sock > 0xffff {
		return 0, false
	}
	a := d.addr.Addr().As4()
	up := uint64(a[0])<<56 | uint64(a[1])<<48 | uint64(a[2])<<40 | uint64(a[3])<<32 | uint64(d.addr.Port())<<16 | uint64(d.sock)
	// The source's address is the request's, which no reply over UDP
	// reads: replies go by the Via (vdest).
	src := t.src
	src.addr = netip.AddrPort{}
	if d != upDest(up) || src != upSource(up) {
		return 0, false
	}
	return up, true
}

// upDest is the destination of replies upstream a record notes.
func upDest(up uint64) dest {
	a := netip.AddrFrom4([4]byte{byte(up >> 56), byte(up >> 48), byte(up >> 40), byte(up >> 32)})
	return dest{proto: "udp", addr: netip.AddrPortFrom(a, uint16(up>>16)), sock: int(up & 0xffff)}
}

// upSource is the source a record's request came from, as far as its
// replies read it: over UDP, by a socket.
func upSource(up uint64) source { return source{proto: "udp", sock: int(up & 0xffff)} }

// serverTx is the server transaction of key: a live one, else a settled
// record read back as the transaction it was, lingering. That one is the
// worker's, rewritten at the next lookup; what a lingering transaction
// does (absorb, answer a CANCEL, match an ACK of a 2xx, refuse the ACK of
// a non-2xx) neither schedules nor keeps it, and its pair is nil, so
// nothing puts it on the free list.
func (w *Worker) serverTx(key []byte) *serverTx {
	if t := w.txns.Server(key); t != nil {
		return t
	}
	if r := w.txns.SettledServer(key); r != nil {
		return w.settledServer(r)
	}
	return nil
}

// dialogTx is the INVITE server transaction whose 2xx an ACK of dialog
// key acknowledges, read back as serverTx does.
func (w *Worker) dialogTx(key []byte) *serverTx {
	if t := w.txns.Dialog(key); t != nil {
		return t
	}
	if r := w.txns.SettledDialog(key); r != nil {
		return w.settledServer(r)
	}
	return nil
}

// clientTx is the client transaction of key, read back as serverTx does:
// a settled branch is in Accepted, its server transaction with it.
func (w *Worker) clientTx(key []byte) *clientTx {
	if ct := w.txns.Client(key); ct != nil {
		return ct
	}
	r := w.txns.SettledClient(key)
	if r == nil {
		return nil
	}
	k := r.ClientKey()
	branch := k
	if i := strings.LastIndexByte(k, '|'); i >= 0 {
		branch = k[:i]
	}
	g := &w.ghost.c
	*g = clientTx{Client: txn.Client{Key: k, Branch: branch, Invite: r.Invite, State: txn.Accepted}, stx: w.settledServer(r)}
	return g
}

// settledServer reads r back as its server transaction.
func (w *Worker) settledServer(r *txn.Settled) *serverTx {
	st := txn.Completed
	if r.Invite {
		st = txn.Accepted
	}
	g := &w.ghost.s
	*g = serverTx{Server: txn.Server{Key: r.ServerKey(), DialogKey: r.DialogKey(), Invite: r.Invite, State: st, Last: r.Last()},
		vdest: upDest(r.Up), src: upSource(r.Up)}
	return g
}
