package frontdoor

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/sipscan"
)

// request builds a request for the session table's tests; expires < 0
// leaves the Expires header out.
func request(method, callID, branch, toTag string, cseq, expires int) []byte {
	to := "<sip:bob@example.com>"
	if toTag != "" {
		to += ";tag=" + toTag
	}
	cseqMethod := method
	b := method + " sip:bob@example.com SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK" + branch + "\r\n" +
		"Max-Forwards: 70\r\n" +
		"From: <sip:alice@example.com>;tag=1928301774\r\n" +
		"To: " + to + "\r\n" +
		"Call-ID: " + callID + "\r\n" +
		"CSeq: " + strconv.Itoa(cseq) + " " + cseqMethod + "\r\n"
	if expires >= 0 {
		b += "Expires: " + strconv.Itoa(expires) + "\r\n"
	}
	return []byte(b + "Content-Length: 0\r\n\r\n")
}

// Sessions are counted from the request that starts them to the one that
// ends them, whether or not messages flow in between; requests outside a
// dialog are not sessions.
func TestSessionsCounted(t *testing.T) {
	t.Parallel()
	t0 := time.Now().UnixNano()
	type step struct {
		at        time.Duration // after t0
		msg       []byte        // nil: only let the clock run (a keepalive)
		calls     int64
		subscribe int64
	}
	sec := time.Second
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"answered call until its BYE, silent for minutes", []step{
			{0, request("INVITE", "c1", "inv1", "", 1, -1), 1, 0},
			{sec / 2, request("INVITE", "c1", "inv1", "", 1, -1), 1, 0}, // retransmitted
			{sec, request("ACK", "c1", "ack1", "bob", 1, -1), 1, 0},     // the 2xx's ACK
			{PendingInviteTTL + 5*sec, nil, 1, 0},
			{10 * time.Minute, request("BYE", "c1", "bye1", "bob", 2, -1), 0, 0},
		}},
		{"failed call ends with the ACK of its final reply", []step{
			{0, request("INVITE", "c2", "inv2", "", 1, -1), 1, 0},
			{sec, request("ACK", "c2", "inv2", "bob", 1, -1), 0, 0},
		}},
		{"challenged call counts once, again after the new INVITE", []step{
			{0, request("INVITE", "c3", "inv3a", "", 1, -1), 1, 0},
			{sec, request("ACK", "c3", "inv3a", "srv", 1, -1), 0, 0}, // ACK of the 407
			{2 * sec, request("INVITE", "c3", "inv3b", "", 2, -1), 1, 0},
			{3 * sec, request("ACK", "c3", "ack3", "bob", 2, -1), 1, 0},
			{4 * sec, request("BYE", "c3", "bye3", "bob", 3, -1), 0, 0},
		}},
		{"an INVITE whose ACK never passes ends when it can no longer be pending", []step{
			{0, request("INVITE", "c4", "inv4", "", 1, -1), 1, 0},
			{PendingInviteTTL - sec, nil, 1, 0},
			{PendingInviteTTL + sec, nil, 0, 0},
		}},
		{"an answered call without BYE ends at max_call_duration", []step{
			{0, request("INVITE", "c5", "inv5", "", 1, -1), 1, 0},
			{sec, request("ACK", "c5", "ack5", "bob", 1, -1), 1, 0},
			{time.Hour, nil, 1, 0},
			{2*time.Hour + 2*sec, nil, 0, 0},
		}},
		{"out-of-dialog OPTIONS and MESSAGE are no sessions", []step{
			{0, request("OPTIONS", "o1", "o1", "", 1, -1), 0, 0},
			{0, request("OPTIONS", "o2", "o2", "", 1, -1), 0, 0},
			{0, request("MESSAGE", "m1", "m1", "", 1, -1), 0, 0},
			{0, request("REGISTER", "r1", "r1", "", 1, 3600), 0, 0},
		}},
		{"a subscription until it is ended or expires", []step{
			{0, request("SUBSCRIBE", "s1", "s1a", "", 1, 60), 0, 1},
			{30 * sec, request("SUBSCRIBE", "s1", "s1b", "bob", 2, 60), 0, 1}, // refreshed
			{80 * sec, nil, 0, 1},
			{91 * sec, nil, 0, 0},
			{92 * sec, request("SUBSCRIBE", "s2", "s2a", "", 1, -1), 0, 1}, // an hour by default
			{93 * sec, request("SUBSCRIBE", "s2", "s2b", "bob", 2, 0), 0, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := New(0, newWorkers(1).pick, nil, nil)
			d.Sessions.MaxCallDuration.Store(int64(2 * time.Hour))
			for i, s := range tc.steps {
				msg := s.msg
				if msg == nil {
					msg = []byte("\r\n\r\n")
				}
				d.Handle(frame(msg), src, t0+int64(s.at))
				calls := d.Sessions.Counts[sipscan.KindCall].Load()
				subs := d.Sessions.Counts[sipscan.KindSubscription].Load()
				if calls != s.calls || subs != s.subscribe {
					t.Fatalf("step %d at %v: want %d calls and %d subscriptions, have %d and %d",
						i, s.at, s.calls, s.subscribe, calls, subs)
				}
			}
			if n := d.Sessions.Counts[sipscan.KindOther].Load() + d.Sessions.Counts[sipscan.KindRegistration].Load(); n != 0 {
				t.Fatalf("want no session of another kind, have %d", n)
			}
		})
	}
}

// A call that began where the door did not see it (over TCP) and ends with
// a BYE at the door is passed on; one that began at the door and ended
// elsewhere is ended at the door's next datagram.
func TestSessionEndsAcrossTables(t *testing.T) {
	t.Parallel()
	d := New(0, newWorkers(1).pick, nil, nil)
	var unknown []uint64
	d.OnUnknownEnd = func(key uint64) { unknown = append(unknown, key) }
	now := time.Now().UnixNano()
	d.Handle(frame(request("BYE", "elsewhere", "b1", "bob", 2, -1)), src, now)
	if len(unknown) != 1 || unknown[0] != sipscan.CallIDHash([]byte("elsewhere")) {
		t.Fatalf("a BYE of a call the door did not see: want it passed on, have %v", unknown)
	}
	d.Handle(frame(request("INVITE", "here", "i1", "", 1, -1)), src, now)
	d.Handle(frame(request("ACK", "here", "a1", "bob", 1, -1)), src, now)
	done := make(chan struct{})
	go func() { d.EndSession(sipscan.CallIDHash([]byte("here"))); close(done) }()
	<-done
	if n := d.Sessions.Counts[sipscan.KindCall].Load(); n != 1 {
		t.Fatalf("before the door's next datagram: want the call counted, have %d", n)
	}
	d.Handle(frame([]byte("\r\n\r\n")), src, now)
	if n := d.Sessions.Counts[sipscan.KindCall].Load(); n != 0 || d.Sessions.Len() != 0 {
		t.Fatalf("ended elsewhere: want 0 calls, have %d (%d held)", n, d.Sessions.Len())
	}
	if len(unknown) != 1 {
		t.Fatalf("an end passed in is not passed on again: have %v", unknown)
	}
}

// A retransmission that arrives while its original still waits in the
// worker's queue is dropped by the door; once the worker has taken the
// original, the next retransmission goes through (the worker absorbs it, or
// answers it if it dropped the original as stale).
func TestRetransmissionAbsorbed(t *testing.T) {
	t.Parallel()
	ws := newWorkers(1)
	w := ws[0]
	d := New(0, ws.pick, nil, nil)
	now := time.Now().UnixNano()
	// The worker takes nothing from its queue until the test says so.
	inv := request("INVITE", "rt-1", "rt1", "", 1, -1)
	other := request("INVITE", "rt-2", "rt2", "", 1, -1)
	d.Handle(frame(inv), src, now)
	for i := range 5 {
		d.Handle(frame(inv), src, now+int64(i+1)*int64(500*time.Millisecond))
	}
	d.Handle(frame(other), src, now+int64(3*time.Second))
	// The ACK shares the INVITE's branch but is another request.
	d.Handle(frame(request("ACK", "rt-1", "rt1", "x", 1, -1)), src, now+int64(4*time.Second))
	if a := d.Stats.Absorbed.Load(); a != 5 {
		t.Fatalf("while the original waits: want 5 retransmissions absorbed, have %d", a)
	}
	if q := w.len(); q != 3 {
		t.Fatalf("want 3 frames queued (INVITE, another call's INVITE, ACK), have %d", q)
	}
	w.take()
	d.Handle(frame(inv), src, now+int64(5*time.Second))
	if a := d.Stats.Absorbed.Load(); a != 5 {
		t.Fatalf("after the worker took the original: want the retransmission passed on, have %d absorbed", a)
	}
	if n := w.received(); n != 4 {
		t.Fatalf("want the retransmission handed to the worker, have %d frames handed", n)
	}
	w.take()
	// The sweep forgets what no longer waits.
	d.Handle(frame([]byte("\r\n\r\n")), src, now+int64(10*time.Second))
	if n := len(d.queued); n != 0 {
		t.Fatalf("after the sweep: want no request remembered as queued, have %d", n)
	}
}

// handleNow is a worker that handles each frame as it is handed, as a
// worker's own door hands to the worker (frontdoor.Immediate).
type handleNow struct{ queue }

func (h *handleNow) SendSeq(frame []byte, now int64) (uint64, error) {
	seq, err := h.queue.SendSeq(frame, now)
	h.take()
	return seq, err
}

func (*handleNow) Immediate() bool { return true }

// A target that handles each frame at once leaves the door nothing to
// remember as queued: every retransmission goes through to it.
func TestImmediateTargetLeavesNothingQueued(t *testing.T) {
	t.Parallel()
	w := &handleNow{}
	d := New(0, func(*sipscan.Msg, bool, int64) Target { return w }, nil, nil)
	now := time.Now().UnixNano()
	inv := request("INVITE", "im-1", "im1", "", 1, -1)
	for i := range 3 {
		d.Handle(frame(inv), src, now+int64(i)*int64(500*time.Millisecond))
	}
	d.Handle(frame(request("ACK", "im-1", "im1", "x", 1, -1)), src, now+int64(2*time.Second))
	if n := len(d.queued); n != 0 {
		t.Errorf("want no request remembered as queued, have %d", n)
	}
	if n, a := w.received(), d.Stats.Absorbed.Load(); n != 4 || a != 0 {
		t.Errorf("want all 4 requests handed and none absorbed, have %d handed and %d absorbed", n, a)
	}
}

// TestDoorMemory measures what a call in progress costs the front door
// (its affinity entry, its session, its requests while queued), and what a
// finished one leaves once they have lapsed: nothing beyond the maps' room,
// which Go does not give back and a first wave of calls has grown. The
// figures are in docs/PERFORMANCE.md, "Memory under sustained load".
//
// Not parallel: it measures the process's heap.
func TestDoorMemory(t *testing.T) {
	const n = 2000
	ws := newWorkers(1)
	d := New(0, ws.pick, nil, nil)
	now := time.Now().UnixNano()
	wave := func(name string) (inProgress, finished float64) {
		base := heapInUse()
		for i := range n {
			id := fmt.Sprintf("%s-%d", name, i)
			d.Handle(frame(request("INVITE", id, id+"i", "", 1, -1)), src, now)
			d.Handle(frame(request("ACK", id, id+"a", "bob", 1, -1)), src, now)
			if i%500 == 499 {
				ws.take() // keep the worker's queue short of its capacity
			}
		}
		// The frames are the worker's memory, not the door's.
		ws.take()
		up := heapInUse()
		if c := d.Sessions.Counts[sipscan.KindCall].Load(); c != n {
			t.Fatalf("%s: want %d calls in progress, have %d", name, n, c)
		}
		for i := range n {
			id := fmt.Sprintf("%s-%d", name, i)
			d.Handle(frame(request("BYE", id, id+"b", "bob", 2, -1)), src, now)
			if i%500 == 499 {
				ws.take()
			}
		}
		ws.take()
		now += int64(PendingInviteTTL) + int64(time.Minute) // past every affinity
		d.Handle(frame([]byte("\r\n\r\n")), src, now)
		end := heapInUse()
		if len(d.aff)+d.Sessions.Len()+len(d.queued) != 0 {
			t.Fatalf("%s: after the calls: want nothing kept, have %d affinity entries, %d sessions, %d queued requests",
				name, len(d.aff), d.Sessions.Len(), len(d.queued))
		}
		return float64(up-base) / n, float64(end-base) / n
	}
	// The first wave grows the maps: what a call in progress costs. The
	// second reuses their room: what a finished call leaves.
	inProgress, _ := wave("first")
	// A leak shows in every wave; a stray allocation of the runtime or
	// the race detector's in one: the least of three waves is the door's.
	_, finished := wave("second")
	for _, name := range []string{"third", "fourth"} {
		if finished <= 16 {
			break
		}
		_, f := wave(name)
		finished = min(finished, f)
	}
	t.Logf("front door bytes per call in progress: %.0f; per finished call: %.0f", inProgress, finished)
	if inProgress <= 0 {
		t.Fatalf("bytes per call in progress: want more than 0, have %.0f: the measure is broken", inProgress)
	}
	if finished > 16 {
		t.Fatalf("bytes per finished call: want at most 16, have %.0f", finished)
	}
}

func heapInUse() int64 {
	var ms runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}
