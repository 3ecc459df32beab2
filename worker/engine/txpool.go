package engine

import (
	"unsafe"

	"github.com/sipvisor/sipvisor/worker/engine/txn"
)

// txPair is a request's server transaction and its first branch, made at
// once on the bytes path (relayBytes), with the bytes of their keys and
// of what they resend. Pairs are reused through the worker's free list:
// a proxied call makes two (its INVITE's and its BYE's), and allocating
// them was most of what a call allocated.
//
// An INVITE answered 2xx over UDP lets go of its buffer as soon as both
// of the pair's transactions are in Accepted (settle): lingering then
// needs only their keys (RFC 6026), and a call's transactions linger for
// T4 after it, the most of a worker's memory at thousands of calls a
// second. Buffers go back to their own free list, so a pair takes any.
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
