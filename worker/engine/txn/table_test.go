package txn

import (
	"testing"
	"time"
	"unsafe"
)

// The engine's transactions embed the layer's, as these do.
type srv struct{ Server }

type cli struct{ Client }

var timers = Timers{T1: 500 * time.Millisecond, T2: 4 * time.Second, T4: 5 * time.Second,
	InviteTimeout: 120 * time.Second, Linger: 5 * time.Second}

// fireAll runs every deadline due by until, in order, and returns when
// each fired and what it asked.
func fireAll(tb *Table[*srv, *cli], until time.Time, base time.Time) (at []time.Duration, what []Fired) {
	for {
		next, ok := tb.Next()
		if !ok || next.After(until) {
			return
		}
		x, _ := tb.Due(next)
		var f Fired
		switch x := x.(type) {
		case *srv:
			f = tb.FireServer(x, next)
		case *cli:
			f = tb.FireClient(x, true, next)
		}
		at, what = append(at, next.Sub(base)), append(what, f)
		if f == TimedOut {
			return
		}
	}
}

// Timers A and B: an INVITE over UDP is resent at T1, 2T1, 4T1... and
// times out at 64*T1 (RFC 3261 17.1.1.2); E and F: a non-INVITE's
// interval doubles up to T2, and is T2 once a provisional reply came
// (17.1.2.2).
func TestClientTimers(t *testing.T) {
	t.Parallel()
	base := time.Unix(1_000_000, 0)
	s := time.Second
	ms := time.Millisecond
	for _, tc := range []struct {
		name        string
		invite      bool
		provisional time.Duration // when a provisional reply comes, 0 for none
		want        []time.Duration
	}{
		{"INVITE", true, 0, []time.Duration{500 * ms, 1500 * ms, 3500 * ms, 7500 * ms, 15500 * ms, 31500 * ms, 32 * s}},
		{"non-INVITE", false, 0, []time.Duration{500 * ms, 1500 * ms, 3500 * ms, 7500 * ms, 11500 * ms, 15500 * ms,
			19500 * ms, 23500 * ms, 27500 * ms, 31500 * ms, 32 * s}},
		{"INVITE ringing", true, 1 * s, []time.Duration{500 * ms, 121 * s}},
		{"non-INVITE trying", false, 1 * s, []time.Duration{500 * ms, 5 * s, 9 * s, 13 * s, 17 * s, 21 * s, 25 * s, 29 * s, 32 * s}},
	} {
		tb := NewTable[*srv, *cli](timers)
		c := &cli{Client: Client{Key: "b|M", Invite: tc.invite}}
		tb.AddClient(c)
		tb.StartClient(c, true, 0, base)
		var have []time.Duration
		if tc.provisional > 0 {
			at, _ := fireAll(tb, base.Add(tc.provisional), base)
			have = append(have, at...)
			tb.Provisional(c, true, 0, base.Add(tc.provisional))
		}
		at, what := fireAll(tb, base.Add(time.Hour), base)
		have = append(have, at...)
		if len(have) != len(tc.want) {
			t.Fatalf("%s: want deadlines at %v, have %v", tc.name, tc.want, have)
		}
		for i := range have {
			if have[i] != tc.want[i] {
				t.Fatalf("%s: want deadlines at %v, have %v", tc.name, tc.want, have)
			}
		}
		if what[len(what)-1] != TimedOut {
			t.Fatalf("%s: want a time-out last, have %v", tc.name, what)
		}
		if tb.Client([]byte("b|M")) != c {
			t.Fatalf("%s: a timed-out branch stays for its owner to end", tc.name)
		}
		tb.EndClient(c)
		if tb.Client([]byte("b|M")) != nil || tb.Len() != 0 || tb.Pending() != 0 || c.State != Terminated {
			t.Fatalf("%s: an ended branch is gone from the table", tc.name)
		}
	}
}

// Timers G and H: a non-2xx to an INVITE over UDP is resent at T1, 2T1,
// ... up to T2 until 64*T1; its ACK stops that, and timer I ends it.
func TestServerTimers(t *testing.T) {
	t.Parallel()
	base := time.Unix(1_000_000, 0)
	ms := time.Millisecond
	tb := NewTable[*srv, *cli](timers)
	s := &srv{Server: Server{Key: "k", DialogKey: "d", Invite: true}}
	tb.AddServer(s)
	tb.Final(s, 486, false, base)
	at, what := fireAll(tb, base.Add(2*time.Second), base)
	if want := []time.Duration{500 * ms, 1500 * ms}; len(at) != 2 || at[0] != want[0] || at[1] != want[1] ||
		what[0] != Resend || what[1] != Resend {
		t.Fatalf("timer G: want resends at %v, have %v %v", want, at, what)
	}
	if !tb.Ack(s, false, base.Add(2*time.Second)) || s.State != Confirmed {
		t.Fatal("want the ACK taken")
	}
	at, what = fireAll(tb, base.Add(time.Hour), base)
	if len(at) != 1 || at[0] != 7*time.Second || what[0] != Ended {
		t.Fatalf("timer I: want the end at 7s, have %v %v", at, what)
	}
	if tb.Server([]byte("k")) != nil || tb.Dialog([]byte("d")) != nil || tb.Len() != 0 {
		t.Fatal("want an ended transaction gone from the table")
	}

	// Without an ACK, timer H ends it at 64*T1.
	tb.AddServer(s)
	s.State = Trying
	tb.Final(s, 486, false, base)
	at, what = fireAll(tb, base.Add(time.Hour), base)
	if at[len(at)-1] != 32*time.Second || what[len(what)-1] != Ended || what[len(what)-2] != Resend {
		t.Fatalf("timer H: want resends then the end at 32s, have %v %v", at, what)
	}
}

// A transaction entered with the key of one still in the table takes its
// place, and the first's end leaves it there: the table keeps the key
// string of the transaction it finds by it.
func TestTableSameKey(t *testing.T) {
	t.Parallel()
	tb := NewTable[*srv, *cli](timers)
	key1 := []byte("same|INVITE")
	a := &srv{Server: Server{Key: unsafe.String(&key1[0], len(key1)), DialogKey: "d"}}
	b := &srv{Server: Server{Key: "same|INVITE", DialogKey: "d"}}
	tb.AddServer(a)
	tb.AddServer(b)
	copy(key1, "XXXX") // a's key bytes reused: the table must not hold them
	tb.EndServer(a)
	if tb.Server([]byte("same|INVITE")) != b || tb.Dialog([]byte("d")) != b || tb.Len() != 1 {
		t.Fatal("want the second transaction found by the key")
	}
	tb.EndServer(b)
	if tb.Len() != 0 || tb.Dialogs() != 0 {
		t.Fatal("want nothing left")
	}
}
