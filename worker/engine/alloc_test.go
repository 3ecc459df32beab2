package engine

import (
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"
	"github.com/icholy/digest"

	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/location"
)

// What a worker may allocate for each kind of exchange, held by
// TestAllocs: the budget of a message path that works on the datagram's
// bytes (docs/DESIGN.md, "The message path"). Each is what the path
// reaches today, so that a change that allocates more fails here.
const (
	callAllocs = 4 // INVITE, 100, 180, 200, ACK, BYE, 200
	// A REGISTER with digest credentials refreshing its binding, and its
	// 200: the steady state of a registrar (regbytes.go). The first
	// REGISTER of a binding allocates what the store keeps.
	registerAllocs = 0
	refusedAllocs  = 0 // INVITE refused 403 by the script, its ACK
	// The same REGISTER into SQLite, the default store, held for group
	// commit: the strings of the binding it writes wait in the batch's
	// buffer (regbytes.go), and the two lists Apply returns are the
	// batch's, 2 allocations per 16 REGISTERs (AllocsPerRun rounds down).
	registerSQLiteAllocs = 0
	// A proxied call to a phone registered in SQLite: lookup() reads its
	// binding from the file, the binding's strings and their list.
	callSQLiteAllocs = 5

	// Bytes allocated for each. A call's transactions come from the
	// worker's free list (txpool.go); what is left is the INVITE's 200
	// kept to resend and lookup's AOR and answer.
	callBytes     = 640
	registerBytes = 0
	// The REGISTER's share of the batch's lists.
	registerSQLiteBytes = 224
	callSQLiteBytes     = 640
	refusedBytes        = 0
)

// bytesNoise is what the rest of the process (the runtime, another test's
// goroutine winding down) may allocate meanwhile, per run: a budget of 0
// bytes is held to less than this.
const bytesNoise = 32

// bytesPerRun is what f allocates per run, in bytes, averaged over runs.
func bytesPerRun(runs int, f func()) float64 {
	var a, b runtime.MemStats
	f()
	runtime.GC()
	runtime.ReadMemStats(&a)
	for range runs {
		f()
	}
	runtime.ReadMemStats(&b)
	return float64(b.TotalAlloc-a.TotalAlloc) / float64(runs)
}

// callMsgs are the six messages of one proxied call as the worker reads
// them: the INVITE, the callee's 180 and 200, the ACK, the BYE and its 200.
type callMsgs struct{ inv, ringing, ok, ack, bye, byeOK []byte }

// calls builds n calls ahead of time. Each call takes three branches of
// the worker's: the INVITE's, the ACK's (relayed statelessly) and the
// BYE's.
func (d *callDriver) calls(n int) []callMsgs {
	calls := make([]callMsgs, n)
	seq := d.w.branchSeq
	branch := func(n uint64) string { return d.w.branchPrefix + strconv.FormatUint(n, 36) }
	for i := range calls {
		callID := "handled-" + strconv.Itoa(i) + "-" + strconv.FormatUint(seq, 36)
		inv := branch(seq + 1)
		bye := branch(seq + 3)
		seq += 3
		calls[i] = callMsgs{
			inv:     d.invite(callID),
			ringing: d.reply(180, "Ringing", inv, callID, 1, "INVITE"),
			ok:      d.reply(200, "OK", inv, callID, 1, "INVITE"),
			ack:     crlf(inDialog("ACK", d.ruri, d.uac, "z9hG4bK-a"+callID, callID, 1, "bob-tag", []string{d.rr})),
			bye:     crlf(inDialog("BYE", d.ruri, d.uac, "z9hG4bK-"+callID, callID, 2, "bob-tag", []string{d.rr})),
			byeOK:   d.reply(200, "OK", bye, callID, 2, "BYE"),
		}
	}
	return calls
}

func (d *callDriver) call(c *callMsgs, later time.Time) {
	d.msg(d.uac, c.inv)
	d.msg(d.uas, c.ringing)
	d.msg(d.uas, c.ok)
	d.msg(d.uac, c.ack)
	d.msg(d.uac, c.bye)
	d.msg(d.uas, c.byeOK)
	d.w.Tick(later)
}

// registers builds n REGISTERs of alice's with digest credentials, each
// with the next nonce-count of one nonce, as a phone refreshing its
// registration sends them.
func (d *callDriver) registers(tb testing.TB, n int) [][]byte {
	_, secret, err := d.w.users()
	if err != nil {
		tb.Fatal(err)
	}
	nonce := newNonce(secret, time.Now())
	const ruri = "sip:example.com"
	out := make([][]byte, n)
	for i := range out {
		ch := &digest.Challenge{Realm: "example.com", Nonce: nonce, Algorithm: "MD5", QOP: []string{"auth"}}
		cr, err := digest.Digest(ch, digest.Options{Method: "REGISTER", URI: ruri, Username: "alice", Password: "alices",
			Count: i + 1, Cnonce: "c0ffee"})
		if err != nil {
			tb.Fatal(err)
		}
		r := testkit.Register("sip:alice@example.com", "sip:alice@"+d.uac.String(), d.uac.String(), "reg-"+nonce[:8], 3600)
		r.CSeq = i + 1
		r.Rport = true
		r.Headers = append(r.Headers, "Authorization: "+cr.String())
		out[i] = r.Bytes()
	}
	return out
}

// refused builds n INVITEs for another domain, which the script refuses
// with a 403, and the caller's ACK of each.
func (d *callDriver) refused(n int) (invites, acks [][]byte) {
	for i := range n {
		callID := "refused-" + strconv.Itoa(i)
		inv := testkit.Invite("sip:carol@elsewhere.example", d.uac.String(), callID)
		inv.Rport, inv.Branch = true, "z9hG4bK-"+callID
		ack := inv
		ack.Method, ack.ToTag, ack.Contact = "ACK", localTagFor(inv.Bytes()), ""
		invites = append(invites, inv.Bytes())
		acks = append(acks, ack.Bytes())
	}
	return invites, acks
}

// localTagFor is the To tag this server puts in its stateless replies to
// the request raw, for the ACK that ends them.
func localTagFor(raw []byte) string {
	m, err := sip.ParseMessage(raw)
	if err != nil {
		panic(err)
	}
	return localTag(m.(*sip.Request))
}

// TestAllocs holds the message path to its allocation budget: a whole
// proxied call, a REGISTER with digest authentication and a refused
// INVITE, each handled as the worker's loop hands them over.
// Not parallel: it counts the process's allocations.
func TestAllocs(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own account")
	}
	const runs = 200
	later := time.Now().Add(time.Hour)
	d := newCallDriver(t)
	defer d.close()

	calls := d.calls(2*runs + 2)
	i := 0
	call := func() {
		d.call(&calls[i], later)
		i++
	}
	have := testing.AllocsPerRun(runs, call)
	if b := bytesPerRun(runs, call); b > callBytes+bytesNoise {
		t.Errorf("bytes per proxied call: want at most %d, have %.0f", callBytes, b)
	} else {
		t.Logf("bytes per proxied call: %.0f (budget %d)", b, callBytes)
	}
	if d.w.Held() != 0 || d.w.Stats.Malformed != 0 || d.w.Stats.Requests != 3*uint64(i) {
		t.Fatalf("calls: want %d requests handled and nothing held, have %d held, %+v", 3*i, d.w.Held(), d.w.Stats)
	}
	t.Logf("allocations per proxied call: %.1f (budget %d)", have, callAllocs)
	if have > callAllocs {
		t.Errorf("allocations per proxied call: want at most %d, have %.1f", callAllocs, have)
	}

	regs := d.registers(t, 2*runs+2)
	i = 0
	before := d.w.Stats
	register := func() {
		d.msg(d.uac, regs[i])
		i++
	}
	have = testing.AllocsPerRun(runs, register)
	if b := bytesPerRun(runs, register); b > registerBytes+bytesNoise {
		t.Errorf("bytes per authenticated REGISTER: want at most %d, have %.1f", registerBytes, b)
	} else {
		t.Logf("bytes per authenticated REGISTER: %.0f (budget %d)", b, registerBytes)
	}
	if bs, err := d.store.Lookup("sip:alice@example.com"); err != nil || len(bs) != 1 || bs[0].CSeq != uint32(i) ||
		d.w.Stats.AuthFailures != before.AuthFailures || d.w.Stats.Replays != before.Replays {
		t.Fatalf("REGISTERs: want alice bound by CSeq %d, have %+v (%v), %+v", i, bs, err, d.w.Stats)
	}
	t.Logf("allocations per authenticated REGISTER: %.1f (budget %d)", have, registerAllocs)
	if have > registerAllocs {
		t.Errorf("allocations per authenticated REGISTER: want at most %d, have %.1f", registerAllocs, have)
	}

	invs, acks := d.refused(2*runs + 2)
	i = 0
	before = d.w.Stats
	refuse := func() {
		d.msg(d.uac, invs[i])
		d.msg(d.uac, acks[i])
		i++
	}
	have = testing.AllocsPerRun(runs, refuse)
	if b := bytesPerRun(runs, refuse); b > refusedBytes+bytesNoise {
		t.Errorf("bytes per refused INVITE: want at most %d, have %.1f", refusedBytes, b)
	} else {
		t.Logf("bytes per refused INVITE: %.0f (budget %d)", b, refusedBytes)
	}
	if got := d.w.Stats.StatelessAcks - before.StatelessAcks; got != uint64(i) || d.w.Held() != 0 {
		t.Fatalf("refusals: want %d ACKs of them, have %d (%+v)", i, got, d.w.Stats)
	}
	t.Logf("allocations per refused INVITE: %.1f (budget %d)", have, refusedAllocs)
	if have > refusedAllocs {
		t.Errorf("allocations per refused INVITE: want at most %d, have %.1f", refusedAllocs, have)
	}
}

// TestAllocsSQLite is TestAllocs's proxied call and authenticated
// REGISTER with an SQLite store, as a worker runs by default: the call's
// lookup reads the callee's binding from the file; the REGISTERs, 16 a
// turn with group commit, read the credentials, write the nonce-count,
// write the binding and list the bindings, each a statement.
// Not parallel: it counts the process's allocations.
func TestAllocsSQLite(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector allocates on its own account")
	}
	const runs = 400
	d := newCallDriver(t)
	defer d.close()
	st := d.useSQLite(t)

	bob, err := d.store.Lookup("sip:bob@example.com")
	if err != nil || len(bob) != 1 {
		t.Fatal(bob, err)
	}
	if _, err := st.Register("sip:bob@example.com", bob[0]); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Hour)
	calls := d.calls(2*runs + 2)
	i := 0
	call := func() {
		d.call(&calls[i], later)
		i++
	}
	have := testing.AllocsPerRun(runs, call)
	b := bytesPerRun(runs, call)
	if d.w.Held() != 0 || d.w.Stats.Malformed != 0 || d.w.Stats.StoreErrors != 0 || d.w.Stats.Requests != 3*uint64(i) {
		t.Fatalf("calls: want %d requests handled and nothing held, have %d held, %+v", 3*i, d.w.Held(), d.w.Stats)
	}
	t.Logf("allocations per proxied call, callee in SQLite: %.1f (budget %d), bytes %.0f (budget %d)",
		have, callSQLiteAllocs, b, callSQLiteBytes)
	if have > callSQLiteAllocs {
		t.Errorf("allocations per proxied call, callee in SQLite: want at most %d, have %.1f", callSQLiteAllocs, have)
	}
	if b > callSQLiteBytes+bytesNoise {
		t.Errorf("bytes per proxied call, callee in SQLite: want at most %d, have %.0f", callSQLiteBytes, b)
	}

	regs := d.registers(t, 2*runs+2)
	i = 0
	before := d.w.Stats
	register := func() {
		d.msg(d.uac, regs[i])
		i++
		if i%16 == 0 {
			d.w.EndTurn()
		}
	}
	have = testing.AllocsPerRun(runs, register)
	b = bytesPerRun(runs, register)
	d.w.EndTurn()
	if bs, err := st.Lookup("sip:alice@example.com"); err != nil || len(bs) != 1 || bs[0].CSeq != uint32(i) ||
		d.w.Stats.AuthFailures != before.AuthFailures || d.w.Stats.Replays != before.Replays || d.w.Stats.StoreErrors != 0 {
		t.Fatalf("REGISTERs: want alice bound by CSeq %d, have %+v (%v), %+v", i, bs, err, d.w.Stats)
	}
	t.Logf("allocations per authenticated REGISTER into SQLite: %.1f (budget %d), bytes %.0f (budget %d)",
		have, registerSQLiteAllocs, b, registerSQLiteBytes)
	if have > registerSQLiteAllocs {
		t.Errorf("allocations per authenticated REGISTER into SQLite: want at most %d, have %.1f", registerSQLiteAllocs, have)
	}
	if b > registerSQLiteBytes+bytesNoise {
		t.Errorf("bytes per authenticated REGISTER into SQLite: want at most %d, have %.0f", registerSQLiteBytes, b)
	}
}

// BenchmarkRegisterAuth measures a REGISTER with digest credentials
// through callScript (www_authorize, consume_credentials, save) into the
// memory store, and its 200.
func BenchmarkRegisterAuth(b *testing.B) {
	d := newCallDriver(b)
	defer d.close()
	regs := d.registers(b, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range regs {
		d.msg(d.uac, regs[i])
	}
}

// BenchmarkRefused measures an INVITE the script refuses with a 403 and
// the caller's ACK of it.
func BenchmarkRefused(b *testing.B) {
	d := newCallDriver(b)
	defer d.close()
	invs, acks := d.refused(b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range invs {
		d.msg(d.uac, invs[i])
		d.msg(d.uac, acks[i])
	}
}

// BenchmarkRegisterAuthSQLite is BenchmarkRegisterAuth into an SQLite
// store with group commit, 16 REGISTERs a turn, as a worker runs by
// default: the store's own work (the credentials read, the nonce-count
// and the binding written, the bindings read back) is most of it.
func BenchmarkRegisterAuthSQLite(b *testing.B) {
	d := newCallDriver(b)
	defer d.close()
	d.useSQLite(b)
	regs := d.registers(b, b.N)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range regs {
		d.msg(d.uac, regs[i])
		if i%16 == 15 {
			d.w.EndTurn()
		}
	}
	d.w.EndTurn()
	b.StopTimer()
	if d.w.Stats.StoreErrors != 0 || d.w.Stats.AuthFailures != 0 || d.w.Stats.Replays != 0 {
		b.Fatalf("stats: %+v", d.w.Stats)
	}
}

// BenchmarkCallHandledSQLite is BenchmarkCallHandled with the callee
// registered in an SQLite store, as a worker runs by default: lookup()
// reads the binding from the file for each INVITE.
func BenchmarkCallHandledSQLite(b *testing.B) {
	d := newCallDriver(b)
	defer d.close()
	st, err := location.Open(location.Spec{Kind: location.KindSQLite, Path: filepath.Join(b.TempDir(), "location.db")})
	if err != nil {
		b.Fatal(err)
	}
	defer st.Close()
	bs, err := d.store.Lookup("sip:bob@example.com")
	if err != nil || len(bs) != 1 {
		b.Fatal(bs, err)
	}
	if _, err := st.Register("sip:bob@example.com", bs[0]); err != nil {
		b.Fatal(err)
	}
	d.w.opt.Store = st
	calls := d.calls(b.N)
	later := time.Now().Add(time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range calls {
		d.call(&calls[i], later)
	}
	b.StopTimer()
	if d.w.Held() != 0 || d.w.Stats.Malformed != 0 || d.w.Stats.Requests != 3*uint64(b.N) || d.w.Stats.StoreErrors != 0 {
		b.Fatalf("calls: want %d requests handled and nothing held, have %d held, %+v", 3*b.N, d.w.Held(), d.w.Stats)
	}
}

// useSQLite gives d's worker a SQLite store of its own, with group commit
// as a worker runs by default, and alice's credentials in it.
func (d *callDriver) useSQLite(tb testing.TB) location.Store {
	tb.Helper()
	st, err := location.Open(location.Spec{Kind: location.KindSQLite, Path: filepath.Join(tb.TempDir(), "location.db")})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { st.Close() })
	users, err := location.UsersOf(st)
	if err != nil {
		tb.Fatal(err)
	}
	if err := users.PutUser(location.NewUser("alice", "example.com", "alices")); err != nil {
		tb.Fatal(err)
	}
	d.w.opt.Store, d.w.opt.GroupCommit = st, true
	return st
}
