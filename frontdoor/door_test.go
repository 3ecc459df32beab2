package frontdoor

import (
	"bytes"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload"
)

var src = netip.MustParseAddrPort("127.0.0.1:5070")

func invite(callID string, toTag string) []byte {
	to := "<sip:bob@example.com>"
	if toTag != "" {
		to += ";tag=" + toTag
	}
	method := "INVITE"
	if toTag != "" {
		method = "BYE"
	}
	return []byte(method + " sip:bob@example.com SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK" + token(callID) + method + "\r\n" +
		"Max-Forwards: 70\r\n" +
		"From: <sip:alice@example.com>;tag=1928301774\r\n" +
		"To: " + to + "\r\n" +
		"Call-ID: " + callID + "\r\n" +
		"CSeq: 1 " + method + "\r\n" +
		"Contact: <sip:alice@127.0.0.1:5070>\r\n" +
		"Content-Length: 0\r\n\r\n")
}

func frame(dgram []byte) []byte {
	return append(make([]byte, wire.MsgHeaderLen), dgram...)
}

// recorder collects stateless replies.
type recorder struct{ replies [][]byte }

func (r *recorder) reply(b []byte, to netip.AddrPort) {
	r.replies = append(r.replies, append([]byte(nil), b...))
}

// Every message of a call goes to the worker that got its first one, even
// when another worker is idler.
func TestAffinity(t *testing.T) {
	t.Parallel()
	ws := newWorkers(2)
	d := New(0, ws.pick, nil, nil)
	now := time.Now().UnixNano()
	d.Handle(frame(invite("call-a", "")), src, now)
	first := ws[0]
	if first.received() != 1 {
		t.Fatalf("want the call's INVITE on the first idle worker, have %d there", first.received())
	}
	for i := 0; i < 10; i++ {
		// New transactions of the call (a retransmission of a request still
		// queued would be absorbed: TestRetransmissionAbsorbed).
		d.Handle(frame(request("INVITE", "call-a", fmt.Sprintf("i%d", i), "", 2+i, -1)), src, now+int64(i))
		d.Handle(frame(request("BYE", "call-a", fmt.Sprintf("b%d", i), "as83kd", 20+i, -1)), src, now+int64(i))
	}
	if first.received() != 21 || ws.received() != 21 {
		t.Fatalf("want all 21 messages of the call on one worker, have %d of %d", first.received(), ws.received())
	}
	if got := d.Stats.Affinity.Load(); got != 1 {
		t.Fatalf("want 1 Call-ID bound, have %d", got)
	}
	// Past the affinity lifetime the Call-ID is forgotten: that of a
	// pending INVITE, as call-a's INVITE was never acknowledged.
	d.Handle(frame(invite("call-b", "")), src, now+int64(PendingInviteTTL)+int64(time.Second))
	if got := d.Stats.Affinity.Load(); got != 1 {
		t.Fatalf("want only the new Call-ID bound after expiry, have %d", got)
	}
}

// A refused new session gets a 503 with Retry-After from the door, and no
// worker sees it; messages of existing sessions still flow.
func TestRefusalAnsweredByTheDoor(t *testing.T) {
	t.Parallel()
	ws := newWorkers(1)
	rec := &recorder{}
	refuse := false
	d := New(0, ws.pick,
		func(*sipscan.Msg, int64) (overload.Refusal, int) {
			if refuse {
				return overload.RefuseSuspended, 30
			}
			return overload.RefuseNone, 0
		}, rec.reply)
	now := time.Now().UnixNano()
	d.Handle(frame(invite("up-before", "")), src, now)
	refuse = true
	d.Handle(frame(invite("new-one", "")), src, now)
	d.Handle(frame(invite("up-before", "xyz")), src, now) // its BYE
	d.Handle(frame(invite("other", "xyz")), src, now)     // in-dialog, no affinity
	if n := ws.received(); n != 3 {
		t.Fatalf("want the 3 messages not refused handed to the worker, have %d", n)
	}
	if len(rec.replies) != 1 {
		t.Fatalf("want 1 stateless reply, have %d", len(rec.replies))
	}
	r := string(rec.replies[0])
	if !strings.HasPrefix(r, "SIP/2.0 503 ") || !strings.Contains(r, "\r\nRetry-After: 30\r\n") || !strings.Contains(r, "Call-ID: new-one\r\n") {
		t.Fatalf("want a 503 with Retry-After 30 for new-one, have %q", r)
	}
	if v := d.Stats.Refused[overload.RefuseSuspended].Load(); v != 1 {
		t.Fatalf("want 1 refusal counted as suspended, have %d", v)
	}
	// The client's ACK of the 503 ends there: no worker sees it.
	var rm sipscan.Msg
	if err := sipscan.Scan(rec.replies[0], &rm); err != nil {
		t.Fatal(err)
	}
	ack := []byte("ACK sip:bob@example.com SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bKneweoneINVITE\r\n" +
		"Max-Forwards: 70\r\n" +
		"From: <sip:alice@example.com>;tag=1928301774\r\n" +
		"To: <sip:bob@example.com>;tag=" + string(rm.ToTag) + "\r\n" +
		"Call-ID: new-one\r\n" +
		"CSeq: 1 ACK\r\n" +
		"Content-Length: 0\r\n\r\n")
	ack = bytes.Replace(ack, []byte("neweone"), []byte(token("new-one")), 1)
	before := d.Stats.Forwarded.Load()
	d.Handle(frame(ack), src, now)
	if d.Stats.OwnAcks.Load() != 1 || d.Stats.Forwarded.Load() != before {
		t.Fatalf("want the ACK of the door's own 503 absorbed, have %d absorbed, %d forwarded", d.Stats.OwnAcks.Load(), d.Stats.Forwarded.Load()-before)
	}
}

// Malformed input is counted by reason and never crashes the door; requests
// whose start line is readable get a 400.
func TestMalformed(t *testing.T) {
	t.Parallel()
	ws := newWorkers(1)
	rec := &recorder{}
	d := New(0, ws.pick, nil, rec.reply)
	now := time.Now().UnixNano()
	good := invite("m1", "")
	noCallID := bytes.Replace(good, []byte("Call-ID: m1\r\n"), nil, 1)
	longLine := bytes.Replace(good, []byte("Max-Forwards: 70\r\n"), []byte("X-Long: "+strings.Repeat("a", 64<<10)+"\r\n"), 1)
	badMaxFwd := bytes.Replace(good, []byte("Max-Forwards: 70"), []byte("Max-Forwards: lots"), 1)
	// A 400 goes back only where the client could match it: a request with
	// its Via, From, To, Call-ID and CSeq intact.
	cases := []struct {
		name  string
		dgram []byte
		err   sipscan.Error
		reply bool
	}{
		{"truncated headers", good[:len(good)/2], sipscan.ErrTruncated, false},
		{"no Call-ID", noCallID, sipscan.ErrNoCallID, false},
		{"garbage", []byte("\x00\xff\x13garbage\r\n\r\n"), sipscan.ErrNUL, false},
		{"not SIP", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), sipscan.ErrBadStartLine, false},
		{"oversized", append(append([]byte(nil), good...), make([]byte, 70000)...), sipscan.ErrTooLong, false},
		{"64 KiB header line", longLine, sipscan.ErrTooLong, false},
		{"bad Max-Forwards", badMaxFwd, sipscan.ErrBadMaxForwards, true},
	}
	for _, c := range cases {
		before := len(rec.replies)
		var counted [sipscan.NumErrors]uint64
		for i := range counted {
			counted[i] = d.Stats.Malformed[i].Load()
		}
		d.Handle(frame(c.dgram), src, now)
		var reason sipscan.Error
		for i := range counted {
			if d.Stats.Malformed[i].Load() > counted[i] {
				reason = sipscan.Error(i)
			}
		}
		if reason != c.err {
			t.Errorf("%s: want it counted as %v, have %v", c.name, c.err, reason)
		}
		if got := len(rec.replies) > before; got != c.reply {
			t.Errorf("%s: want reply %v, have %v", c.name, c.reply, got)
		}
	}
	// Keepalives are neither errors nor work.
	d.Handle(frame([]byte("\r\n\r\n")), src, now)
	if d.Stats.Keepalives.Load() != 1 {
		t.Errorf("want a keepalive counted")
	}
	// Service continues.
	d.Handle(frame(good), src, now)
	if d.Stats.Forwarded.Load() != 1 || ws.received() != 1 {
		t.Fatalf("want the good message forwarded after the bad ones, have %d", d.Stats.Forwarded.Load())
	}
}

// token keeps the letters and digits of s: a valid Via branch.
func token(s string) string {
	return strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' {
			return r
		}
		return -1
	}, s)
}
