package engine

import (
	"bytes"
	"net"
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

// udpPeer reads what the worker sent a peer's socket.
func udpPeer(c *net.UDPConn) func() [][]byte {
	return func() [][]byte {
		var got [][]byte
		buf := make([]byte, 65535)
		for {
			// The worker writes before HandleMessage returns: what it sent
			// is already queued at the socket.
			c.SetReadDeadline(time.Now().Add(50 * time.Millisecond))
			n, err := c.Read(buf)
			if err != nil {
				return got
			}
			got = append(got, bytes.Clone(buf[:n]))
		}
	}
}

// A call's transactions, once they have nothing left to do but linger,
// give their pairs back at once for settled records (compact), and what
// lingering is for still holds: a retransmitted INVITE is absorbed (RFC
// 6026), the callee's 2xx retransmissions are passed on, the ACK of the
// 2xx matches its INVITE, a CANCEL is answered and goes no further, and a
// retransmitted BYE gets the same 200 again. Once lingering is over, none
// of it is matched any more.
func TestSettledCallLingers(t *testing.T) {
	t.Parallel()
	d := newCallDriver(t)
	defer d.close()
	w := d.w
	uac, uas := udpPeer(d.socks[1]), udpPeer(d.socks[2])
	quiet := func(what string) {
		t.Helper()
		if a, b := uac(), uas(); len(a)+len(b) != 0 {
			t.Fatalf("%s: want nothing sent, have %q upstream, %q downstream", what, a, b)
		}
	}
	const callID = "settled"
	inv := d.invite(callID)
	d.msg(d.uac, inv)
	br := d.lastBranch()
	d.msg(d.uas, d.reply(180, "Ringing", br, callID, 1, "INVITE"))
	d.msg(d.uas, d.reply(200, "OK", br, callID, 1, "INVITE"))
	d.msg(d.uac, crlf(inDialog("ACK", d.ruri, d.uac, "z9hG4bK-a"+callID, callID, 1, "bob-tag", []string{d.rr})))
	k := inviteKeys(t, inv, br)
	if w.txns.Server(k.server) != nil || w.txns.Client(k.client) != nil || w.txns.Dialog(k.dialog) != nil {
		t.Fatal("want the answered INVITE's transactions out of the table")
	}
	if r := w.txns.SettledServer(k.server); r == nil || w.txns.SettledClient(k.client) != r || w.txns.SettledDialog(k.dialog) != r || r.Last() != nil {
		t.Fatal("want the answered INVITE settled, found by its three keys, with no reply to resend")
	}
	if len(w.pairs) != 1 || w.Held() != 1 || w.txns.Pending() != 1 {
		t.Fatalf("want the INVITE's pair free at once and one settled record, have %d free pairs, %d held", len(w.pairs), w.Held())
	}
	uac()
	uas()

	before := w.Stats
	d.msg(d.uac, inv)
	quiet("retransmitted INVITE")
	if w.Stats.Retransmissions != before.Retransmissions+1 {
		t.Fatalf("retransmitted INVITE: want it absorbed, have %+v", w.Stats)
	}

	ok := d.reply(200, "OK", br, callID, 1, "INVITE")
	d.msg(d.uas, ok)
	if up := uac(); len(up) != 1 || !bytes.HasPrefix(up[0], []byte("SIP/2.0 200")) || bytes.Contains(up[0], []byte(br)) {
		t.Fatalf("the callee's 2xx again: want it passed upstream less this proxy's Via, have %q", up)
	}

	// An ACK with no Route: t_check_trans matches it to the settled
	// INVITE, and it is relayed.
	ack := crlf(inDialog("ACK", d.ruri, d.uac, "z9hG4bK-a2"+callID, callID, 1, "bob-tag", nil))
	d.msg(d.uac, ack)
	if down := uas(); len(down) != 1 || !bytes.HasPrefix(down[0], []byte("ACK ")) {
		t.Fatalf("ACK of the 2xx: want it matched and relayed, have %q", down)
	}

	cancel := crlf(inDialog("CANCEL", "sip:bob@example.com", d.uac, "z9hG4bK-"+callID, callID, 1, "", nil))
	d.msg(d.uac, cancel)
	if up, down := uac(), uas(); len(up) != 1 || !bytes.HasPrefix(up[0], []byte("SIP/2.0 200")) || len(down) != 0 {
		t.Fatalf("CANCEL after the 2xx: want it answered 200 and not relayed, have %q upstream, %q downstream", up, down)
	}

	d.down(callID)
	byeBr := d.lastBranch()
	okBye := uac()
	if len(okBye) != 1 || !bytes.HasPrefix(okBye[0], []byte("SIP/2.0 200")) {
		t.Fatalf("BYE: want its 200 upstream, have %q", okBye)
	}
	uas()
	if r := w.txns.SettledServer(bytes.Replace(k.server, []byte("|INVITE"), []byte("|BYE"), 1)); r == nil || !bytes.Equal(r.Last(), okBye[0]) {
		t.Fatal("want the BYE settled with its 200 to resend")
	}
	if len(w.pairs) != 1 || w.Held() != 2 {
		t.Fatalf("want the BYE's pair free at once, have %d free pairs, %d held", len(w.pairs), w.Held())
	}
	bye := crlf(inDialog("BYE", d.ruri, d.uac, "z9hG4bK-"+callID, callID, 2, "bob-tag", []string{d.rr}))
	d.msg(d.uac, bye)
	if again, down := uac(), uas(); len(again) != 1 || !bytes.Equal(again[0], okBye[0]) || len(down) != 0 {
		t.Fatalf("retransmitted BYE: want the same 200 again and nothing relayed, have %q upstream, %q downstream", again, down)
	}
	d.msg(d.uas, d.reply(200, "OK", byeBr, callID, 2, "BYE"))
	if up := uac(); len(up) != 1 || !bytes.Equal(up[0], okBye[0]) {
		t.Fatalf("the callee's 200 to the BYE again: want it passed upstream as before, have %q", up)
	}

	w.Tick(time.Now().Add(time.Hour))
	if w.Held() != 0 || w.txns.Pending() != 0 || w.txns.Dialogs() != 0 || w.txns.SettledServer(k.server) != nil {
		t.Fatalf("want nothing held once lingering is over, have %d held, %d deadlines", w.Held(), w.txns.Pending())
	}
	d.msg(d.uac, ack)
	d.msg(d.uac, cancel)
	uac()
	if down := uas(); len(down) != 0 {
		t.Fatalf("after lingering: want an ACK and a CANCEL of no transaction to go nowhere, have %q", down)
	}
}

// With an unnamed onreply_route, which sees every reply with its
// transaction, a late one after the 2xx included, nothing is settled: the
// INVITE's transactions linger in the table as they were.
func TestOnReplyRouteSettlesNothing(t *testing.T) {
	t.Parallel()
	d := newCallDriverScript(t, callScript+"onreply_route {\n\tappend_hf(\"X-Seen: $rs\");\n}\n")
	defer d.close()
	w := d.w
	const callID = "onreply"
	inv := d.invite(callID)
	d.msg(d.uac, inv)
	br := d.lastBranch()
	d.msg(d.uas, d.reply(200, "OK", br, callID, 1, "INVITE"))
	k := inviteKeys(t, inv, br)
	if tx := w.txns.Server(k.server); tx == nil || tx.State != txn.Accepted || w.txns.Settled() != 0 {
		t.Fatalf("want the INVITE's transaction lingering in the table, none settled, have %d settled", w.txns.Settled())
	}
	w.Tick(time.Now().Add(time.Hour))
	if w.Held() != 0 {
		t.Fatalf("want nothing held once lingering is over, have %d", w.Held())
	}
}
