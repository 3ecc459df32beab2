package txn

import (
	"time"

	"github.com/sipvisor/sipvisor/internal/sipscan"
)

// State is where a transaction is in its RFC 3261 17 life.
type State uint8

const (
	// Trying: a server transaction waits for a final reply; a client
	// transaction waits for any reply (Calling / Trying).
	Trying State = iota
	// Proceeding: a client transaction got a provisional reply.
	Proceeding
	// Completed: a final non-2xx reply was sent (server) or received
	// (client); retransmissions are absorbed until the transaction ends.
	Completed
	// Confirmed: an INVITE server transaction got the ACK of its non-2xx.
	Confirmed
	// Accepted: a 2xx passed (RFC 6026); kept to match the end-to-end ACK
	// and to pass on the UAS's 2xx retransmissions.
	Accepted
	Terminated
)

// Timers are the durations of RFC 3261 17 a table runs its transactions
// by.
type Timers struct {
	T1, T2, T4 time.Duration
	// InviteTimeout is how long an INVITE branch that had a provisional
	// reply waits for a final one (fr_inv).
	InviteTimeout time.Duration
	// Linger is how long a finished transaction stays over UDP to absorb
	// retransmissions (timers D, J and K; RFC 6026's for a 2xx).
	Linger time.Duration
}

// Server is a server transaction: the upstream side of a relayed
// request, matched by Key (and, for an INVITE, its 2xx's ACK by
// DialogKey), with the reply it resends on a retransmission. The engine
// embeds it in its own, with where the request came from and what the
// script armed.
type Server struct {
	Key, DialogKey string
	Invite         bool
	State          State
	// ToTag is the To tag of the replies this server makes itself.
	ToTag string

	Last     []byte // the last reply sent upstream, resent on retransmissions
	LastCode int

	// Spare is room made with a transaction relayed on its bytes for the
	// replies it keeps to resend: its provisional replies and a
	// non-INVITE's final one (Keep).
	Spare []byte

	timer    Deadline
	interval time.Duration // timer G
	endAt    time.Time     // timer H
}

// Deadline is the transaction's place in its table's heap.
func (s *Server) Deadline() *Deadline { return &s.timer }

func (s *Server) txServer() *Server { return s }

// Keep is the response data (scanned into m) less its top Via, as s sends
// it upstream: written into s's spare room when it fits and s may still
// overwrite it (a provisional reply replaces the last one), or when final
// is set (a non-INVITE's final reply, after which the room is s's last
// reply for good); else a copy of its own.
func (s *Server) Keep(m *sipscan.Msg, data []byte, final bool) []byte {
	c0, c1 := m.TopVia[0], m.TopVia[1]
	if c1 <= c0 || s.Spare == nil || len(data)-(c1-c0) > cap(s.Spare) || m.StatusCode >= 200 && !final {
		return m.WithoutTopVia(data)
	}
	b := append(append(s.Spare[:0], data[:c0]...), data[c1:]...)
	if final {
		s.Spare = nil
	}
	return b
}

// Client is a client transaction: one branch, the request relayed
// downstream with this server's Via naming Branch, matched by Key
// (branch|method), and the bytes it resends.
type Client struct {
	Key    string
	Branch string
	Invite bool
	Bytes  []byte
	State  State

	timer     Deadline
	interval  time.Duration // timers A / E
	retransAt time.Time
	timeoutAt time.Time // timers B / F, or fr_inv after a provisional reply
}

// Deadline is the transaction's place in its table's heap.
func (c *Client) Deadline() *Deadline { return &c.timer }

func (c *Client) txClient() *Client { return c }

// Fired is what a transaction's due deadline asks of its owner.
type Fired uint8

const (
	// Nothing: the deadline moved on, or the transaction waits on others.
	Nothing Fired = iota
	// Resend: send the request (client) or the last reply (server) again.
	Resend
	// TimedOut: a client transaction got no final reply in time; it is
	// still in the table, for its owner to end as a 408 would.
	TimedOut
	// Ended: the transaction is out of the table.
	Ended
)

// StartClient arms the timers of c, just sent: retransmissions over UDP
// (timers A and E) and the wait for a final reply (timers B and F, or fr
// when shorter and not 0).
func (tb *Table[S, C]) StartClient(c C, udp bool, fr time.Duration, now time.Time) {
	ct := c.txClient()
	ct.timeoutAt = now.Add(64 * tb.timers.T1) // timers B and F
	if fr > 0 && fr < 64*tb.timers.T1 {
		ct.timeoutAt = now.Add(fr)
	}
	ct.retransAt = ct.timeoutAt
	if udp {
		ct.interval = tb.timers.T1 // timers A and E
		ct.retransAt = now.Add(ct.interval)
	}
	tb.heap.Set(c, minTime(ct.retransAt, ct.timeoutAt))
}

// FireClient runs c's due deadline.
func (tb *Table[S, C]) FireClient(c C, udp bool, now time.Time) Fired {
	ct := c.txClient()
	switch ct.State {
	case Trying, Proceeding:
		if !now.Before(ct.timeoutAt) {
			return TimedOut
		}
		f := Nothing
		if udp && !now.Before(ct.retransAt) {
			if ct.State == Trying || !ct.Invite {
				f = Resend
			}
			if ct.Invite {
				ct.interval *= 2
			} else if ct.State == Proceeding {
				ct.interval = tb.timers.T2
			} else {
				ct.interval = min(2*ct.interval, tb.timers.T2)
			}
			ct.retransAt = now.Add(ct.interval)
			if ct.Invite && ct.State == Proceeding {
				ct.retransAt = ct.timeoutAt
			}
		}
		tb.heap.Set(c, minTime(ct.retransAt, ct.timeoutAt))
		return f
	default:
		tb.EndClient(c)
		return Ended
	}
}

// Provisional moves c on for a provisional reply: to Proceeding, with
// fr_inv (frInv, else InviteTimeout) for an INVITE and T2
// retransmissions for others over UDP.
func (tb *Table[S, C]) Provisional(c C, udp bool, frInv time.Duration, now time.Time) {
	ct := c.txClient()
	if ct.State != Trying {
		return
	}
	ct.State = Proceeding
	if ct.Invite {
		inv := tb.timers.InviteTimeout
		if frInv > 0 {
			inv = frInv
		}
		ct.timeoutAt = now.Add(inv)
		ct.retransAt = ct.timeoutAt
	}
	if udp && !ct.Invite {
		ct.interval = tb.timers.T2
		ct.retransAt = now.Add(ct.interval)
	}
	tb.heap.Set(c, minTime(ct.retransAt, ct.timeoutAt))
}

// Linger moves c to st and keeps it for Linger over UDP, to absorb
// retransmitted replies (timers D and K); over a stream it ends at the
// next tick.
func (tb *Table[S, C]) Linger(c C, st State, stream bool, now time.Time) {
	c.txClient().State = st
	d := tb.timers.Linger
	if stream {
		d = 0
	}
	tb.heap.Set(c, now.Add(d))
}

// Final moves s, which has just sent its final reply code, on: a non-2xx
// to an INVITE waits for the ACK (timer H), resending the reply over UDP
// (timer G); a 2xx to an INVITE lingers to match its ACK (RFC 6026);
// another request's lingers to absorb retransmissions (timer J, 0 when
// reliable).
func (tb *Table[S, C]) Final(s S, code int, reliable bool, now time.Time) {
	t := s.txServer()
	switch {
	case t.Invite && code >= 300:
		t.State = Completed
		t.endAt = now.Add(64 * tb.timers.T1) // timer H
		if !reliable {
			t.interval = tb.timers.T1 // timer G
			tb.heap.Set(s, now.Add(t.interval))
		} else {
			tb.heap.Set(s, t.endAt)
		}
	case t.Invite:
		t.State = Accepted
		tb.heap.Set(s, now.Add(tb.timers.Linger))
	default:
		t.State = Completed
		linger := tb.timers.Linger
		if reliable {
			linger = 0 // timer J is 0 on reliable transports
		}
		tb.heap.Set(s, now.Add(linger))
	}
}

// FireServer runs s's due deadline.
func (tb *Table[S, C]) FireServer(s S, now time.Time) Fired {
	t := s.txServer()
	if t.State == Completed && t.Invite && now.Before(t.endAt) {
		// Timer G: the ACK has not come; say it again.
		t.interval = min(2*t.interval, tb.timers.T2)
		tb.heap.Set(s, minTime(now.Add(t.interval), t.endAt))
		return Resend
	}
	if t.State == Trying {
		return Nothing // waits on its branches, whose timers end it
	}
	tb.EndServer(s)
	return Ended
}

// Ack takes the ACK of s's non-2xx final reply: it ends the wait for it
// (timer I, 0 when reliable). It reports false for an ACK s cannot have
// (that of a 2xx reuses no branch).
func (tb *Table[S, C]) Ack(s S, reliable bool, now time.Time) bool {
	t := s.txServer()
	if t.State != Completed && t.State != Confirmed {
		return false
	}
	if t.State == Completed {
		t.State = Confirmed
		linger := tb.timers.T4 // timer I
		if reliable {
			linger = 0
		}
		tb.heap.Set(s, now.Add(linger))
	}
	return true
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
