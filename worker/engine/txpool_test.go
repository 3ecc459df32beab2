package engine

import (
	"bytes"
	"reflect"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/worker/engine/txn"
)

// txKeys are the keys of a call's INVITE transactions.
type txKeys struct{ server, dialog, client []byte }

func inviteKeys(t *testing.T, inv []byte, branch string) txKeys {
	t.Helper()
	m, err := sip.ParseMessage(inv)
	if err != nil {
		t.Fatal(err)
	}
	req := m.(*sip.Request)
	return txKeys{[]byte(serverKey(req, "INVITE")), []byte(dialogKey(req)), []byte(branch + "|INVITE")}
}

// A transaction pair reused for a new call keeps nothing of its last one:
// the old call's keys find nothing, its deadlines do not fire, its late
// responses and ACKs move nothing, and the new call's timers run by their
// own.
func TestRecycledTransaction(t *testing.T) {
	t.Parallel()
	d := newCallDriver(t)
	defer d.close()
	w := d.w

	// Call a: INVITE, 486, the ACK of it; its transactions end by their
	// timers and its pair goes back to the free list.
	const callA, callB = "recycled-a", "recycled-b"
	invA := d.invite(callA)
	d.msg(d.uac, invA)
	brA := d.lastBranch()
	a := inviteKeys(t, invA, brA)
	tA := w.txns.Server(a.server)
	if tA == nil || tA.pair == nil || w.txns.Client(a.client) == nil || w.txns.Dialog(a.dialog) != tA {
		t.Fatalf("call a: want its INVITE transactions made as a pair, found by their keys")
	}
	pair := tA.pair
	busy := d.reply(486, "Busy Here", brA, callA, 1, "INVITE")
	d.msg(d.uas, busy)
	d.msg(d.uac, crlf(inDialog("ACK", d.ruri, d.uac, "z9hG4bK-"+callA, callA, 1, "bob-tag", nil)))
	if tA.State != txn.Confirmed {
		t.Fatalf("call a: want its server transaction confirmed by the ACK, have state %d", tA.State)
	}
	w.Tick(time.Now().Add(time.Hour))
	if w.Held() != 0 || w.txns.Pending() != 0 || len(w.pairs) != 1 || w.pairs[0] != pair {
		t.Fatalf("call a: want its pair free and nothing held, have %d held, %d deadlines, %d free pairs",
			w.Held(), w.txns.Pending(), len(w.pairs))
	}
	if !reflect.DeepEqual(*pair, txPair{keys: pair.keys, buf: pair.buf}) {
		t.Fatal("call a: want its pair cleared but for its key and resend buffers")
	}

	// Call b takes the same pair.
	start := time.Now()
	invB := d.invite(callB)
	d.msg(d.uac, invB)
	brB := d.lastBranch()
	b := inviteKeys(t, invB, brB)
	tB := w.txns.Server(b.server)
	if tB != &pair.s || w.txns.Client(b.client) != &pair.c || w.txns.Dialog(b.dialog) != tB {
		t.Fatal("call b: want its INVITE transactions in call a's pair, found by their keys")
	}
	for name, k := range map[string][]byte{"server": a.server, "dialog": a.dialog, "client": a.client} {
		if w.txns.Server(k) != nil || w.txns.Dialog(k) != nil || w.txns.Client(k) != nil {
			t.Fatalf("call a's %s key finds a transaction in its reused pair", name)
		}
	}
	if tB.Key != string(b.server) || tB.DialogKey != string(b.dialog) || pair.c.Key != string(b.client) ||
		!bytes.Contains(tB.Last, []byte(callB)) || !bytes.Contains(pair.c.Bytes, []byte(callB)) {
		t.Fatalf("call b: want its own keys and bytes, have %q %q %q", tB.Key, tB.DialogKey, pair.c.Key)
	}
	// One deadline: call b's branch's timer A; none of call a's.
	if w.txns.Pending() != 1 || !pair.c.Deadline().Scheduled() || tB.Deadline().Scheduled() {
		t.Fatalf("call b: want one deadline, its branch's, have %d", w.txns.Pending())
	}

	// Call a's late responses, a retransmitted ACK and an ACK of a 2xx
	// move nothing of call b's.
	before := w.Stats
	d.msg(d.uas, d.reply(180, "Ringing", brA, callA, 1, "INVITE"))
	d.msg(d.uas, busy)
	d.msg(d.uac, crlf(inDialog("ACK", d.ruri, d.uac, "z9hG4bK-"+callA, callA, 1, "bob-tag", nil)))
	d.msg(d.uac, crlf(inDialog("ACK", d.ruri, d.uac, "z9hG4bK-a"+callA, callA, 1, "bob-tag", []string{d.rr})))
	if tB.State != txn.Trying || pair.c.State != txn.Trying || tB.LastCode != 100 || w.Stats.Retransmissions != before.Retransmissions {
		t.Fatalf("call a's late messages moved call b's transactions: states %d %d, last reply %d, %+v",
			tB.State, pair.c.State, tB.LastCode, w.Stats)
	}

	// Call b's timer A fires at T1 from its own start, once.
	w.Tick(start.Add(w.opt.T1 / 2))
	if w.Stats.Retransmissions != before.Retransmissions {
		t.Fatal("call b: a deadline fired before its branch's timer A")
	}
	w.Tick(time.Now().Add(w.opt.T1))
	if w.Stats.Retransmissions != before.Retransmissions+1 || pair.c.State != txn.Trying {
		t.Fatalf("call b: want its INVITE resent once at timer A, have %d", w.Stats.Retransmissions-before.Retransmissions)
	}

	// Call b ends as a call does.
	d.msg(d.uas, d.reply(200, "OK", brB, callB, 1, "INVITE"))
	w.Tick(time.Now().Add(time.Hour))
	if w.Held() != 0 || w.txns.Pending() != 0 || w.txns.Dialogs() != 0 || len(w.pairs) != 1 {
		t.Fatalf("call b: want nothing held and its pair free, have %d held, %d free pairs", w.Held(), len(w.pairs))
	}
}

// A pair goes back to the free list only when its server transaction has
// ended and no branch refers to it: a second branch (serial forking) may
// outlive both of the pair's own transactions.
func TestPairOutlivedByBranch(t *testing.T) {
	t.Parallel()
	d := newCallDriver(t)
	defer d.close()
	w := d.w
	p := w.newPair()
	t0 := &p.s
	*t0 = serverTx{Server: txn.Server{Key: "k|h:1|INVITE", Invite: true}, pair: p}
	w.txns.AddServer(t0)
	other := &clientTx{Client: txn.Client{Key: "b2|INVITE", Invite: true}, stx: t0}
	p.c = clientTx{Client: txn.Client{Key: "b1|INVITE", Invite: true}, stx: t0}
	for _, ct := range []*clientTx{&p.c, other} {
		w.txns.AddClient(ct)
		t0.open++
		w.linger(ct, txn.Completed)
	}
	w.endClientTx(&p.c)
	w.endServerTx(t0)
	if len(w.pairs) != 0 || t0.pair != p {
		t.Fatal("want the pair kept while a branch refers to its server transaction")
	}
	w.Tick(time.Now().Add(time.Hour)) // ends the other branch by its timer
	if len(w.pairs) != 1 || w.pairs[0] != p || w.Held() != 0 {
		t.Fatalf("want the pair free once its last branch ended, have %d free pairs, %d held", len(w.pairs), w.Held())
	}
	w.release(&p.s) // a second release does nothing
	if len(w.pairs) != 1 {
		t.Fatal("want a pair on the free list once")
	}
}

// An INVITE answered 2xx gives its pair's buffer back at once (settle),
// and what lingering is for still holds: a retransmitted INVITE is
// absorbed, not relayed again nor answered from the transaction (RFC
// 6026), and a retransmitted BYE gets the same 200 again.
func TestSettledInviteLingers(t *testing.T) {
	t.Parallel()
	d := newCallDriver(t)
	defer d.close()
	w := d.w
	uac := d.socks[1]
	drain := func() [][]byte {
		var got [][]byte
		buf := make([]byte, 65535)
		for {
			// The worker writes before HandleMessage returns: what it sent
			// is already queued at the socket.
			uac.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			n, err := uac.Read(buf)
			if err != nil {
				return got
			}
			got = append(got, bytes.Clone(buf[:n]))
		}
	}
	const callID = "settled"
	inv := d.invite(callID)
	d.up(callID)
	br := d.lastBranch()
	tx := w.txns.Server(inviteKeys(t, inv, br).server)
	if tx == nil || tx.pair == nil || tx.State != txn.Accepted {
		t.Fatal("want the INVITE's server transaction lingering in Accepted")
	}
	p := tx.pair
	if p.buf != nil || tx.Last != nil || tx.Spare != nil || tx.firstRelay != nil || p.c.Bytes != nil || len(w.bufs) != 1 {
		t.Fatalf("want the settled pair's buffer on the free list, have %d bytes kept, %d free buffers", cap(p.buf), len(w.bufs))
	}
	drain()
	before := w.Stats
	d.msg(d.uac, inv)
	if got := drain(); len(got) != 0 || d.lastBranch() != br || w.Stats.Retransmissions != before.Retransmissions+1 {
		t.Fatalf("retransmitted INVITE: want it absorbed, have %d messages sent, branch %s (was %s)", len(got), d.lastBranch(), br)
	}

	d.down(callID)
	ok := drain()
	if len(ok) != 1 || !bytes.HasPrefix(ok[0], []byte("SIP/2.0 200")) {
		t.Fatalf("BYE: want its 200 upstream, have %q", ok)
	}
	d.msg(d.uac, crlf(inDialog("BYE", d.ruri, d.uac, "z9hG4bK-"+callID, callID, 2, "bob-tag", []string{d.rr})))
	if again := drain(); len(again) != 1 || !bytes.Equal(again[0], ok[0]) {
		t.Fatalf("retransmitted BYE: want the same 200 again, have %q", again)
	}
	w.Tick(time.Now().Add(time.Hour))
	if w.Held() != 0 || w.txns.Pending() != 0 || len(w.pairs) != 2 {
		t.Fatalf("want nothing held and both pairs free, have %d held, %d free pairs", w.Held(), len(w.pairs))
	}
}
