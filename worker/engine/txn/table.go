package txn

import (
	"iter"
	"time"
)

// ServerTx is the engine's server transaction: a Server embedded in what
// the engine keeps beside it.
type ServerTx interface {
	comparable
	Timed
	txServer() *Server
}

// ClientTx is the engine's client transaction: a Client embedded in what
// the engine keeps beside it.
type ClientTx interface {
	comparable
	Timed
	txClient() *Client
}

// Table is a worker's transactions: the server transactions by key and,
// for an INVITE's 2xx's ACK, by dialog; the client transactions by key;
// and the heap of their deadlines. It is driven from the worker's loop
// and holds no locks.
//
// A transaction leaves the table (EndServer, EndClient) with its keys and
// its deadline, and nothing of the table refers to it after: its owner
// may then reuse its memory, keys' bytes included, provided the keys it
// entered with are not kept elsewhere.
type Table[S ServerTx, C ClientTx] struct {
	timers  Timers
	servers map[string]S
	dialogs map[string]S
	clients map[string]C
	heap    Heap
	settled settledSet
}

// NewTable makes an empty table whose transactions run by t.
func NewTable[S ServerTx, C ClientTx](t Timers) *Table[S, C] {
	return &Table[S, C]{timers: t, servers: map[string]S{}, dialogs: map[string]S{}, clients: map[string]C{}, settled: newSettledSet()}
}

// Server is the server transaction of key, or the zero S. The key is not
// kept: bytes written for the lookup may be reused at once.
func (tb *Table[S, C]) Server(key []byte) S { return tb.servers[string(key)] }

// Dialog is the INVITE server transaction whose 2xx an ACK of dialog key
// (AppendDialogKey) acknowledges, or the zero S.
func (tb *Table[S, C]) Dialog(key []byte) S { return tb.dialogs[string(key)] }

// Client is the client transaction of key (branch|method), or the zero C.
func (tb *Table[S, C]) Client(key []byte) C { return tb.clients[string(key)] }

// AddServer enters s by its Key and, when it has one, its DialogKey. A
// transaction entered before with the same key is no longer found by it.
func (tb *Table[S, C]) AddServer(s S) {
	t := s.txServer()
	put(tb.servers, t.Key, s)
	if t.DialogKey != "" {
		put(tb.dialogs, t.DialogKey, s)
	}
}

// AddClient enters c by its Key.
func (tb *Table[S, C]) AddClient(c C) { put(tb.clients, c.txClient().Key, c) }

// put enters v at k, first taking out any entry at k: the map then keeps
// k's own string, whose bytes live as long as v is entered, rather than
// the string of the entry replaced, which its owner may reuse once that
// entry has ended.
func put[V comparable](m map[string]V, k string, v V) {
	delete(m, k)
	m[k] = v
}

// EndServer terminates s: its deadline and its keys leave the table.
func (tb *Table[S, C]) EndServer(s S) {
	t := s.txServer()
	t.State = Terminated
	tb.heap.Remove(s)
	if tb.servers[t.Key] == s {
		delete(tb.servers, t.Key)
	}
	if t.DialogKey != "" && tb.dialogs[t.DialogKey] == s {
		delete(tb.dialogs, t.DialogKey)
	}
}

// EndClient terminates c: its deadline and its key leave the table.
func (tb *Table[S, C]) EndClient(c C) {
	ct := c.txClient()
	ct.State = Terminated
	tb.heap.Remove(c)
	if tb.clients[ct.Key] == c {
		delete(tb.clients, ct.Key)
	}
}

// Settle ends s and c, its one branch, which have nothing left to do but
// linger (Settled), and keeps what that needs for Linger from now: their
// keys, last (the reply a retransmitted request gets again, copied) and
// up. Their keys' bytes and last may be reused once it returns. Settled
// records are looked up after the transactions of the same keys.
func (tb *Table[S, C]) Settle(s S, c C, last []byte, up uint64, now time.Time) {
	t, ct := s.txServer(), c.txClient()
	tb.settled.add(t.Key, t.DialogKey, ct.Key, last, t.Invite, up, now.Add(tb.timers.Linger))
	tb.EndClient(c)
	tb.EndServer(s)
}

// SettledServer is the settled record of a server transaction key, or nil.
// It is valid until the next Settle or Expire.
func (tb *Table[S, C]) SettledServer(key []byte) *Settled {
	return tb.settled.find(&tb.settled.servers, key, (*Settled).ServerKey)
}

// SettledDialog is the settled INVITE whose 2xx an ACK of dialog key
// acknowledges, or nil; as SettledServer.
func (tb *Table[S, C]) SettledDialog(key []byte) *Settled {
	return tb.settled.find(&tb.settled.dialogs, key, (*Settled).DialogKey)
}

// SettledClient is the settled record of a branch's key, or nil; as
// SettledServer.
func (tb *Table[S, C]) SettledClient(key []byte) *Settled {
	return tb.settled.find(&tb.settled.clients, key, (*Settled).ClientKey)
}

// Expire ends the settled records whose lingering is over at now.
func (tb *Table[S, C]) Expire(now time.Time) { tb.settled.expire(now) }

// Settled is the number of settled records.
func (tb *Table[S, C]) Settled() int { return tb.settled.len() }

// Len is the number of live transactions, server and client, a settled
// pair counting as one.
func (tb *Table[S, C]) Len() int { return len(tb.servers) + len(tb.clients) + tb.settled.len() }

// Dialogs is the number of INVITE server transactions an ACK of their
// 2xx may still match, settled ones included.
func (tb *Table[S, C]) Dialogs() int { return len(tb.dialogs) + tb.settled.dialogs.n }

// Servers are the live server transactions.
func (tb *Table[S, C]) Servers() iter.Seq[S] {
	return func(yield func(S) bool) {
		for _, s := range tb.servers {
			if !yield(s) {
				return
			}
		}
	}
}

// Due removes and returns the earliest transaction whose deadline has
// come: an S or a C.
func (tb *Table[S, C]) Due(now time.Time) (Timed, bool) { return tb.heap.Due(now) }

// Next is the earliest pending deadline, a settled record's end included.
func (tb *Table[S, C]) Next() (time.Time, bool) {
	at, ok := tb.heap.Next()
	if s, sok := tb.settled.next(); sok && (!ok || s.Before(at)) {
		return s, true
	}
	return at, ok
}

// Pending is the number of pending deadlines: at most one a transaction
// or settled record.
func (tb *Table[S, C]) Pending() int { return len(tb.heap) + tb.settled.len() }
