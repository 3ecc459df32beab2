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
}

// NewTable makes an empty table whose transactions run by t.
func NewTable[S ServerTx, C ClientTx](t Timers) *Table[S, C] {
	return &Table[S, C]{timers: t, servers: map[string]S{}, dialogs: map[string]S{}, clients: map[string]C{}}
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

// Len is the number of live transactions, server and client.
func (tb *Table[S, C]) Len() int { return len(tb.servers) + len(tb.clients) }

// Dialogs is the number of INVITE server transactions an ACK of their
// 2xx may still match.
func (tb *Table[S, C]) Dialogs() int { return len(tb.dialogs) }

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

// Next is the earliest pending deadline.
func (tb *Table[S, C]) Next() (time.Time, bool) { return tb.heap.Next() }

// Pending is the number of pending deadlines: at most one a transaction.
func (tb *Table[S, C]) Pending() int { return len(tb.heap) }
