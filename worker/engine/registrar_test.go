package engine

import (
	"net"
	"net/netip"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/location"
	"github.com/sipvisor/sipvisor/script"
	"github.com/sipvisor/sipvisor/worker"
)

// groupWorker is a worker with group commit whose registrations live in an
// SQLite file; the test hands it messages and ends its turns, as
// worker.Run's loop does.
func groupWorker(t *testing.T, script string) (*Worker, location.Store, netip.AddrPort) {
	t.Helper()
	sock, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sock.Close() })
	st, err := location.Open(location.Spec{Kind: location.KindSQLite, Path: filepath.Join(t.TempDir(), "location.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	c, err := config.Load("t.cfg", []byte(script))
	if err != nil {
		t.Fatal(err)
	}
	w, err := NewWorker(Options{Script: c.Script, Sockets: []net.PacketConn{sock}, Store: st, GroupCommit: true})
	if err != nil {
		t.Fatal(err)
	}
	return w, st, sock.LocalAddr().(*net.UDPAddr).AddrPort()
}

func registerMsg(pa, from netip.AddrPort, user string) []byte {
	return crlf("REGISTER sip:" + pa.String() + ` SIP/2.0
Via: SIP/2.0/UDP ` + from.String() + `;branch=z9hG4bK-` + user + `
Max-Forwards: 70
From: <sip:` + user + "@" + pa.String() + `>;tag=t` + user + `
To: <sip:` + user + "@" + pa.String() + `>
Call-ID: c` + user + `@test
CSeq: 1 REGISTER
Contact: <sip:` + user + "@" + from.String() + `>
Expires: 600
Content-Length: 0

`)
}

// The REGISTERs of a turn are written together when it ends, and none is
// answered before its write is done.
func TestGroupCommitAnswersAfterTheWrite(t *testing.T) {
	w, st, pa := groupWorker(t, registrarScript)
	phone := newUA(t)
	for i := range 3 {
		w.HandleMessage(&worker.Message{From: phone.addr(), Data: registerMsg(pa, phone.addr(), "u"+strconv.Itoa(i))})
	}
	if held, _, _ := w.Batched(); !held {
		t.Fatal("after three REGISTERs: want them held for the turn's end")
	}
	if bs, err := st.List(); err != nil || len(bs) != 0 {
		t.Fatalf("before the turn ends: want nothing written, have %+v, %v", bs, err)
	}
	// Nothing written, so nothing may have been answered; the datagram
	// would be queued on the phone's socket by now.
	phone.quiet(0)
	w.EndTurn()
	if bs, err := st.List(); err != nil || len(bs) != 3 {
		t.Fatalf("after the turn: want 3 bindings, have %+v, %v", bs, err)
	}
	for range 3 {
		res, raw := phone.recvResponse(200)
		if len(res.GetHeaders("Contact")) != 1 {
			t.Fatalf("want the one binding listed, have:\n%s", raw)
		}
	}
	if held, _, _ := w.Batched(); held {
		t.Fatal("after the turn: want nothing held")
	}
}

// A store that fails the batch's write answers each REGISTER of the turn
// 503 with Retry-After, and none 200.
func TestGroupCommitStoreDown(t *testing.T) {
	w, st, pa := groupWorker(t, registrarScript)
	phone := newUA(t)
	for i := range 2 {
		w.HandleMessage(&worker.Message{From: phone.addr(), Data: registerMsg(pa, phone.addr(), "d"+strconv.Itoa(i))})
	}
	st.Close()
	w.EndTurn()
	for range 2 {
		res, raw := phone.recvResponse(503)
		if len(res.GetHeaders("Retry-After")) != 1 {
			t.Fatalf("want Retry-After, have:\n%s", raw)
		}
	}
	// Counted per request refused, as without group commit.
	if w.Stats.StoreErrors != 2 {
		t.Fatalf("store errors: want 2, have %d", w.Stats.StoreErrors)
	}
}

// lookup() sees a REGISTER held earlier in the same turn: it ends the turn
// first.
func TestGroupCommitLookupSeesTheTurn(t *testing.T) {
	w, _, pa := groupWorker(t, `route {
	if (is_method("REGISTER")) {
		save("location");
		exit;
	}
	if (lookup("location"))
		sl_send_reply(299, "Found");
	else
		sl_send_reply(404, "Not Found");
}
`)
	phone := newUA(t)
	w.HandleMessage(&worker.Message{From: phone.addr(), Data: registerMsg(pa, phone.addr(), "bob")})
	opt := crlf("OPTIONS sip:bob@" + pa.String() + ` SIP/2.0
Via: SIP/2.0/UDP ` + phone.addr().String() + `;branch=z9hG4bK-opt
Max-Forwards: 70
From: <sip:alice@` + pa.String() + `>;tag=a
To: <sip:bob@` + pa.String() + `>
Call-ID: opt@test
CSeq: 1 OPTIONS
Content-Length: 0

`)
	w.HandleMessage(&worker.Message{From: phone.addr(), Data: opt})
	phone.recvResponse(200)
	phone.recvResponse(299)
}

// commitTimes: a batch is due when full or when its first REGISTER has
// waited batchWait, and done when the loop is idle once commitGap has
// passed since the last commit; a REGISTER after a quiet gap is written
// at once.
func TestCommitTimes(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	for _, tc := range []struct {
		name        string
		n           int
		since, last time.Time
		due, idle   time.Time
	}{
		{"after a quiet gap: at once", 1, ms(100), ms(0), ms(100).Add(batchWait), ms(0).Add(commitGap)},
		{"never committed: at once", 1, ms(100), time.Time{}, ms(100).Add(batchWait), time.Time{}.Add(commitGap)},
		{"soon after a commit: the gap's end", 1, ms(3), ms(0), ms(3).Add(batchWait), ms(0).Add(commitGap)},
		{"two held, a commit just before the first", 2, ms(5), ms(4), ms(5).Add(batchWait), ms(4).Add(commitGap)},
		{"full: now", maxBatch, ms(5), ms(4), ms(5), ms(5)},
	} {
		due, idle := commitTimes(tc.n, tc.since, tc.last)
		if !due.Equal(tc.due) || !idle.Equal(tc.idle) {
			t.Errorf("%s: want due %v idle %v, have %v %v", tc.name, tc.due.Sub(t0), tc.idle.Sub(t0), due.Sub(t0), idle.Sub(t0))
		}
		if idle.After(due) {
			t.Errorf("%s: idle %v after due %v", tc.name, idle, due)
		}
	}
}

// An AOR is user@domain with the port dropped, as Kamailio's usrloc files
// it; aor_keep_port keeps it.
func TestAORPort(t *testing.T) {
	t.Parallel()
	for _, keep := range []bool{false, true} {
		w, err := NewWorker(Options{Script: &script.Script{}, Store: location.NewMemory(), AORKeepPort: keep,
			Listen: []config.Socket{{Proto: "udp", Host: "127.0.0.1", Port: 5070}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range []struct {
			uri        string
			drop, kept string
		}{
			{"sip:carol@127.0.0.1:5070", "sip:carol@127.0.0.1", "sip:carol@127.0.0.1:5070"},
			{"sip:carol@127.0.0.1", "sip:carol@127.0.0.1", "sip:carol@127.0.0.1"},
			{"sip:carol@example.com:5080", "sip:carol@example.com", "sip:carol@example.com:5080"},
			{"sip:carol@example.com:5060", "sip:carol@example.com", "sip:carol@example.com"},
			{"sip:carol@[2001:db8::1]:5080", "sip:carol@[2001:db8::1]", "sip:carol@[2001:db8::1]:5080"},
		} {
			var u sip.Uri
			if err := sip.ParseUri(c.uri, &u); err != nil {
				t.Fatal(err)
			}
			want := c.drop
			if keep {
				want = c.kept
			}
			if have := w.aorOf(&u); have != want {
				t.Errorf("keep %v: aorOf(%s): want %s, have %s", keep, c.uri, want, have)
			}
			// What the supervisor moves a store written with ports to.
			if have := location.DropPort(location.Key(c.kept)); !keep && have != want {
				t.Errorf("DropPort of the kept form %s: want %s, have %s", c.kept, want, have)
			}
		}
	}
}
