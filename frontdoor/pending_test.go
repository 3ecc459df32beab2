package frontdoor

import (
	"fmt"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/overload/sessions"
)

// sipMsg builds a request (code 0) or a response of the call, with the To
// tag given ("" for none), as a UAC and a UAS send them through a proxy.
func sipMsg(method, callID, toTag string, code int) []byte {
	to := "<sip:bob@example.com>"
	if toTag != "" {
		to += ";tag=" + toTag
	}
	start := method + " sip:bob@example.com SIP/2.0"
	if code != 0 {
		start = fmt.Sprintf("SIP/2.0 %d Whatever", code)
	}
	return []byte(start + "\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK" + token(callID) + "\r\n" +
		"Max-Forwards: 70\r\n" +
		"From: <sip:alice@example.com>;tag=1928301774\r\n" +
		"To: " + to + "\r\n" +
		"Call-ID: " + callID + "\r\n" +
		"CSeq: 1 " + method + "\r\n" +
		"Content-Length: 0\r\n\r\n")
}

// The door keeps a pending INVITE's Call-ID at least as long as a worker may
// hold the INVITE's transaction: the worker's INVITE timeout is
// sessions.InviteTimeout, which the door's TTL is derived from.
func TestPendingInviteTTLCoversTheWorkersInviteTimeout(t *testing.T) {
	t.Parallel()
	if PendingInviteTTL < sessions.InviteTimeout+AffinityTTL {
		t.Fatalf("PendingInviteTTL %v is shorter than the worker's INVITE timeout %v plus 64×T1 (%v)",
			PendingInviteTTL, sessions.InviteTimeout, AffinityTTL)
	}
}

func TestTTL(t *testing.T) {
	t.Parallel()
	const s = int64(time.Second)
	short, long := int64(AffinityTTL), int64(PendingInviteTTL)
	for _, c := range []struct {
		name       string
		msg        []byte
		now, until int64
		want       int64
	}{
		{"new INVITE", sipMsg("INVITE", "c", "", 0), 10 * s, 0, 10*s + long + affinitySlack},
		{"new REGISTER", sipMsg("REGISTER", "c", "", 0), 10 * s, 0, 10*s + short + affinitySlack},
		{"ringing keeps the INVITE's time", sipMsg("INVITE", "c", "t", 180), 11 * s, 10*s + long, 10*s + long},
		{"answer keeps the INVITE's time", sipMsg("INVITE", "c", "t", 200), 50 * s, 10*s + long, 10*s + long},
		{"CANCEL keeps the INVITE's time", sipMsg("CANCEL", "c", "", 0), 60 * s, 10*s + long, 10*s + long},
		{"ACK ends it", sipMsg("ACK", "c", "t", 0), 60 * s, 10*s + long, 60*s + short},
		{"BYE after the ACK", sipMsg("BYE", "c", "t", 0), 70 * s, 60*s + short, 70*s + short + affinitySlack},
		{"a message within the slack keeps the time", sipMsg("BYE", "c", "t", 200), 70*s + affinitySlack/2, 70*s + short + affinitySlack, 70*s + short + affinitySlack},
		{"re-INVITE is pending again", sipMsg("INVITE", "c", "t", 0), 80 * s, 70*s + short, 80*s + long + affinitySlack},
	} {
		var m sipscan.Msg
		if err := sipscan.Scan(c.msg, &m); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if got := ttl(&m, c.now, c.until); got != c.want {
			t.Errorf("%s: want bound until %v, have %v", c.name, time.Duration(c.want), time.Duration(got))
		}
	}
}

// A call that rings longer than AffinityTTL is answered, or cancelled, on
// the worker that holds its INVITE, although the picker would hand a
// forgotten Call-ID to the other worker; after the ACK the Call-ID is
// forgotten AffinityTTL later.
func TestLongRingingCallStaysWithItsWorker(t *testing.T) {
	t.Parallel()
	ws := newWorkers(2)
	var picks int
	d := New(0, func(*sipscan.Msg, bool, int64) Target { picks++; return ws[picks%2] }, nil, nil)
	s := int64(time.Second)
	t0 := time.Now().UnixNano()

	steps := []struct {
		at  int64
		msg []byte
	}{
		// Answered after 100 s of ringing.
		{0, sipMsg("INVITE", "answered", "", 0)},
		{1 * s, sipMsg("INVITE", "answered", "uas1", 180)},
		{100 * s, sipMsg("INVITE", "answered", "uas1", 200)},
		{100 * s, sipMsg("ACK", "answered", "uas1", 0)},
		// Cancelled after 60 s of ringing.
		{2 * s, sipMsg("INVITE", "cancelled", "", 0)},
		{3 * s, sipMsg("INVITE", "cancelled", "uas2", 180)},
		{62 * s, sipMsg("CANCEL", "cancelled", "", 0)},
		{62 * s, sipMsg("INVITE", "cancelled", "uas2", 487)},
		{62 * s, sipMsg("ACK", "cancelled", "uas2", 0)},
	}
	// In time order, as the door sees them.
	for _, at := range []int64{0, 1 * s, 2 * s, 3 * s, 62 * s, 100 * s} {
		for _, st := range steps {
			if st.at == at {
				d.Handle(frame(st.msg), src, t0+st.at)
			}
		}
	}
	if n := ws.received(); n != uint64(len(steps)) {
		t.Fatalf("want every message handed to a worker, have %d of %d", n, len(steps))
	}
	if picks != 2 {
		t.Fatalf("want a worker picked for each of the 2 INVITEs only, have %d picks", picks)
	}
	// Each call's 4 or 5 messages on one worker: 4 and 5.
	a, b := ws[0].received(), ws[1].received()
	if !(a == 4 && b == 5 || a == 5 && b == 4) {
		t.Fatalf("want the answered call's 4 messages on one worker and the cancelled call's 5 on the other, have %d and %d", a, b)
	}
	// The cancelled call's ACK came at 62 s: forgotten at 100 s.
	if got := d.Stats.Affinity.Load(); got != 1 {
		t.Fatalf("want 1 Call-ID bound at 100 s, have %d", got)
	}
	// A message AffinityTTL after the answered call's ACK sweeps it away.
	d.Handle(frame(sipMsg("OPTIONS", "later", "", 0)), src, t0+100*s+int64(AffinityTTL)+2*s)
	if got := d.Stats.Affinity.Load(); got != 1 {
		t.Fatalf("want only the new Call-ID bound after the ACKs' AffinityTTL, have %d", got)
	}
}
