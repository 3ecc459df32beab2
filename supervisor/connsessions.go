package supervisor

import (
	"sync"
	"time"

	"github.com/sipvisor/sipvisor/frontdoor"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload/sessions"
)

// connSessions counts the sessions that come in over connections (TCP),
// which no front door sees: the workers that read them note each request
// that moves a session on (wire.SessionNote), and one table follows them as
// a door follows its datagrams. One table for all of them, as a call's
// requests may arrive on connections that different workers read. A call
// between a TCP phone and a UDP one begins in one table and may end in the
// other: an end one table cannot match is passed to the others.
type connSessions struct {
	mu sync.Mutex
	t  *sessions.Table
	// doors are told of the BYEs of calls this table did not see begin.
	doors func() []*frontdoor.Door
}

func newConnSessions(doors func() []*frontdoor.Door) *connSessions {
	return &connSessions{t: sessions.New(frontdoor.PendingInviteTTL), doors: doors}
}

// note follows one worker's session note.
func (c *connSessions) note(b []byte, now time.Time) {
	method, toTag, expires, branch, callID, ok := wire.ParseSessionNote(b)
	if !ok {
		return
	}
	m := sipscan.Msg{IsRequest: true, Method: sipscan.Method(method), CSeqMethod: sipscan.Method(method),
		HasToTag: toTag, Expires: int(expires), Branch: branch, CallID: callID, MaxForwards: -1, ContentLength: -1}
	key := sipscan.CallIDHash(callID)
	c.mu.Lock()
	unknown := c.t.Track(&m, key, now.UnixNano())
	c.mu.Unlock()
	if unknown {
		for _, d := range c.doors() {
			d.EndSession(key)
		}
	}
}

// end ends a call whose BYE a door saw; it runs on the door's goroutine.
func (c *connSessions) end(key uint64) {
	c.mu.Lock()
	c.t.End(key)
	c.mu.Unlock()
}

func (c *connSessions) expire(now time.Time) {
	c.mu.Lock()
	c.t.Expire(now.UnixNano())
	c.mu.Unlock()
}

// count is the sessions in progress of kind k.
func (c *connSessions) count(k sipscan.Kind) int64 { return c.t.Counts[k].Load() }

// total is the calls and subscriptions in progress.
func (c *connSessions) total() int64 {
	return c.count(sipscan.KindCall) + c.count(sipscan.KindSubscription)
}
