package location

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/location/redistest"
)

func TestParseURL(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in, want, err string
	}{
		{in: "sqlite:location.db", want: "sqlite:location.db"},
		{in: "sqlite:/var/lib/sipvisor/location.db", want: "sqlite:/var/lib/sipvisor/location.db"},
		{in: "sqlite:///var/lib/x.db", want: "sqlite:/var/lib/x.db"},
		{in: "redis://10.0.0.5:6379/2", want: "redis://10.0.0.5:6379/2"},
		{in: "redis://:secret@10.0.0.5:6379/0", want: "redis://:xxxxx@10.0.0.5:6379/0"},
		{in: "memory:", want: "memory:"},
		{in: "sqlite:", err: "wants a file path"},
		{in: "location.db", err: "want sqlite:PATH"},
		{in: "mysql://db/x", err: `unknown kind "mysql"`},
		{in: "redis://10.0.0.5:6379/x", err: "invalid database number"},
		{in: "memory:x", err: "takes nothing"},
	} {
		sp, err := ParseURL(c.in)
		if c.err != "" {
			if err == nil || !strings.Contains(err.Error(), c.err) {
				t.Errorf("ParseURL(%q): want error with %q, have %v", c.in, c.err, err)
			}
			continue
		}
		if err != nil || sp.String() != c.want {
			t.Errorf("ParseURL(%q): want %s, have %s, %v", c.in, c.want, sp, err)
		}
	}
	if sp, _ := ParseURL("sqlite:loc.db"); sp.Resolve("/etc/sipvisor").Path != "/etc/sipvisor/loc.db" {
		t.Errorf("relative path: want it under the config's directory, have %s", sp.Resolve("/etc/sipvisor").Path)
	}
	if sp, _ := ParseURL("sqlite:/x/loc.db"); sp.Resolve("/etc").Path != "/x/loc.db" {
		t.Errorf("absolute path: want it kept, have %s", sp.Resolve("/etc").Path)
	}
}

// Two handles on one file stand for two worker processes: each sees what
// the other wrote, and a handle opened after both closed (a restart) sees
// every binding.
func TestSQLiteSharedAndDurable(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "location.db")
	a := openPatientSQLite(t, path)
	b := openPatientSQLite(t, path)
	exp := time.Now().Add(time.Hour)
	if _, err := a.Register("sip:alice@example.com", Binding{Contact: "sip:alice@10.0.0.1", Expires: exp, CallID: "c1", CSeq: 7, Received: "10.0.0.1:5060", Proto: "udp", UserAgent: "ua"}); err != nil {
		t.Fatal(err)
	}
	if _, err := b.Register("sip:bob@example.com", Binding{Contact: "sip:bob@10.0.0.2", Expires: exp}); err != nil {
		t.Fatal(err)
	}
	if bs, err := b.Lookup("sip:alice@example.com"); err != nil || len(bs) != 1 || bs[0].CSeq != 7 || bs[0].UserAgent != "ua" {
		t.Fatalf("b sees a's binding: have %+v, %v", bs, err)
	}
	a.Close()
	b.Close()
	c := openPatientSQLite(t, path)
	defer c.Close()
	bs, err := c.List()
	if err != nil || len(bs) != 2 || !bs[0].Expires.Equal(exp) {
		t.Fatalf("after reopening: want both bindings, have %+v, %v", bs, err)
	}
}

// A location table written before outbound gets its columns at the next
// open: its bindings stay, with no instance, reg-id or path, and new ones
// keep theirs.
func TestSQLiteAddsOutboundColumns(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "location.db")
	old, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	exp := time.Now().Add(time.Hour).UnixNano()
	for _, q := range []string{`CREATE TABLE location (aor TEXT NOT NULL, contact TEXT NOT NULL, expires INTEGER NOT NULL,
		call_id TEXT NOT NULL, cseq INTEGER NOT NULL, received TEXT NOT NULL, proto TEXT NOT NULL, user_agent TEXT NOT NULL,
		PRIMARY KEY (aor, contact)) WITHOUT ROWID`,
		`INSERT INTO location VALUES ('sip:alice@example.com', 'sip:alice@10.0.0.1', ` + strconv.FormatInt(exp, 10) + `, 'c1', 1, '10.0.0.1:5060', 'udp', 'ua')`} {
		if _, err := old.Exec(q); err != nil {
			t.Fatalf("%s: %v", q, err)
		}
	}
	old.Close()
	s := openPatientSQLite(t, path)
	defer s.Close()
	bob := Binding{Contact: "sip:bob@x.invalid;transport=tls;ob", Expires: time.Now().Add(time.Hour), Received: "10.0.0.2:40000", Proto: "tls",
		Instance: "<urn:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6>", RegID: "2", Path: "<sip:edge.example.com;lr;ob>"}
	if _, err := s.Register("sip:bob@example.com", bob); err != nil {
		t.Fatal(err)
	}
	if bs, err := s.Lookup("sip:alice@example.com"); err != nil || len(bs) != 1 || bs[0].CallID != "c1" || bs[0].Instance != "" {
		t.Fatalf("the binding written before: have %+v, %v", bs, err)
	}
	bs, err := s.Lookup("sip:bob@example.com")
	if err != nil || len(bs) != 1 || bs[0].Instance != bob.Instance || bs[0].RegID != "2" || bs[0].Path != bob.Path {
		t.Fatalf("a new binding: want its instance, reg-id and path, have %+v, %v", bs, err)
	}
	// A second handle, as another worker, finds the columns there.
	openPatientSQLite(t, path).Close()
}

func TestSQLiteOpenErrors(t *testing.T) {
	t.Parallel()
	_, err := Open(Spec{Kind: KindSQLite, Path: "/nonexistent-dir/sub/location.db"})
	if err == nil || !strings.Contains(err.Error(), "/nonexistent-dir/sub") {
		t.Fatalf("want an error naming the directory, have %v", err)
	}
}

// Each binding's key lapses in Redis at the binding's expiry, and its
// AOR's index with the last of them: nothing outlives a node.
func TestRedisTTL(t *testing.T) {
	srv := redistest.Start(t)
	r := openPatientRedis(t, srv)
	const aor = "sip:alice@example.com"
	if _, err := r.Register(aor, Binding{Contact: "sip:alice@10.0.0.1", Expires: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Register(aor, Binding{Contact: "sip:alice@10.0.0.2", Expires: time.Now().Add(2 * time.Hour)}); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: strings.TrimSuffix(strings.TrimPrefix(srv.URL(), "redis://"), "/0")})
	defer c.Close()
	near := func(key string, want time.Duration) {
		t.Helper()
		ttl, err := c.PTTL(ctx, key).Result()
		if err != nil || ttl < want-time.Minute || ttl > want {
			t.Errorf("%s: want a TTL near %v, have %v, %v", key, want, ttl, err)
		}
	}
	near(indexKey(aor)+"|sip:alice@10.0.0.1", time.Hour)
	near(indexKey(aor)+"|sip:alice@10.0.0.2", 2*time.Hour)
	near(indexKey(aor), 2*time.Hour)
	// A binding about to lapse takes its keys with it.
	if _, err := r.Register("sip:bob@example.com", Binding{Contact: "sip:bob@10.0.0.3", Expires: time.Now().Add(300 * time.Millisecond)}); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "bob's keys gone after his binding lapsed", func() bool {
		n, err := c.Exists(ctx, indexKey("sip:bob@example.com"), indexKey("sip:bob@example.com")+"|sip:bob@10.0.0.3").Result()
		return err == nil && n == 0
	})
}

// A Redis that is not there is an error at Open naming it; one that goes
// away makes calls fail as unavailable, at once while paused, and they
// work again once it is back.
func TestRedisDownAndBack(t *testing.T) {
	srv := redistest.Start(t)
	url := srv.URL()
	srv.Stop()
	if _, err := Open(Spec{Kind: KindRedis, URL: url}); err == nil || !strings.Contains(err.Error(), url) {
		t.Fatalf("open with no server: want an error naming %s, have %v", url, err)
	}
	srv.Start()
	st, err := Open(Spec{Kind: KindRedis, URL: patientURL(srv)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	st.(*guarded).Store.(*Redis).timeout = 10 * time.Second
	// The pause runs on a clock of the test's own: it passes only when the
	// test says so, however slow the machine.
	var clock atomic.Int64
	clock.Store(time.Now().UnixNano())
	g := st.(*guarded)
	g.mu.Lock()
	g.now = func() time.Time { return time.Unix(0, clock.Load()) }
	g.mu.Unlock()
	const aor = "sip:alice@example.com"
	if _, err := st.Register(aor, Binding{Contact: "sip:alice@10.0.0.1", Expires: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	_, err = st.Lookup(aor)
	if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "127.0.0.1") {
		t.Fatalf("lookup with the server gone: want ErrUnavailable naming the server, have %v", err)
	}
	// Refused without asking the server: the message says so.
	if _, err := st.Register(aor, Binding{Contact: "sip:alice@10.0.0.2", Expires: time.Now().Add(time.Hour)}); !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "not asked again") {
		t.Fatalf("register while paused: want ErrUnavailable saying the server was not asked, have %v", err)
	}
	srv.Start()
	var bs []Binding
	testkit.WaitFor(t, 5*time.Second, "the store available again after the server returned", func() bool {
		clock.Add(int64(failPause)) // each try after the pause of the one before
		bs, err = st.Lookup(aor)
		return err == nil
	})
	if len(bs) != 1 {
		t.Fatalf("after the server returned: want alice's binding back (append-only file), have %v", contacts(bs))
	}
}

// An unpaused store asks the server at every call: the first call after
// the server came back is answered, on a clock that never moves.
func TestRedisUnpausedAsksAtOnce(t *testing.T) {
	srv := redistest.Start(t)
	st, err := OpenUnpaused(Spec{Kind: KindRedis, URL: patientURL(srv)})
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	g := st.(*guarded)
	g.Store.(*Redis).timeout = 10 * time.Second
	frozen := time.Now()
	g.mu.Lock()
	g.now = func() time.Time { return frozen }
	g.mu.Unlock()
	const aor = "sip:alice@example.com"
	if _, err := st.Register(aor, Binding{Contact: "sip:alice@10.0.0.1", Expires: time.Now().Add(time.Hour)}); err != nil {
		t.Fatal(err)
	}
	srv.Stop()
	for i := 0; i < 2; i++ {
		if _, err := st.Lookup(aor); !errors.Is(err, ErrUnavailable) || strings.Contains(err.Error(), "not asked again") {
			t.Fatalf("lookup %d with the server gone: want ErrUnavailable from the server itself, have %v", i+1, err)
		}
	}
	srv.Start()
	var bs []Binding
	testkit.WaitFor(t, 5*time.Second, "the store answering once the server is back", func() bool {
		bs, err = st.Lookup(aor)
		return err == nil
	})
	if len(bs) != 1 {
		t.Fatalf("after the server returned: want alice's binding, have %v", contacts(bs))
	}
}

func benchRegister(b *testing.B, s Store) {
	bd := Binding{Contact: "sip:alice@10.0.0.1:5062;transport=udp", Expires: time.Now().Add(time.Hour),
		CallID: "a84b4c76e66710@pc33.example.com", CSeq: 1, Received: "10.0.0.1:5062", Proto: "udp",
		UserAgent: "Linphone/5.2.0 (belle-sip/5.2.0)"}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		// A new AOR each time, as bench/register.xml's users are.
		if bs, err := s.Register("sip:user"+itoa(i%10000)+"@example.com", bd); err != nil || len(bs) != 1 {
			b.Fatal(err, len(bs))
		}
	}
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var buf [20]byte
	n := len(buf)
	for ; i > 0; i /= 10 {
		n--
		buf[n] = byte('0' + i%10)
	}
	return string(buf[n:])
}

// BenchmarkSQLiteRegister is a REGISTER's store call in a worker that opens
// the file itself: an upsert and the AOR's lookup.
func BenchmarkSQLiteRegister(b *testing.B) {
	s, err := OpenSQLite(filepath.Join(b.TempDir(), "location.db"))
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	benchRegister(b, s)
}

func BenchmarkRedisRegister(b *testing.B) {
	srv := redistest.Start(b)
	r, err := OpenRedis(srv.URL())
	if err != nil {
		b.Fatal(err)
	}
	defer r.Close()
	benchRegister(b, r)
}

// BenchmarkSQLiteList10k is the supervisor's count of 10,000 bindings.
func BenchmarkSQLiteList10k(b *testing.B) {
	s := sqlite10k(b)
	b.ReportAllocs()
	for b.Loop() {
		if bs, err := s.List(); err != nil || len(bs) != 10000 {
			b.Fatal(err, len(bs))
		}
	}
}

// sqlite10k is an SQLite store holding 10,000 bindings, each of its own
// AOR, closed when the benchmark ends.
func sqlite10k(b *testing.B) *SQLite {
	s, err := OpenSQLite(filepath.Join(b.TempDir(), "location.db"))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { s.Close() })
	for i := 0; i < 10000; i++ {
		s.Save("sip:user"+itoa(i)+"@example.com", Binding{Contact: "sip:u@10.0.0.1:5062", Expires: time.Now().Add(time.Hour), CallID: "call" + itoa(i)})
	}
	return s
}

// BenchmarkSQLiteCallIDs10k is the supervisor's periodic count over
// 10,000 bindings, beside BenchmarkSQLiteList10k, which it replaced.
func BenchmarkSQLiteCallIDs10k(b *testing.B) {
	s := sqlite10k(b)
	b.ReportAllocs()
	for b.Loop() {
		if n, err := s.EachCallID(func([]byte) {}); err != nil || n != 10000 {
			b.Fatal(err, n)
		}
	}
}

// Every store that keeps users keeps their HA1s, refuses a nonce-count not
// above the last one seen of its nonce, and gives every caller one secret.
func TestUsers(t *testing.T) {
	t.Parallel()
	now := time.Now()
	for name, open := range stores(&now) {
		if name == "remote" {
			continue
		}
		t.Run(name, func(t *testing.T) {
			s := open(t)
			u, err := UsersOf(s)
			if err != nil {
				t.Fatal(err)
			}
			alice := NewUser("alice", "example.com", "secret")
			if alice.HA1MD5 != "8c4a3ba1d2a2a0cd3ae9d4fd2e26f3fc" && len(alice.HA1MD5) != 32 || len(alice.HA1SHA256) != 64 {
				t.Fatalf("HA1s: %+v", alice)
			}
			if err := u.PutUser(alice); err != nil {
				t.Fatal(err)
			}
			if err := u.PutUser(NewUser("bob", "example.com", "x")); err != nil {
				t.Fatal(err)
			}
			got, ok, err := u.GetUser("alice", "example.com")
			if err != nil || !ok || got != alice {
				t.Fatalf("get alice: want %+v, have %+v %v %v", alice, got, ok, err)
			}
			if _, ok, err := u.GetUser("alice", "example.org"); ok || err != nil {
				t.Fatalf("alice in another realm: want none, have %v %v", ok, err)
			}
			if us, err := u.ListUsers(); err != nil || len(us) != 2 || us[0].Name != "alice" {
				t.Fatalf("list: %+v %v", us, err)
			}
			if ok, err := u.RemoveUser("bob", "example.com"); !ok || err != nil {
				t.Fatalf("remove bob: %v %v", ok, err)
			}
			if ok, _ := u.RemoveUser("bob", "example.com"); ok {
				t.Fatalf("remove bob twice: want false")
			}
			for i, c := range []struct {
				nonce string
				nc    uint32
				want  bool
			}{{"n1", 1, true}, {"n1", 1, false}, {"n1", 2, true}, {"n1", 2, false}, {"n1", 1, false}, {"n2", 1, true}} {
				if ok, err := u.UseNonce(c.nonce, c.nc, time.Minute); err != nil || ok != c.want {
					t.Errorf("use %d (%s nc %d): want %v, have %v %v", i, c.nonce, c.nc, c.want, ok, err)
				}
			}
			a, err1 := u.Secret()
			b, err2 := u.Secret()
			if err1 != nil || err2 != nil || len(a) != 32 || string(a) != string(b) {
				t.Fatalf("secret: %x %x %v %v", a, b, err1, err2)
			}
		})
	}
}

// Closed after every kind of call, the database leaves no -wal or -shm
// file behind: SQLite removes them when the last handle closes.
func TestSQLiteCloseRemovesWAL(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "location.db")
	st, err := Open(Spec{Kind: KindSQLite, Path: path})
	if err != nil {
		t.Fatal(err)
	}
	const aor = "sip:alice@example.com"
	b := Binding{Contact: "sip:alice@10.0.0.1", Expires: time.Now().Add(time.Hour)}
	if _, err := st.Register(aor, b); err != nil {
		t.Fatal(err)
	}
	if _, err := Apply(st, []Change{{AOR: aor, Bindings: []Binding{b}}}); err != nil {
		t.Fatal(err)
	}
	if err := st.Save(aor, b); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Lookup(aor); err != nil {
		t.Fatal(err)
	}
	if _, err := st.List(); err != nil {
		t.Fatal(err)
	}
	if _, err := st.Expire(time.Now()); err != nil {
		t.Fatal(err)
	}
	if u, err := UsersOf(st); err != nil {
		t.Fatal(err)
	} else if err := u.PutUser(User{Name: "alice", Realm: "example.com"}); err != nil {
		t.Fatal(err)
	} else if _, _, err := u.GetUser("alice", "example.com"); err != nil {
		t.Fatal(err)
	} else if _, err := u.UseNonce("n1", 1, time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(path + "-*")
	if len(left) != 0 {
		t.Fatalf("after Close: want the database alone, have %v beside it", left)
	}
}
