package location

import (
	"context"
	"database/sql"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// The sweep drops what lapsed and keeps what was refreshed or is still
// live, in the memory and SQLite stores, past one batch of SQLite's.
func TestSweepByExpiry(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_800_000_000, 0)
	for name, open := range map[string]func(t *testing.T) Store{
		"memory": func(*testing.T) Store { m := NewMemory(); m.Now = func() time.Time { return t0 }; return m },
		"sqlite": func(t *testing.T) Store {
			s := openPatientSQLite(t, filepath.Join(t.TempDir(), "location.db"))
			s.Now = func() time.Time { return t0 }
			t.Cleanup(func() { s.Close() })
			return s
		},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			s := open(t)
			const lapsing = sweepBatch + 500
			for i := range lapsing {
				aor := "sip:u" + itoa(i) + "@example.com"
				if err := s.Save(aor, Binding{Contact: "sip:u@10.0.0.1", Expires: t0.Add(time.Minute), CallID: "c" + itoa(i)}); err != nil {
					t.Fatal(err)
				}
			}
			// Ten of them are refreshed before they lapse, ten removed, and
			// one AOR binds for an hour.
			for i := range 10 {
				aor := "sip:u" + itoa(i) + "@example.com"
				if err := s.Save(aor, Binding{Contact: "sip:u@10.0.0.1", Expires: t0.Add(2 * time.Hour), CallID: "c" + itoa(i)}); err != nil {
					t.Fatal(err)
				}
				if err := s.Remove("sip:u"+itoa(100+i)+"@example.com", ""); err != nil {
					t.Fatal(err)
				}
			}
			if err := s.Save("sip:long@example.com", Binding{Contact: "sip:l@10.0.0.2", Expires: t0.Add(time.Hour)}); err != nil {
				t.Fatal(err)
			}
			if n, err := s.Expire(t0.Add(30 * time.Second)); err != nil || n != 0 {
				t.Fatalf("sweep before any lapsed: want 0, have %d, %v", n, err)
			}
			if n, err := s.Expire(t0.Add(90 * time.Second)); err != nil || n != lapsing-20 {
				t.Fatalf("sweep: want %d lapsed, have %d, %v", lapsing-20, n, err)
			}
			n, err := EachCallID(s, func([]byte) {})
			if err != nil || n != 11 {
				t.Fatalf("after the sweep: want the 10 refreshed and the long one, have %d, %v", n, err)
			}
			if n, err := s.Expire(t0.Add(90 * time.Minute)); err != nil || n != 1 {
				t.Fatalf("second sweep: want the long one, have %d, %v", n, err)
			}
		})
	}
}

// The memory store's queue of expiries stays proportionate to its
// bindings however often they are refreshed.
func TestMemoryExpiriesBounded(t *testing.T) {
	t.Parallel()
	m := NewMemory()
	t0 := time.Now()
	for round := range 50 {
		for i := range 100 {
			m.Save("sip:u"+itoa(i)+"@example.com", Binding{Contact: "sip:u@10.0.0.1", Expires: t0.Add(time.Hour + time.Duration(round)*time.Second)})
		}
	}
	if len(m.due) > 2*m.n+64+1 || m.n != 100 {
		t.Fatalf("100 bindings refreshed 50 times: want at most %d expiries queued, have %d (%d bindings)", 2*m.n+65, len(m.due), m.n)
	}
	if n, _ := m.Expire(t0.Add(2 * time.Hour)); n != 100 || m.n != 0 {
		t.Fatalf("want all 100 lapsed, have %d, %d left", n, m.n)
	}
}

// The sweep goes through the index of expiries, and lookups and the count
// do not: what keeps the sweep's cost to what lapsed, and the rest as it
// was.
func TestSQLiteQueryPlans(t *testing.T) {
	t.Parallel()
	s := openPatientSQLite(t, filepath.Join(t.TempDir(), "location.db"))
	defer s.Close()
	plan := func(q string, args ...any) string {
		rows, err := s.db.Query("EXPLAIN QUERY PLAN "+q, args...)
		if err != nil {
			t.Fatal(err)
		}
		defer rows.Close()
		var out []string
		for rows.Next() {
			var id, parent, unused int
			var detail string
			if err := rows.Scan(&id, &parent, &unused, &detail); err != nil {
				t.Fatal(err)
			}
			out = append(out, detail)
		}
		return strings.Join(out, "; ")
	}
	for _, c := range []struct {
		what, q, want string
		args          []any
	}{
		{"the sweep", `SELECT aor, contact FROM location WHERE expires <= ?1 LIMIT ?2`, "INDEX location_expires", []any{1, 2}},
		{"a lookup", lookupSQL, "PRIMARY KEY", []any{"a", 1}},
		{"the count", `SELECT call_id FROM location WHERE +expires > ?`, "SCAN location", []any{1}},
	} {
		if p := plan(c.q, c.args...); !strings.Contains(p, c.want) {
			t.Errorf("%s: want a plan with %q, have %q", c.what, c.want, p)
		}
	}
}

// A file written before the index of expiries gets it when opened, and
// keeps its bindings.
func TestSQLiteAddsExpiryIndex(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "location.db")
	old, err := sql.Open("sqlite", "file:"+path)
	if err != nil {
		t.Fatal(err)
	}
	// The schema as sipvisor wrote it before the index.
	if _, err := old.Exec(`CREATE TABLE location (aor TEXT NOT NULL, contact TEXT NOT NULL, expires INTEGER NOT NULL,
		call_id TEXT NOT NULL, cseq INTEGER NOT NULL, received TEXT NOT NULL, proto TEXT NOT NULL, user_agent TEXT NOT NULL,
		PRIMARY KEY (aor, contact)) WITHOUT ROWID;
		INSERT INTO location VALUES ('sip:a@example.com', 'sip:a@10.0.0.1', 4000000000000000000, 'c1', 1, '', 'udp', 'old'),
			('sip:b@example.com', 'sip:b@10.0.0.1', 1, 'c2', 1, '', 'udp', 'old')`); err != nil {
		t.Fatal(err)
	}
	old.Close()
	s := openPatientSQLite(t, path)
	defer s.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var n int
	if err := s.db.QueryRowContext(ctx, `SELECT count(*) FROM sqlite_master WHERE type = 'index' AND name = 'location_expires'`).Scan(&n); err != nil || n != 1 {
		t.Fatalf("want the index added on open, have %d, %v", n, err)
	}
	if bs, err := s.Lookup("sip:a@example.com"); err != nil || len(bs) != 1 || bs[0].UserAgent != "old" {
		t.Fatalf("want the old binding kept, have %v, %v", bs, err)
	}
	if n, err := s.Expire(time.Now()); err != nil || n != 1 {
		t.Fatalf("want the lapsed old binding swept, have %d, %v", n, err)
	}
}

// BenchmarkSQLiteSweep is the supervisor's sweep of a table of n live
// bindings of which none lapsed: what a sweep costs a registrar at rest,
// which must not grow with n.
func BenchmarkSQLiteSweep(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(itoa(n), func(b *testing.B) {
			s, err := OpenSQLite(filepath.Join(b.TempDir(), "location.db"))
			if err != nil {
				b.Fatal(err)
			}
			defer s.Close()
			// As bench/profile.sh fills a store: one statement.
			if _, err := s.db.Exec(`WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n WHERE i < ?)
				INSERT INTO location (aor, contact, expires, call_id, cseq, received, proto, user_agent)
				SELECT 'sip:u' || i || '@127.0.0.1', '<sip:u' || i || '@127.0.0.1:5060>', ?, 'idle-' || i, 1, '', 'udp', 'bench' FROM n`,
				n, time.Now().Add(time.Hour).UnixNano()); err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			for b.Loop() {
				if k, err := s.Expire(time.Now()); err != nil || k != 0 {
					b.Fatal(k, err)
				}
			}
		})
	}
}
