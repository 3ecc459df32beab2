package location

import (
	"database/sql"
	"errors"
	"path/filepath"
	"testing"
	"time"
	"unsafe"

	"modernc.org/libc"
	sqlite3 "modernc.org/sqlite/lib"
)

// Two handles on one file stand for two worker processes: a password
// changed through one counts at the other's next GetUser, and a
// nonce-count used at one is a replay at the other.
func TestSQLiteUsersShared(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "location.db")
	a := openPatientSQLite(t, path)
	defer a.Close()
	b := openPatientSQLite(t, path)
	defer b.Close()
	for _, pw := range []string{"first", "second", "first"} {
		want := NewUser("alice", "example.com", pw)
		if err := a.PutUser(want); err != nil {
			t.Fatal(err)
		}
		for range 2 {
			if got, ok, err := b.GetUser("alice", "example.com"); err != nil || !ok || got != want {
				t.Fatalf("password %q: want %+v, have %+v %v %v", pw, want, got, ok, err)
			}
		}
	}
	if ok, err := a.RemoveUser("alice", "example.com"); !ok || err != nil {
		t.Fatalf("remove alice: %v %v", ok, err)
	}
	if _, ok, err := b.GetUser("alice", "example.com"); ok || err != nil {
		t.Fatalf("after removal: want no alice, have %v %v", ok, err)
	}
	for i, c := range []struct {
		s    *SQLite
		nc   uint32
		want bool
	}{{a, 1, true}, {b, 1, false}, {b, 2, true}, {a, 2, false}, {a, 3, true}, {b, 3, false}} {
		if ok, err := c.s.UseNonce("n1", c.nc, time.Minute); err != nil || ok != c.want {
			t.Errorf("use %d (nc %d): want %v, have %v %v", i, c.nc, c.want, ok, err)
		}
	}
}

// GetUser, UseNonce and Apply keep no reference to what they are handed,
// which may alias a buffer the caller reuses.
func TestSQLiteKeepsNoReference(t *testing.T) {
	t.Parallel()
	s := openPatientSQLite(t, filepath.Join(t.TempDir(), "location.db"))
	defer s.Close()
	alice := NewUser("alice", "example.com", "secret")
	if err := s.PutUser(alice); err != nil {
		t.Fatal(err)
	}
	buf := []byte("alice")
	name := unsafe.String(unsafe.SliceData(buf), len(buf))
	got, ok, err := s.GetUser(name, "example.com")
	if err != nil || !ok || got.HA1MD5 != alice.HA1MD5 || got.HA1SHA256 != alice.HA1SHA256 {
		t.Fatalf("get alice: %+v %v %v", got, ok, err)
	}
	md5, sha := got.HA1MD5, got.HA1SHA256
	if err := s.PutUser(NewUser("alice", "example.com", "other")); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.GetUser("alice", "example.com"); err != nil {
		t.Fatal(err)
	}
	if md5 != alice.HA1MD5 || sha != alice.HA1SHA256 {
		t.Fatalf("HA1s returned before changed after: %s %s", md5, sha)
	}

	nb := []byte("nonce-1")
	nonce := unsafe.String(unsafe.SliceData(nb), len(nb))
	if ok, _ := s.UseNonce(nonce, 1, time.Minute); !ok {
		t.Fatal("first use refused")
	}
	copy(nb, "nonce-2")
	if ok, _ := s.UseNonce("nonce-1", 1, time.Minute); ok {
		t.Fatal("replay of nonce-1 taken")
	}

	cb := []byte("sip:alice@10.0.0.1")
	aor := "sip:alice@example.com"
	b := Binding{Contact: unsafe.String(unsafe.SliceData(cb), len(cb)), Expires: time.Now().Add(time.Hour), CallID: "c1", CSeq: 1}
	out, err := s.Apply([]Change{{AOR: aor, Bindings: []Binding{b}}, {AOR: "sip:bob@example.com"}})
	if err != nil || len(out) != 2 || len(out[0]) != 1 || out[0][0].Contact != "sip:alice@10.0.0.1" || out[1] != nil {
		t.Fatalf("apply: %+v %v", out, err)
	}
	copy(cb, "sip:alice@10.9.9.9")
	if bs, err := s.Lookup(aor); err != nil || len(bs) != 1 || bs[0].Contact != "sip:alice@10.0.0.1" {
		t.Fatalf("lookup after the caller's buffer changed: %+v %v", bs, err)
	}
}

// A transaction of another process holds the write lock: Apply waits for
// it as long as busy_timeout says, then fails as the store out of reach,
// and succeeds once the lock is free.
func TestSQLiteApplyWaitsForTheLock(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "location.db")
	s := openPatientSQLite(t, path)
	defer s.Close()
	other, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	defer other.Close()
	tx, err := other.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.Exec(`DELETE FROM location`); err != nil {
		t.Fatal(err)
	}
	ch := []Change{{AOR: "sip:alice@example.com", Bindings: []Binding{{Contact: "sip:alice@10.0.0.1", Expires: time.Now().Add(time.Hour)}}}}
	start := time.Now()
	if _, err := s.Apply(ch); !errors.Is(err, ErrUnavailable) {
		t.Fatalf("apply while locked: want %v, have %v", ErrUnavailable, err)
	}
	if waited := time.Since(start); waited < 300*time.Millisecond {
		t.Fatalf("apply while locked: want a wait of busy_timeout (400 ms), have %v", waited)
	}
	if ok, err := s.UseNonce("n1", 1, time.Minute); ok || !errors.Is(err, ErrUnavailable) {
		t.Fatalf("nonce while locked: want %v, have %v %v", ErrUnavailable, ok, err)
	}
	// A reader does not wait for the writer (WAL).
	if bs, err := s.Lookup("sip:alice@example.com"); err != nil || len(bs) != 0 {
		t.Fatalf("lookup while locked: want no binding and no error, have %+v %v", bs, err)
	}
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Apply(ch); err != nil || len(out) != 1 || len(out[0]) != 1 {
		t.Fatalf("apply after the lock: %+v %v", out, err)
	}
	if ok, err := s.UseNonce("n1", 1, time.Minute); !ok || err != nil {
		t.Fatalf("nonce after the lock: %v %v", ok, err)
	}
	bs, err := s.Lookup("sip:alice@example.com")
	if err != nil || len(bs) != 1 || bs[0].Contact != "sip:alice@10.0.0.1" || bs[0].AOR != "sip:alice@example.com" {
		t.Fatalf("lookup after the lock: %+v %v", bs, err)
	}
}

// After Close, every call fails as the store out of reach, without
// touching what Close released.
func TestSQLiteClosed(t *testing.T) {
	t.Parallel()
	s := openPatientSQLite(t, filepath.Join(t.TempDir(), "location.db"))
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply([]Change{{AOR: "sip:alice@example.com"}}); !errors.Is(err, ErrUnavailable) {
		t.Errorf("apply: want %v, have %v", ErrUnavailable, err)
	}
	if _, _, err := s.GetUser("alice", "example.com"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("get user: want %v, have %v", ErrUnavailable, err)
	}
	if _, err := s.UseNonce("n1", 1, time.Minute); !errors.Is(err, ErrUnavailable) {
		t.Errorf("use nonce: want %v, have %v", ErrUnavailable, err)
	}
	if _, err := s.Lookup("sip:alice@example.com"); !errors.Is(err, ErrUnavailable) {
		t.Errorf("lookup: want %v, have %v", ErrUnavailable, err)
	}
}

// BenchmarkSQLiteLookup is lookup()'s call for an INVITE to a registered
// phone: the live bindings of one AOR, here one.
func BenchmarkSQLiteLookup(b *testing.B) {
	s := openPatientSQLite(b, filepath.Join(b.TempDir(), "location.db"))
	defer s.Close()
	const aor = "sip:alice@example.com"
	if _, err := s.Register(aor, Binding{Contact: "sip:alice@192.0.2.1:5060", Expires: time.Now().Add(time.Hour),
		CallID: "c1@192.0.2.1", CSeq: 1, Received: "192.0.2.1:5060", Proto: "udp", UserAgent: "phone/1.0"}); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if bs, err := s.Lookup(aor); err != nil || len(bs) != 1 {
			b.Fatal(bs, err)
		}
	}
}

// The statements of every REGISTER, lookup and digest check are prepared
// once: SQLite prepares again, on every run, a statement whose plan it
// made from a bound value (aor = ? beside ORDER BY expires did, with
// SQLITE_ENABLE_STAT4), which cost a REGISTER's write 8 of its 35 µs and
// a lookup 11 of its 15 (BenchmarkSQLiteApply, BenchmarkSQLiteLookup).
func TestRawStatementsPreparedOnce(t *testing.T) {
	s, err := OpenSQLite(filepath.Join(t.TempDir(), "location.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if s.raw == nil {
		if err := s.openRaw(); err != nil {
			t.Fatal(err)
		}
	}
	exp := time.Now().Add(time.Hour)
	for i := 0; i < 20; i++ {
		aor := "sip:u" + itoa(i) + "@example.com"
		if _, err := s.Apply([]Change{{AOR: aor, Bindings: []Binding{{Contact: "sip:u@10.0.0.1", Expires: exp, CallID: "c" + itoa(i)}}}}); err != nil {
			t.Fatal(err)
		}
		if bs, err := s.Lookup(aor); err != nil || len(bs) != 1 {
			t.Fatalf("lookup of %s: %v, %v", aor, bs, err)
		}
		if _, _, err := s.GetUser("u"+itoa(i), "example.com"); err != nil {
			t.Fatal(err)
		}
		if _, err := s.UseNonce("n"+itoa(i), 1, time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	for _, st := range s.raw.stmts {
		if n := sqlite3.Xsqlite3_stmt_status(s.raw.tls, st.p, sqlite3.SQLITE_STMTSTATUS_REPREPARE, 0); n != 0 {
			sql := libc.GoString(sqlite3.Xsqlite3_sql(s.raw.tls, st.p))
			t.Errorf("prepared again %d times in 20 runs: %s", n, sql)
		}
	}
}
