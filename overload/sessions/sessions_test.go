package sessions

import (
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/sipscan"
)

type step struct {
	at      time.Duration // since the start
	method  sipscan.Method
	call    string
	toTag   bool
	branch  string
	expires int
	end     string // "" or the call End is called for, instead of a request
	// after the step
	calls, subs int64
	unknown     bool
}

func TestTable(t *testing.T) {
	t.Parallel()
	inv, ack, bye, sub, opt := sipscan.Invite, sipscan.Ack, sipscan.Bye, sipscan.Subscribe, sipscan.Options
	for _, c := range []struct {
		name  string
		steps []step
	}{
		{"a call from INVITE to BYE", []step{
			{method: inv, call: "a", branch: "b1", expires: -1, calls: 1},
			{method: inv, call: "a", branch: "b1", expires: -1, calls: 1}, // retransmission
			{method: ack, call: "a", toTag: true, branch: "b2", expires: -1, calls: 1},
			{at: time.Hour, method: inv, call: "a", toTag: true, branch: "b3", expires: -1, calls: 1}, // re-INVITE
			{at: 2 * time.Hour, method: bye, call: "a", toTag: true, branch: "b4", expires: -1, calls: 0},
		}},
		{"the ACK of a failure ends the call", []step{
			{method: inv, call: "a", branch: "b1", expires: -1, calls: 1},
			{method: ack, call: "a", toTag: true, branch: "b1", expires: -1, calls: 0},
		}},
		{"an unanswered INVITE counts as long as it may be pending", []step{
			{method: inv, call: "a", branch: "b1", expires: -1, calls: 1},
			{at: 2*time.Minute - time.Second, calls: 1},
			{at: 2 * time.Minute, calls: 0},
		}},
		{"an answered call counts at most MaxCallDuration", []step{
			{method: inv, call: "a", branch: "b1", expires: -1, calls: 1},
			{method: ack, call: "a", toTag: true, branch: "b2", expires: -1, calls: 1},
			{at: 3*time.Hour - time.Second, calls: 1},
			{at: 3 * time.Hour, calls: 0},
		}},
		{"a BYE of a call begun elsewhere", []step{
			{method: bye, call: "x", toTag: true, branch: "b1", expires: -1, unknown: true},
		}},
		{"End ends a call whose BYE was seen elsewhere", []step{
			{method: inv, call: "a", branch: "b1", expires: -1, calls: 1},
			{end: "a", calls: 0},
			{end: "a", calls: 0},
		}},
		{"a subscription until its Expires, refreshed, then unsubscribed", []step{
			{method: sub, call: "s", branch: "b1", expires: 60, subs: 1},
			{at: 50 * time.Second, method: sub, call: "s", toTag: true, branch: "b2", expires: 60, subs: 1},
			{at: 100 * time.Second, subs: 1},
			{at: 105 * time.Second, method: sub, call: "s", toTag: true, branch: "b3", expires: 0, subs: 0},
		}},
		{"a subscription without Expires counts an hour", []step{
			{method: sub, call: "s", branch: "b1", expires: -1, subs: 1},
			{at: time.Hour, subs: 0},
		}},
		{"OPTIONS are no sessions", []step{
			{method: opt, call: "o", branch: "b1", expires: -1},
		}},
	} {
		t.Run(c.name, func(t *testing.T) {
			tb := New(2 * time.Minute)
			tb.MaxCallDuration.Store(int64(3 * time.Hour))
			t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).UnixNano()
			for i, s := range c.steps {
				now := t0 + int64(s.at)
				tb.Expire(now)
				key := sipscan.CallIDHash([]byte(s.call))
				var unknown bool
				switch {
				case s.end != "":
					tb.End(sipscan.CallIDHash([]byte(s.end)))
				case s.method != 0:
					m := sipscan.Msg{IsRequest: true, Method: s.method, CallID: []byte(s.call), HasToTag: s.toTag,
						Branch: []byte(s.branch), Expires: s.expires}
					unknown = tb.Track(&m, key, now)
				}
				calls, subs := tb.Counts[sipscan.KindCall].Load(), tb.Counts[sipscan.KindSubscription].Load()
				if calls != s.calls || subs != s.subs || unknown != s.unknown {
					t.Fatalf("step %d: want calls %d subs %d unknown %v, have %d %d %v", i, s.calls, s.subs, s.unknown, calls, subs, unknown)
				}
				if int64(tb.Len()) != calls+subs {
					t.Fatalf("step %d: %d sessions held for %d counted", i, tb.Len(), calls+subs)
				}
			}
		})
	}
}
