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
	// maxPairBuf is the largest buffer a freed pair keeps: one large
	// request's need not stay.
	maxPairBuf = 8 << 10
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

// buffer is p's buffer at n bytes or more.
func (p *txPair) buffer(n int) []byte {
	if cap(p.buf) < n {
		p.buf = make([]byte, n)
	}
	return p.buf[:n]
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
