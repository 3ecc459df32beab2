// Package sessions counts the sessions in progress — a call from its INVITE
// to its BYE, a subscription until it expires — from the requests that
// pass by: what session limits and the number_of_sessions monitor weigh.
//
// A Table follows one stream of requests: the front door's datagrams of a
// socket, or the requests workers read from their own connections. Either
// may see the end of a session the other began (a call from a TCP phone to
// a UDP one ends with a BYE on either side), so Track reports an end it
// could not match, for its owner to pass on with End.
//
// A Table is not safe for concurrent use; its counts are, for readers on
// other goroutines.
//
// The package also holds the times the worker and the supervisor must
// agree on (timers.go): the INVITE timeout, a transaction's lifetime and
// what derives from them. Invariant: no session counts longer than it may
// live, and the front door keeps a pending INVITE's Call-ID with its worker
// at least as long as that worker may hold the INVITE.
package sessions

import (
	"sync/atomic"
	"time"

	"github.com/sipvisor/sipvisor/internal/sipscan"
)

// DefaultMaxCallDuration is how long an answered call counts at most when
// no BYE ends it: a BYE lost, or sent where this table does not see it.
const DefaultMaxCallDuration = 12 * time.Hour

// DefaultSubscription is how long a subscription counts when its SUBSCRIBE
// names no Expires (RFC 6665 leaves the default to the event package; an
// hour is the common one).
const DefaultSubscription = time.Hour

// Table follows calls and subscriptions by key (the Call-ID's hash).
type Table struct {
	// Pending is how long an INVITE counts while unanswered: as long as it
	// may be pending (the caller's INVITE transaction).
	Pending time.Duration
	// MaxCallDuration (ns) bounds how long an answered call counts without
	// a BYE; 0 is DefaultMaxCallDuration. It may be set at any time.
	MaxCallDuration atomic.Int64
	// Counts are the sessions in progress, by kind.
	Counts [4]atomic.Int64

	sess map[uint64]session
}

// session is a call or a subscription in progress, from the request that
// starts it to the one that ends it.
type session struct {
	until  int64 // unix ns: no longer counted from then on
	branch uint64
	kind   sipscan.Kind
	// answered: the ACK of a 2xx passed, so the call is up until its BYE.
	answered bool
}

// New returns an empty table whose unanswered INVITEs count for pending.
func New(pending time.Duration) *Table {
	return &Table{Pending: pending, sess: make(map[uint64]session, 1024)}
}

// Len is how many sessions the table holds.
func (t *Table) Len() int { return len(t.sess) }

// Track follows the sessions through one request. A call counts from its
// INVITE until its BYE, or until the ACK of a final failure (it reuses the
// INVITE's branch, RFC 3261 17.1.1.3), or, when no 2xx's ACK came (the call
// failed unseen, or it was not record-routed), no longer than its INVITE
// may be pending; an answered call counts at most MaxCallDuration. A
// subscription counts until its Expires. Responses and every other method
// leave the count alone, so OPTIONS probes are no sessions.
//
// It reports true for a BYE of a session the table does not hold: one that
// began where another table saw it.
func (t *Table) Track(m *sipscan.Msg, key uint64, now int64) (unknownEnd bool) {
	if !m.IsRequest {
		return false
	}
	switch m.Method {
	case sipscan.Invite:
		if m.HasToTag {
			return false // a re-INVITE: the call goes on
		}
		// A first INVITE, or a new attempt on the same Call-ID after a
		// challenge: the call is pending again. A retransmission changes
		// nothing.
		br := sipscan.CallIDHash(m.Branch)
		if s, ok := t.sess[key]; ok && s.kind == sipscan.KindCall && s.branch == br {
			return false
		}
		t.begin(key, session{kind: sipscan.KindCall, branch: br, until: now + int64(t.Pending)})
	case sipscan.Ack:
		s, ok := t.sess[key]
		if !ok || s.kind != sipscan.KindCall || !m.HasToTag {
			return false
		}
		if !s.answered && sipscan.CallIDHash(m.Branch) == s.branch {
			t.end(key, s)
			return false
		}
		if !s.answered {
			s.answered = true
			s.until = now + t.maxCall()
			t.sess[key] = s
		}
	case sipscan.Bye:
		s, ok := t.sess[key]
		if !ok {
			return true
		}
		t.end(key, s)
	case sipscan.Subscribe:
		s, ok := t.sess[key]
		switch {
		case m.Expires == 0:
			if ok {
				t.end(key, s) // an unsubscribe, or a one-time fetch
			}
		case !m.HasToTag && !ok:
			exp := int64(DefaultSubscription)
			if m.Expires > 0 {
				exp = int64(m.Expires) * int64(time.Second)
			}
			t.begin(key, session{kind: sipscan.KindSubscription, until: now + exp})
		case ok && s.kind == sipscan.KindSubscription && m.Expires > 0:
			s.until = now + int64(m.Expires)*int64(time.Second)
			t.sess[key] = s
		}
	}
	return false
}

// End ends the call of key, whose BYE another table saw; it reports
// whether this table held it.
func (t *Table) End(key uint64) bool {
	s, ok := t.sess[key]
	if ok && s.kind == sipscan.KindCall {
		t.end(key, s)
		return true
	}
	return false
}

// Expire ends the sessions past their time.
func (t *Table) Expire(now int64) {
	for k, s := range t.sess {
		if now >= s.until {
			t.end(k, s)
		}
	}
}

func (t *Table) maxCall() int64 {
	if v := t.MaxCallDuration.Load(); v > 0 {
		return v
	}
	return int64(DefaultMaxCallDuration)
}

func (t *Table) begin(key uint64, s session) {
	if old, ok := t.sess[key]; ok {
		t.Counts[old.kind].Add(-1)
	}
	t.sess[key] = s
	t.Counts[s.kind].Add(1)
}

func (t *Table) end(key uint64, s session) {
	delete(t.sess, key)
	t.Counts[s.kind].Add(-1)
}
