package location

import (
	"errors"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// cpuTime is this process's user and system CPU so far: on a shared
// machine the benchmarks' wall time says more of the neighbours' load.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// applyCases runs the same REGISTERs through Apply on st and checks what
// each 200 OK would list and what is stored after.
func applyCases(t *testing.T, st Store) {
	t.Helper()
	now := time.Now()
	b := func(contact string, in time.Duration) Binding {
		return Binding{Contact: contact, Expires: now.Add(in), CallID: "c-" + contact, CSeq: 1, Received: "10.0.0.1:5060", Proto: "udp"}
	}
	const alice, bob, carol = "sip:alice@example.com", "sip:bob@example.com", "sip:carol@example.com"
	if _, err := st.Register(carol, b("sip:carol@10.0.0.3", time.Hour)); err != nil {
		t.Fatal(err)
	}
	out, err := Apply(st, []Change{
		{AOR: alice, Bindings: []Binding{b("sip:alice@10.0.0.1", time.Hour), b("sip:alice@10.0.0.2", 2*time.Hour)}},
		{AOR: bob, Bindings: []Binding{b("sip:bob@10.0.0.9", time.Hour)}},
		// The same AOR again in the batch sees the change before it:
		// a refresh of one contact and the removal of the other.
		{AOR: alice, Bindings: []Binding{b("sip:alice@10.0.0.1", 3*time.Hour), b("sip:alice@10.0.0.2", 0)}},
		{AOR: carol, RemoveAll: true},
		{AOR: bob},
	})
	if err != nil {
		t.Fatal(err)
	}
	contacts := func(bs []Binding) []string {
		var cs []string
		for _, x := range bs {
			cs = append(cs, x.Contact)
		}
		return cs
	}
	want := [][]string{
		{"sip:alice@10.0.0.2", "sip:alice@10.0.0.1"},
		{"sip:bob@10.0.0.9"},
		{"sip:alice@10.0.0.1"},
		nil,
		{"sip:bob@10.0.0.9"},
	}
	if len(out) != len(want) {
		t.Fatalf("results: want %d, have %d", len(want), len(out))
	}
	for i := range want {
		if have := contacts(out[i]); len(have) != len(want[i]) || len(have) > 0 && (have[0] != want[i][0] || have[len(have)-1] != want[i][len(want[i])-1]) {
			t.Errorf("change %d lists: want %v, have %v", i, want[i], have)
		}
	}
	if bs, _ := st.Lookup(alice); len(bs) != 1 || !bs[0].Expires.Equal(now.Add(3*time.Hour)) {
		t.Errorf("alice after the batch: want one binding refreshed to 3 h, have %+v", bs)
	}
	if bs, _ := st.Lookup(carol); len(bs) != 0 {
		t.Errorf("carol after Contact: *: want none, have %+v", bs)
	}
}

func TestApplySQLite(t *testing.T) {
	s, err := Open(Spec{Kind: KindSQLite, Path: filepath.Join(t.TempDir(), "location.db")})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, ok := s.(Batcher); !ok {
		t.Fatalf("an opened SQLite store: want a Batcher, have %T", s)
	}
	applyCases(t, s)
}

func TestApplyOneByOne(t *testing.T) {
	applyCases(t, NewMemory())
}

// A batch with a change that cannot be applied applies none of it: no
// REGISTER of the batch is answered 200.
func TestApplySQLiteAllOrNone(t *testing.T) {
	s, err := OpenSQLite(filepath.Join(t.TempDir(), "location.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	exp := time.Now().Add(time.Hour)
	_, err = s.Apply([]Change{
		{AOR: "sip:alice@example.com", Bindings: []Binding{{Contact: "sip:alice@10.0.0.1", Expires: exp}}},
		{AOR: "", Bindings: []Binding{{Contact: "sip:x@10.0.0.1", Expires: exp}}},
	})
	if !errors.Is(err, ErrEmptyAOR) {
		t.Fatalf("want ErrEmptyAOR, have %v", err)
	}
	if bs, _ := s.List(); len(bs) != 0 {
		t.Fatalf("after the failed batch: want nothing stored, have %+v", bs)
	}
}

// BenchmarkSQLiteApply is a loop turn's REGISTERs in one transaction, each
// a new AOR; the time and allocations are per REGISTER.
func BenchmarkSQLiteApply(b *testing.B) {
	for _, n := range []int{1, 4, 16} {
		b.Run(strconv.Itoa(n), func(b *testing.B) {
			s, err := OpenSQLite(filepath.Join(b.TempDir(), "location.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			bd := Binding{Contact: "sip:alice@10.0.0.1:5062;transport=udp", Expires: time.Now().Add(time.Hour),
				CallID: "a84b4c76e66710@pc33.example.com", CSeq: 1, Received: "10.0.0.1:5062", Proto: "udp",
				UserAgent: "Linphone/5.2.0 (belle-sip/5.2.0)"}
			changes := make([]Change, n)
			b.ReportAllocs()
			i := 0
			cpu0 := cpuTime()
			for b.Loop() {
				for k := range changes {
					i++
					changes[k] = Change{AOR: "sip:user" + itoa(i%10000) + "@example.com", Bindings: []Binding{bd}}
				}
				if out, err := s.Apply(changes); err != nil || len(out) != n || len(out[0]) != 1 {
					b.Fatal(err, len(out))
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(i), "ns/register")
			b.ReportMetric(float64((cpuTime()-cpu0).Nanoseconds())/float64(i), "cpu-ns/register")
		})
	}
}
