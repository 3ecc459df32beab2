package location

import (
	"math/rand/v2"
	"path/filepath"
	"reflect"
	"strconv"
	"testing"
	"time"
	"unsafe"

	"github.com/sipvisor/sipvisor/location/redistest"
)

func TestKey(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"sip:alice@example.com", "sip:alice@example.com"},
		{"sip:Alice@EXAMPLE.com", "sip:Alice@example.com"},
		{"<sip:alice@example.com;transport=udp>", "sip:alice@example.com"},
		{"sip:alice@127.0.0.1:5060", "sip:alice@127.0.0.1"},
		{"sip:alice@127.0.0.1:5070", "sip:alice@127.0.0.1:5070"},
		{"sip:alice:secret@host", "sip:alice@host"},
		{"SIPS:bob@host", "sip:bob@host"},
		{"sips:bob@host:5061", "sip:bob@host"},
		{"sip:%61lice@host", "sip:alice@host"},
		{"sip:alice%zz@host", "sip:alice%zz@host"},
		{"<sip:alice@[2001:DB8::1]:5060>", "sip:alice@[2001:db8::1]"},
		{"\"Alice\" <sip:alice@Example.COM>;tag=1", "sip:alice@example.com"},
		{"alice@host", "sip:alice@host"},
		{"sip:host.example", "sip:host.example"},
	} {
		if have := Key(c.in); have != c.want {
			t.Errorf("Key(%q): want %v, have %v", c.in, c.want, have)
		}
	}
}

func TestDropPort(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ in, want string }{
		{"sip:carol@127.0.0.1:5070", "sip:carol@127.0.0.1"},
		{"sip:carol@127.0.0.1", "sip:carol@127.0.0.1"},
		{"sip:carol@[::1]:5070", "sip:carol@[::1]"},
		{"sip:carol@[2001:db8::1]", "sip:carol@[2001:db8::1]"},
		{"sip:example.com:5070", "sip:example.com"},
		{"sip:a:b@example.com:7", "sip:a:b@example.com"},
	} {
		if have := DropPort(c.in); have != c.want {
			t.Errorf("DropPort(%q): want %v, have %v", c.in, c.want, have)
		}
	}
}

// stores returns a constructor for each implementation over a clock the
// test moves; the remote one goes through the real encoding and Serve, the
// Redis one runs its own redis-server (skipped when none is installed).
func stores(now *time.Time) map[string]func(t *testing.T) Store {
	clock := func() time.Time { return *now }
	return map[string]func(t *testing.T) Store{
		"memory": func(*testing.T) Store {
			mem := NewMemory()
			mem.Now = clock
			return mem
		},
		"remote": func(*testing.T) Store {
			backing := NewMemory()
			backing.Now = clock
			return NewRemote(func(req []byte) ([]byte, error) { return Serve(backing, req), nil })
		},
		"sqlite": func(t *testing.T) Store {
			s := openPatientSQLite(t, filepath.Join(t.TempDir(), "location.db"))
			s.Now = clock
			t.Cleanup(func() { s.Close() })
			return s
		},
		"redis": func(t *testing.T) Store {
			s := openPatientRedis(t, redistest.Start(t))
			s.Now = clock
			return s
		},
	}
}

// patientURL is srv's URL with the client's timeouts far above what a
// loaded test machine makes a call take: the tests are about what the
// store answers, not how fast.
func patientURL(srv *redistest.Server) string {
	return srv.URL() + "?dial_timeout=10s&read_timeout=10s&write_timeout=10s"
}

// openPatientSQLite opens the SQLite store at path with a patient bound on
// its statements, for the same reason as patientURL.
func openPatientSQLite(t testing.TB, path string) *SQLite {
	t.Helper()
	s, err := OpenSQLite(path)
	if err != nil {
		t.Fatal(err)
	}
	s.timeout = 10 * time.Second
	return s
}

// openPatientRedis opens a Redis store on srv with patient timeouts.
func openPatientRedis(t *testing.T, srv *redistest.Server) *Redis {
	t.Helper()
	s, err := OpenRedis(patientURL(srv))
	if err != nil {
		t.Fatal(err)
	}
	s.timeout = 10 * time.Second
	t.Cleanup(func() { s.Close() })
	return s
}

func mustList(t *testing.T, s Store) []Binding {
	t.Helper()
	bs, err := s.List()
	if err != nil {
		t.Fatal(err)
	}
	return bs
}

func contacts(bs []Binding) []string {
	out := []string{}
	for _, b := range bs {
		out = append(out, b.Contact)
	}
	return out
}

func TestStore(t *testing.T) {
	t.Parallel()
	// Real time: Redis lapses keys by its own clock.
	t0 := time.Now().Truncate(time.Millisecond)
	now := t0
	for name, open := range stores(&now) {
		t.Run(name, func(t *testing.T) {
			now = t0
			s := open(t)
			const aor = "sip:alice@example.com"
			must := func(err error) {
				t.Helper()
				if err != nil {
					t.Fatal(err)
				}
			}
			must(s.Save(aor, Binding{Contact: "sip:alice@10.0.0.1:5062", Expires: now.Add(60 * time.Second)}))
			must(s.Save(aor, Binding{Contact: "sip:alice@10.0.0.2:5062", Expires: now.Add(120 * time.Second)}))
			must(s.Save("sip:bob@example.com", Binding{Contact: "sip:bob@10.0.0.3", Expires: now.Add(30 * time.Second)}))
			// A refresh replaces, it does not add.
			must(s.Save(aor, Binding{Contact: "sip:alice@10.0.0.1:5062", Expires: now.Add(90 * time.Second), CSeq: 2}))

			got, err := s.Lookup(aor)
			must(err)
			if want := []string{"sip:alice@10.0.0.2:5062", "sip:alice@10.0.0.1:5062"}; !reflect.DeepEqual(contacts(got), want) {
				t.Fatalf("lookup: want %v, have %v", want, contacts(got))
			}
			if got[1].CSeq != 2 || got[1].AOR != aor {
				t.Fatalf("refreshed binding: want cseq 2 aor %s, have %+v", aor, got[1])
			}
			if n := len(mustList(t, s)); n != 3 {
				t.Fatalf("list: want %v, have %v", 3, n)
			}

			// Expires: 0 removes that contact only.
			must(s.Save(aor, Binding{Contact: "sip:alice@10.0.0.2:5062", Expires: now}))
			got, _ = s.Lookup(aor)
			if want := []string{"sip:alice@10.0.0.1:5062"}; !reflect.DeepEqual(contacts(got), want) {
				t.Fatalf("after expires 0: want %v, have %v", want, contacts(got))
			}

			// Lapsed bindings are hidden at once and dropped by Expire.
			now = t0.Add(45 * time.Second)
			if got, _ := s.Lookup("sip:bob@example.com"); len(got) != 0 {
				t.Fatalf("lapsed lookup: want none, have %v", contacts(got))
			}
			// Redis lapses bindings by their TTLs, not by Expire.
			if n, err := s.Expire(now); err != nil || n != 1 && name != "redis" {
				t.Fatalf("expire: want %v, have %v, %v", 1, n, err)
			}
			if got := mustList(t, s); len(got) != 1 {
				t.Fatalf("after expire: want one binding, have %v", contacts(got))
			}

			// Contact: * removes every binding of the AOR.
			must(s.Remove(aor, ""))
			if got := mustList(t, s); len(got) != 0 {
				t.Fatalf("after remove all: want none, have %v", contacts(got))
			}
			if err := s.Save("", Binding{Contact: "x", Expires: now.Add(time.Hour)}); err == nil {
				t.Fatalf("save without aor: want an error, have nil")
			}
		})
	}
}

func TestServeBadInput(t *testing.T) {
	t.Parallel()
	mem := NewMemory()
	good := (&request{Op: opSave, AOR: "sip:a@h", Binding: &Binding{Contact: "sip:a@10.0.0.1"}}).append(nil)
	for _, req := range [][]byte{
		nil, []byte("x"), []byte("L"), []byte("L{"), []byte(`L{"op":"nope"}`),
		[]byte("Ls"),                 // truncated after the operation
		[]byte("Lq\x00\x00\x00\x00"), // unknown operation
		[]byte("Ls\x00\x00\x00\x00"), // save without a binding
		[]byte("Ll\x7f"),             // a string longer than what is left
		[]byte("Ll\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01"), // an overlong length
		[]byte("Ll\x00\x00\x02\x00"),                             // a binding flag of 2
		good[:len(good)-1],                                       // truncated in the binding
		append(append([]byte{}, good...), 0),                     // a byte after the end
	} {
		out := Serve(mem, req)
		r := NewRemote(func([]byte) ([]byte, error) { return out, nil })
		if _, err := r.Lookup("a"); err == nil {
			t.Errorf("request %q: want an error answer, have %q", req, out)
		}
	}
	if got, _ := mem.List(); len(got) != 0 {
		t.Fatalf("bad requests stored %v", got)
	}
}

// Every field of a binding crosses the wire as it was, the zero time too,
// and answers that are cut short or claim more bindings than they hold are
// refused rather than read past their end.
func TestWireRoundTrip(t *testing.T) {
	t.Parallel()
	full := Binding{AOR: "sip:alice@example.com", Contact: "sip:alice@[2001:db8::1]:5062;transport=tcp",
		Expires: time.Unix(1_700_000_000, 123456789), CallID: "a84b4c76e66710@pc33", CSeq: 1<<32 - 1,
		Received: "10.0.0.1:5062", Proto: "tcp", UserAgent: "Linphone/5.2.0 (belle-sip) ünïcode",
		Instance: "<urn:uuid:00000000-0000-1000-8000-000a95a0e128>", RegID: "1", Path: "<sip:ft@edge.example.com;lr;ob>"}
	for _, q := range []request{
		{Op: opRegister, AOR: full.AOR, Binding: &full},
		{Op: opSave, AOR: "a", Binding: &Binding{}},
		{Op: opRemove, AOR: "a", Contact: "c"},
		{Op: opExpire, Now: -5},
	} {
		have, err := parseRequest(q.append(nil)[1:])
		if err != nil {
			t.Errorf("request %+v: %v", q, err)
			continue
		}
		if (have.Binding == nil) != (q.Binding == nil) || have.Binding != nil && !sameBinding(*have.Binding, *q.Binding) {
			t.Errorf("request %+v: want binding %+v, have %+v", q, q.Binding, have.Binding)
		}
		have.Binding, q.Binding = nil, nil
		if have != q {
			t.Errorf("request: want %+v, have %+v", q, have)
		}
	}
	resp := response{Bindings: []Binding{full, {}}, N: 7, Err: "e"}
	b := resp.append(nil)
	have, err := parseResponse(b)
	if err != nil || have.N != 7 || have.Err != "e" || len(have.Bindings) != 2 ||
		!sameBinding(have.Bindings[0], full) || !sameBinding(have.Bindings[1], Binding{}) {
		t.Fatalf("response: want %+v, have %+v, %v", resp, have, err)
	}
	for i := 0; i < len(b); i++ {
		if _, err := parseResponse(b[:i]); err == nil {
			t.Errorf("response cut at %d of %d bytes: want an error", i, len(b))
		}
	}
	if _, err := parseResponse([]byte{0, 0, 0xff, 0xff, 0x03}); err == nil {
		t.Errorf("a response claiming 65,535 bindings in no bytes: want an error")
	}
}

func sameBinding(a, b Binding) bool {
	if !a.Expires.Equal(b.Expires) || a.Expires.IsZero() != b.Expires.IsZero() {
		return false
	}
	a.Expires, b.Expires = time.Time{}, time.Time{}
	return a == b
}

// Random bytes after the tag, most of them with a known operation, never
// panic the server side.
func TestServeRandomInput(t *testing.T) {
	t.Parallel()
	mem := NewMemory()
	r := rand.New(rand.NewPCG(7, 8))
	for i := 0; i < 20000; i++ {
		b := make([]byte, 1+r.IntN(40))
		for j := range b {
			b[j] = byte(r.IntN(256))
		}
		b[0] = RequestTag
		if i%2 == 0 && len(b) > 1 {
			b[1] = "srlxea"[r.IntN(6)]
		}
		Serve(mem, b)
	}
}

func BenchmarkRemoteLookup(b *testing.B) {
	mem := NewMemory()
	mem.Save("sip:alice@example.com", Binding{Contact: "sip:alice@10.0.0.1:5062", Expires: time.Now().Add(time.Hour), CallID: "abc@host", CSeq: 1, Received: "10.0.0.1:5062", Proto: "udp"})
	r := NewRemote(func(req []byte) ([]byte, error) { return Serve(mem, req), nil })
	b.ReportAllocs()
	for b.Loop() {
		if bs, err := r.Lookup("sip:alice@example.com"); err != nil || len(bs) != 1 {
			b.Fatal(err, len(bs))
		}
	}
}

// Register saves and answers with the AOR's live bindings in one step, in
// memory and across the wire alike.
func TestRegisterReturnsBindings(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for name, open := range stores(&now) {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			const aor = "sip:bob@example.com"
			if _, err := s.Register(aor, Binding{Contact: "sip:bob@10.0.0.1", Expires: now.Add(time.Minute)}); err != nil {
				t.Fatal(err)
			}
			bs, err := s.Register(aor, Binding{Contact: "sip:bob@10.0.0.2", Expires: now.Add(2 * time.Minute)})
			if err != nil {
				t.Fatal(err)
			}
			if got := contacts(bs); len(got) != 2 {
				t.Fatalf("want both contacts, have %v", got)
			}
			// Expires now: the contact goes, and the answer says so.
			bs, err = s.Register(aor, Binding{Contact: "sip:bob@10.0.0.1", Expires: now})
			if err != nil {
				t.Fatal(err)
			}
			if got := contacts(bs); len(got) != 1 || got[0] != "sip:bob@10.0.0.2" {
				t.Fatalf("want only sip:bob@10.0.0.2 left, have %v", got)
			}
		})
	}
}

// BenchmarkRemoteRegister is a REGISTER's call to the store across the
// control channel, less the channel: encode, serve, decode, with the
// binding's fields as a phone fills them.
func BenchmarkRemoteRegister(b *testing.B) {
	mem := NewMemory()
	r := NewRemote(func(req []byte) ([]byte, error) { return Serve(mem, req), nil })
	bd := Binding{Contact: "sip:alice@10.0.0.1:5062;transport=udp", Expires: time.Now().Add(time.Hour),
		CallID: "a84b4c76e66710@pc33.example.com", CSeq: 1, Received: "10.0.0.1:5062", Proto: "udp",
		UserAgent: "Linphone/5.2.0 (belle-sip/5.2.0)"}
	b.ReportAllocs()
	for b.Loop() {
		if bs, err := r.Register("sip:alice@example.com", bd); err != nil || len(bs) != 1 {
			b.Fatal(err, len(bs))
		}
	}
}

// FuzzServe: whatever follows the tag, Serve answers with something a
// Remote can read, and never panics.
func FuzzServe(f *testing.F) {
	b := Binding{AOR: "sip:a@h", Contact: "sip:a@10.0.0.1", Expires: time.Unix(1_700_000_000, 0), CSeq: 3}
	for _, q := range []request{
		{Op: opRegister, AOR: "sip:a@h", Binding: &b},
		{Op: opLookup, AOR: "sip:a@h"},
		{Op: opRemove, AOR: "sip:a@h"},
		{Op: opExpire, Now: 1},
		{Op: opList},
	} {
		f.Add(q.append(nil)[1:])
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		mem := NewMemory()
		out := Serve(mem, append([]byte{RequestTag}, body...))
		if _, err := parseResponse(out); err != nil {
			t.Fatalf("answer %q does not parse: %v", out, err)
		}
	})
}

// EachCallID goes through the Call-IDs of the live bindings, lapsed ones
// left out, in every store: through its own walk or through List.
func TestEachCallID(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for name, open := range stores(&now) {
		t.Run(name, func(t *testing.T) {
			s := open(t)
			for i, c := range []struct {
				aor, callID string
				life        time.Duration
			}{
				{"sip:a@example.com", "ca", time.Minute},
				{"sip:b@example.com", "cb", time.Hour},
				{"sip:b@example.com", "cb2", time.Hour},
				{"sip:c@example.com", "cc", time.Second},
			} {
				if err := s.Save(c.aor, Binding{Contact: "sip:x@10.0.0." + strconv.Itoa(i+1), Expires: now.Add(c.life), CallID: c.callID}); err != nil {
					t.Fatal(err)
				}
			}
			now = now.Add(2 * time.Second) // cc lapses
			seen := map[string]bool{}
			n, err := EachCallID(s, func(id []byte) { seen[string(id)] = true })
			if err != nil {
				t.Fatal(err)
			}
			if n != 3 || len(seen) != 3 || !seen["ca"] || !seen["cb"] || !seen["cb2"] {
				t.Fatalf("want ca, cb and cb2 (3), have %v (%d)", seen, n)
			}
		})
	}
}

// A refresh renews a binding that changes in nothing but its expiry and
// CSeq, in place and without allocating, lists the AOR's bindings as
// Register does, and leaves any other change to Save; the binding lapses
// at its new time. Not parallel: it counts allocations.
func TestMemoryRefresh(t *testing.T) {
	m := NewMemory()
	now := time.Unix(1_000_000, 0)
	m.Now = func() time.Time { return now }
	const aor = "sip:alice@example.com"
	a := Binding{Contact: "sip:alice@10.0.0.1:5060", Expires: now.Add(time.Minute), CallID: "c1", CSeq: 1,
		Received: "10.0.0.1:5060", Proto: "udp", UserAgent: "phone/1"}
	b := a
	b.Contact, b.Expires = "sip:alice@10.0.0.2:5060", now.Add(2*time.Minute)
	for _, x := range []Binding{a, b} {
		if err := m.Save(aor, x); err != nil {
			t.Fatal(err)
		}
	}
	r, ok := RefresherOf(m)
	if !ok {
		t.Fatal("Memory is not a Refresher")
	}
	fresh := a
	fresh.Expires, fresh.CSeq = now.Add(time.Hour), 2
	out, ok, err := r.Refresh(aor, &fresh, nil)
	if err != nil || !ok || len(out) != 2 || out[0].Contact != a.Contact || out[0].CSeq != 2 || !out[0].Expires.Equal(fresh.Expires) ||
		out[1].Contact != b.Contact {
		t.Fatalf("refresh: want a then b, a with CSeq 2, have %+v, %v, %v", out, ok, err)
	}
	want, _ := m.Lookup(aor)
	if !reflect.DeepEqual(out, want) {
		t.Fatalf("refresh lists\n%+v\nlookup\n%+v", out, want)
	}
	for name, change := range map[string]func(*Binding){
		"contact":    func(x *Binding) { x.Contact = "sip:alice@10.0.0.3" },
		"call-id":    func(x *Binding) { x.CallID = "c2" },
		"received":   func(x *Binding) { x.Received = "10.0.0.9:5060" },
		"proto":      func(x *Binding) { x.Proto = "tcp" },
		"user agent": func(x *Binding) { x.UserAgent = "phone/2" },
		"instance":   func(x *Binding) { x.Instance, x.RegID = "<urn:uuid:1>", "1" },
		"path":       func(x *Binding) { x.Path = "<sip:edge;lr>" },
		"removal":    func(x *Binding) { x.Expires = now },
		"aor":        nil,
	} {
		x := fresh
		x.CSeq = 9
		k := aor
		if change == nil {
			k = "sip:bob@example.com"
		} else {
			change(&x)
		}
		dst := []Binding{{Contact: "kept"}}
		if out, ok, err := r.Refresh(k, &x, dst); ok || err != nil || len(out) != 1 {
			t.Errorf("%s changed: want no refresh and dst as it was, have %v, %v, %+v", name, ok, err, out)
		}
	}
	if bs, _ := m.Lookup(aor); bs[0].CSeq != 2 {
		t.Fatalf("a refused refresh changed the binding: %+v", bs)
	}
	dst := make([]Binding, 0, 4)
	if n := testing.AllocsPerRun(100, func() {
		fresh.CSeq++
		if _, ok, _ := r.Refresh(aor, &fresh, dst); !ok {
			t.Fatal("refresh refused")
		}
	}); n != 0 && !raceEnabled {
		t.Errorf("allocations per refresh: want 0, have %.1f", n)
	}
	// a lapses at its refreshed time, not at the first.
	now = now.Add(30 * time.Minute)
	if n, _ := m.Expire(now); n != 1 {
		t.Fatalf("expired at 30 min: want b only, have %d", n)
	}
	if bs, _ := m.Lookup(aor); len(bs) != 1 || bs[0].Contact != a.Contact {
		t.Fatalf("after 30 min: want a, have %+v", bs)
	}
	now = now.Add(31 * time.Minute)
	if n, _ := m.Expire(now); n != 1 {
		t.Fatalf("expired at 61 min: want a, have %d", n)
	}
}

// A nonce's count is kept under a key of the store's own, not the
// caller's string, which may be reused.
func TestUseNonceKeepsNoReference(t *testing.T) {
	t.Parallel()
	m := NewMemory()
	buf := []byte("nonce-1")
	view := unsafe.String(unsafe.SliceData(buf), len(buf))
	if ok, _ := m.UseNonce(view, 1, time.Minute); !ok {
		t.Fatal("first use refused")
	}
	copy(buf, "nonce-2")
	if ok, _ := m.UseNonce("nonce-1", 1, time.Minute); ok {
		t.Fatal("replay of nonce-1 taken: its key changed with the caller's buffer")
	}
	if ok, _ := m.UseNonce("nonce-1", 2, time.Minute); !ok {
		t.Fatal("next count of nonce-1 refused")
	}
	if ok, _ := m.UseNonce("nonce-2", 1, time.Minute); !ok {
		t.Fatal("nonce-2 refused: never used")
	}
}
