package location

import (
	"reflect"
	"testing"
	"time"
)

func TestKey(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"sip:alice@example.com", "sip:alice@example.com"},
		{"sip:Alice@EXAMPLE.com", "sip:Alice@example.com"},
		{"<sip:alice@example.com;transport=udp>", "sip:alice@example.com"},
		{"sip:alice@127.0.0.1:5060", "sip:alice@127.0.0.1"},
		{"sip:alice@127.0.0.1:5070", "sip:alice@127.0.0.1:5070"},
		{"sip:alice:secret@host", "sip:alice@host"},
		{"SIPS:bob@host", "sips:bob@host"},
		{"alice@host", "sip:alice@host"},
		{"sip:host.example", "sip:host.example"},
	} {
		if have := Key(c.in); have != c.want {
			t.Errorf("Key(%q): want %v, have %v", c.in, c.want, have)
		}
	}
}

// stores returns each implementation over a clock the test moves; the
// remote one goes through the real encoding and Serve.
func stores(now *time.Time) map[string]Store {
	mem := NewMemory()
	mem.Now = func() time.Time { return *now }
	backing := NewMemory()
	backing.Now = mem.Now
	remote := NewRemote(func(req []byte) ([]byte, error) { return Serve(backing, req), nil })
	return map[string]Store{"memory": mem, "remote": remote}
}

func contacts(bs []Binding) []string {
	out := []string{}
	for _, b := range bs {
		out = append(out, b.Contact)
	}
	return out
}

func TestStore(t *testing.T) {
	t0 := time.Unix(1_700_000_000, 0)
	now := t0
	for name, s := range stores(&now) {
		t.Run(name, func(t *testing.T) {
			now = t0
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
			if n := len(s.List()); n != 3 {
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
			if n := s.Expire(now); n != 1 {
				t.Fatalf("expire: want %v, have %v", 1, n)
			}

			// Contact: * removes every binding of the AOR.
			must(s.Remove(aor, ""))
			if got := s.List(); len(got) != 0 {
				t.Fatalf("after remove all: want none, have %v", contacts(got))
			}
			if err := s.Save("", Binding{Contact: "x", Expires: now.Add(time.Hour)}); err == nil {
				t.Fatalf("save without aor: want an error, have nil")
			}
		})
	}
}

func TestServeBadInput(t *testing.T) {
	mem := NewMemory()
	for _, req := range [][]byte{nil, []byte("x"), []byte("L{"), []byte(`L{"op":"nope"}`), []byte(`L{"op":"save"}`)} {
		out := Serve(mem, req)
		r := NewRemote(func([]byte) ([]byte, error) { return out, nil })
		if _, err := r.Lookup("a"); err == nil {
			t.Errorf("request %q: want an error answer, have %s", req, out)
		}
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
	t0 := time.Unix(1_700_000_000, 0)
	now := t0
	for name, s := range stores(&now) {
		t.Run(name, func(t *testing.T) {
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
