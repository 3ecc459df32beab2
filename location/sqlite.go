package location

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver (pure Go, no cgo)
)

// SQLite is a Store in an SQLite database file, in WAL mode so that every
// worker process reads and writes it at once: readers never wait for the
// writer, and writers take turns (busy_timeout). It survives restarts of
// the server. With synchronous=NORMAL a commit is safe from a crash of the
// process but may be lost with the last moments before a power failure,
// as Kamailio's usrloc in its write-back modes may.
type SQLite struct {
	db   *sql.DB
	path string
	// Now is the clock used to hide lapsed bindings; tests replace it.
	Now func() time.Time
	// timeout bounds a statement: sqliteTimeout, or longer in tests on a
	// loaded machine.
	timeout time.Duration

	upsert, del, delAll, list, expire, callIDs *sql.Stmt

	putUser, rmUser, listUsers, expireNonces *sql.Stmt
	secretMu                                 sync.Mutex
	secret                                   []byte

	// Register's own connection and statements, one call at a time.
	regMu                                                            sync.Mutex
	regConn                                                          *sql.Conn
	begin, commit, rollback, regUpsert, regDel, regDelAll, regLookup *sql.Stmt

	// raw is the connection of what a worker asks on every REGISTER
	// (GetUser, UseNonce, Apply) and INVITE (Lookup), under regMu, and
	// its statements.
	raw *rawConn
	rawGetUser, rawUseNonce, rawBegin, rawCommit, rawRollback,
	rawUpsert, rawDel, rawDelAll, rawListed, rawLookup *rawStmt
	// ha1s are the HA1 hashes GetUser has returned, so that the same
	// hash read again is the same string, not a new one. Every GetUser
	// reads the row: a changed password counts at once.
	ha1s interned
}

// sqlitePragmas are every connection's settings.
var sqlitePragmas = []string{"busy_timeout(400)", "journal_mode(WAL)", "synchronous(NORMAL)", "mmap_size(268435456)"}

// errClosed is what a call on the raw connection returns after Close, as
// database/sql's do.
var errClosed = errors.New("sql: database is closed")

// sqliteTimeout bounds every statement made through database/sql with a
// context, including its wait for another process's write: well under
// SIP's T1, so a client is answered before it retransmits. What a worker
// asks on every REGISTER has no context to watch (Register, and the raw
// connection's calls): busy_timeout, the same 400 ms, bounds its wait.
const sqliteTimeout = 400 * time.Millisecond

// sqliteSchema indexes the bindings by expiry, so that the supervisor's
// sweep of lapsed rows reads what lapsed, not the table: without it a sweep
// of 1,000,000 bindings read them all every sweepEvery (bench/profile.sh
// --kind idle --bindings). The index costs each REGISTER's write a page
// (BenchmarkSQLiteRegister). A file made before the index gets it when it
// is next opened (CREATE INDEX IF NOT EXISTS), which reads the table once.
const sqliteSchema = `
CREATE TABLE IF NOT EXISTS location (
	aor        TEXT    NOT NULL,
	contact    TEXT    NOT NULL,
	expires    INTEGER NOT NULL, -- Unix nanoseconds
	call_id    TEXT    NOT NULL,
	cseq       INTEGER NOT NULL,
	received   TEXT    NOT NULL,
	proto      TEXT    NOT NULL,
	user_agent TEXT    NOT NULL,
	instance   TEXT    NOT NULL DEFAULT '',
	reg_id     TEXT    NOT NULL DEFAULT '',
	path       TEXT    NOT NULL DEFAULT '',
	PRIMARY KEY (aor, contact)
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS location_expires ON location (expires);
CREATE TABLE IF NOT EXISTS subscriber (
	name       TEXT NOT NULL,
	realm      TEXT NOT NULL,
	ha1_md5    TEXT NOT NULL,
	ha1_sha256 TEXT NOT NULL,
	PRIMARY KEY (name, realm)
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS nonce (
	nonce   TEXT    NOT NULL PRIMARY KEY,
	nc      INTEGER NOT NULL,
	expires INTEGER NOT NULL -- Unix nanoseconds
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS secret (
	id  INTEGER NOT NULL PRIMARY KEY CHECK (id = 1),
	key BLOB    NOT NULL
);
`

const (
	bindingCols = `aor, contact, expires, call_id, cseq, received, proto, user_agent, instance, reg_id, path`
	upsertSQL   = `INSERT INTO location (` + bindingCols + `) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
		ON CONFLICT (aor, contact) DO UPDATE SET expires = excluded.expires, call_id = excluded.call_id,
		cseq = excluded.cseq, received = excluded.received, proto = excluded.proto, user_agent = excluded.user_agent,
		instance = excluded.instance, reg_id = excluded.reg_id, path = excluded.path`
	deleteSQL    = `DELETE FROM location WHERE aor = ? AND contact = ?`
	deleteAllSQL = `DELETE FROM location WHERE aor = ?`
	// CAST(? AS TEXT): with aor = ? beside ORDER BY expires, SQLite
	// made the plan from the bound value and prepared the statement
	// again on every run (TestRawStatementsPreparedOnce).
	lookupSQL  = `SELECT ` + bindingCols + ` FROM location WHERE aor = CAST(? AS TEXT) AND +expires > ? ORDER BY expires DESC`
	listedSQL  = `SELECT contact, expires FROM location WHERE aor = CAST(? AS TEXT) AND +expires > ? ORDER BY expires DESC`
	getUserSQL = `SELECT ha1_md5, ha1_sha256 FROM subscriber WHERE name = ? AND realm = ?`
	// A nonce-count is accepted only above every count seen of its
	// nonce, or once the record of the nonce has lapsed.
	useNonceSQL = `INSERT INTO nonce (nonce, nc, expires) VALUES (?1, ?2, ?3)
		ON CONFLICT (nonce) DO UPDATE SET nc = excluded.nc, expires = excluded.expires
		WHERE excluded.nc > nonce.nc OR nonce.expires <= ?4`
)

// OpenSQLite opens (and creates, with its table) the database at path.
func OpenSQLite(path string) (*SQLite, error) {
	if dir := filepath.Dir(path); dir != "" {
		if _, err := os.Stat(dir); err != nil {
			return nil, fmt.Errorf("directory of the database: %w", err)
		}
	}
	q := url.Values{}
	for _, p := range sqlitePragmas {
		q.Add("_pragma", p)
	}
	db, err := sql.Open("sqlite", "file:"+path+"?"+q.Encode())
	if err != nil {
		return nil, err
	}
	// A worker asks one thing at a time; the supervisor a few (ctl, expiry).
	db.SetMaxOpenConns(4)
	db.SetMaxIdleConns(4)
	db.SetConnMaxIdleTime(0)
	s := &SQLite{db: db, path: path, Now: time.Now, timeout: sqliteTimeout}
	if err := s.init(); err != nil {
		if s.raw != nil {
			s.raw.close()
		}
		db.Close()
		return nil, err
	}
	return s, nil
}

func (s *SQLite) init() error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if _, err := s.db.ExecContext(ctx, sqliteSchema); err != nil {
		return fmt.Errorf("create table: %w", err)
	}
	if err := s.addOutboundColumns(ctx); err != nil {
		return err
	}
	conn, err := s.db.Conn(ctx)
	if err != nil {
		return err
	}
	s.regConn = conn
	if err := s.openRaw(); err != nil {
		return err
	}
	prep := func(dst **sql.Stmt, query string) error {
		st, err := s.db.PrepareContext(ctx, query)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", query, err)
		}
		*dst = st
		return nil
	}
	prepConn := func(dst **sql.Stmt, query string) error {
		st, err := conn.PrepareContext(ctx, query)
		if err != nil {
			return fmt.Errorf("prepare %q: %w", query, err)
		}
		*dst = st
		return nil
	}
	return errors.Join(
		prep(&s.upsert, upsertSQL),
		prep(&s.del, deleteSQL),
		prep(&s.delAll, deleteAllSQL),
		prep(&s.list, `SELECT `+bindingCols+` FROM location WHERE +expires > ? ORDER BY aor, contact`),
		// Through the index of expiries, sweepBatch rows a statement, so
		// that a sweep holds the write lock briefly however many lapsed
		// together (a restart's worth of phones that never came back).
		prep(&s.expire, `DELETE FROM location WHERE (aor, contact) IN
			(SELECT aor, contact FROM location WHERE expires <= ?1 LIMIT ?2)`),
		// The count reads nearly every row: in the table's own order, not
		// through the index of expiries and a lookup of each row (the unary
		// + keeps the planner off the index).
		prep(&s.callIDs, `SELECT call_id FROM location WHERE +expires > ?`),
		prep(&s.putUser, `INSERT INTO subscriber (name, realm, ha1_md5, ha1_sha256) VALUES (?, ?, ?, ?)
			ON CONFLICT (name, realm) DO UPDATE SET ha1_md5 = excluded.ha1_md5, ha1_sha256 = excluded.ha1_sha256`),
		prep(&s.rmUser, `DELETE FROM subscriber WHERE name = ? AND realm = ?`),
		prep(&s.listUsers, `SELECT name, realm, ha1_md5, ha1_sha256 FROM subscriber ORDER BY realm, name`),
		prep(&s.expireNonces, `DELETE FROM nonce WHERE expires <= ?`),
		prepConn(&s.begin, `BEGIN IMMEDIATE`),
		prepConn(&s.commit, `COMMIT`),
		prepConn(&s.rollback, `ROLLBACK`),
		prepConn(&s.regUpsert, upsertSQL),
		prepConn(&s.regDel, deleteSQL),
		prepConn(&s.regDelAll, deleteAllSQL),
		prepConn(&s.regLookup, lookupSQL),
	)
}

// openRaw opens the connection of a worker's every REGISTER (rawConn)
// and prepares its statements. Without a context to watch, as Register's:
// busy_timeout bounds a wait for another process's write.
func (s *SQLite) openRaw() error {
	var pragmas strings.Builder
	for _, p := range sqlitePragmas {
		name, val, _ := strings.Cut(strings.TrimSuffix(p, ")"), "(")
		fmt.Fprintf(&pragmas, "PRAGMA %s = %s;", name, val)
	}
	r, err := openRaw(s.path, pragmas.String())
	if err != nil {
		return fmt.Errorf("open %s: %w", s.path, err)
	}
	s.raw = r
	prep := func(dst **rawStmt, query string) error {
		st, err := r.prepare(query)
		*dst = st
		return err
	}
	return errors.Join(
		prep(&s.rawGetUser, getUserSQL),
		prep(&s.rawUseNonce, useNonceSQL),
		prep(&s.rawBegin, `BEGIN IMMEDIATE`),
		prep(&s.rawCommit, `COMMIT`),
		prep(&s.rawRollback, `ROLLBACK`),
		prep(&s.rawUpsert, upsertSQL),
		prep(&s.rawDel, deleteSQL),
		prep(&s.rawDelAll, deleteAllSQL),
		prep(&s.rawListed, listedSQL),
		prep(&s.rawLookup, lookupSQL),
	)
}

func (s *SQLite) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), s.timeout)
}

// Save implements Store.
func (s *SQLite) Save(aor string, b Binding) error {
	if aor == "" {
		return ErrEmptyAOR
	}
	ctx, cancel := s.ctx()
	defer cancel()
	var err error
	if !b.Expires.After(s.Now()) {
		_, err = s.del.ExecContext(ctx, aor, b.Contact)
	} else {
		_, err = s.upsert.ExecContext(ctx, aor, b.Contact, b.Expires.UnixNano(), b.CallID, int64(b.CSeq), b.Received, b.Proto, b.UserAgent, b.Instance, b.RegID, b.Path)
	}
	return s.fail("save", err)
}

// Register implements Store: the save and the lookup in one transaction,
// which takes the database's locks once. It runs on a connection of its
// own with no context to watch: database/sql and the driver would start a
// goroutine per call to watch one, a fifth of the cost; busy_timeout
// bounds the wait instead.
func (s *SQLite) Register(aor string, b Binding) ([]Binding, error) {
	if aor == "" {
		return nil, ErrEmptyAOR
	}
	s.regMu.Lock()
	defer s.regMu.Unlock()
	ctx := context.Background()
	if _, err := s.begin.ExecContext(ctx); err != nil {
		return nil, s.fail("register", err)
	}
	bs, err := s.register(ctx, aor, b)
	if err != nil {
		s.rollback.ExecContext(ctx)
		return nil, s.fail("register", err)
	}
	if _, err := s.commit.ExecContext(ctx); err != nil {
		s.rollback.ExecContext(ctx)
		return nil, s.fail("register", err)
	}
	return bs, nil
}

// Apply implements Batcher: the changes of several REGISTERs in one
// transaction, which costs little more than one of them alone: the
// locks, the log's frames and their write are per transaction. It runs
// on the raw connection, and the bindings it lists share one array: a
// listed contact that one of its change's bindings names is that
// binding's string, the common case of a phone refreshing its one
// binding.
func (s *SQLite) Apply(changes []Change) ([][]Binding, error) {
	for _, ch := range changes {
		if ch.AOR == "" {
			return nil, ErrEmptyAOR
		}
	}
	s.regMu.Lock()
	defer s.regMu.Unlock()
	if s.raw == nil {
		return nil, s.fail("register", errClosed)
	}
	if _, err := s.rawBegin.exec(); err != nil {
		return nil, s.fail("register", err)
	}
	out := make([][]Binding, len(changes))
	all := make([]Binding, 0, len(changes))
	for i, ch := range changes {
		k := len(all)
		var err error
		if all, err = s.apply(all, ch); err != nil {
			s.rawRollback.exec()
			return nil, s.fail("register", err)
		}
		if len(all) > k {
			out[i] = all[k:len(all):len(all)]
		}
	}
	if _, err := s.rawCommit.exec(); err != nil {
		s.rawRollback.exec()
		return nil, s.fail("register", err)
	}
	return out, nil
}

// CopiesChanges implements Copier: SQLite copies every argument it binds.
func (s *SQLite) CopiesChanges() {}

// apply writes ch and appends the bindings its 200 OK lists to dst.
func (s *SQLite) apply(dst []Binding, ch Change) ([]Binding, error) {
	now := s.Now()
	if ch.RemoveAll {
		st := s.rawDelAll
		if err := st.text(1, ch.AOR); err != nil {
			return dst, err
		}
		if _, err := st.exec(); err != nil {
			return dst, err
		}
		if len(ch.Bindings) == 0 {
			return dst, nil
		}
	}
	for i := range ch.Bindings {
		if err := s.writeRaw(now, ch.AOR, &ch.Bindings[i]); err != nil {
			return dst, err
		}
	}
	st := s.rawListed
	if err := errors.Join(st.text(1, ch.AOR), st.int(2, now.UnixNano())); err != nil {
		st.reset()
		return dst, err
	}
	for {
		row, err := st.step()
		if err != nil {
			return dst, err
		}
		if !row {
			return dst, nil
		}
		ct := st.col(0)
		b := Binding{AOR: ch.AOR, Expires: time.Unix(0, st.colInt(1))}
		for j := range ch.Bindings {
			if ch.Bindings[j].Contact == string(ct) {
				b.Contact = ch.Bindings[j].Contact
				break
			}
		}
		if b.Contact == "" {
			b.Contact = string(ct)
		}
		dst = append(dst, b)
	}
}

// writeRaw is write on the raw connection.
func (s *SQLite) writeRaw(now time.Time, aor string, b *Binding) error {
	if !b.Expires.After(now) {
		st := s.rawDel
		if err := errors.Join(st.text(1, aor), st.text(2, b.Contact)); err != nil {
			st.reset()
			return err
		}
		_, err := st.exec()
		return err
	}
	st := s.rawUpsert
	err := errors.Join(st.text(1, aor), st.text(2, b.Contact), st.int(3, b.Expires.UnixNano()), st.text(4, b.CallID),
		st.int(5, int64(b.CSeq)), st.text(6, b.Received), st.text(7, b.Proto), st.text(8, b.UserAgent),
		st.text(9, b.Instance), st.text(10, b.RegID), st.text(11, b.Path))
	if err != nil {
		st.reset()
		return err
	}
	_, err = st.exec()
	return err
}

func (s *SQLite) register(ctx context.Context, aor string, b Binding) ([]Binding, error) {
	now := s.Now()
	var err error
	if !b.Expires.After(now) {
		_, err = s.regDel.ExecContext(ctx, aor, b.Contact)
	} else {
		_, err = s.regUpsert.ExecContext(ctx, aor, b.Contact, b.Expires.UnixNano(), b.CallID, int64(b.CSeq), b.Received, b.Proto, b.UserAgent, b.Instance, b.RegID, b.Path)
	}
	if err != nil {
		return nil, err
	}
	rows, err := s.regLookup.QueryContext(ctx, aor, now.UnixNano())
	if err != nil {
		return nil, err
	}
	return scanBindings(rows)
}

// Lookup implements Store, on the raw connection: lookup()'s call for
// every INVITE to a registered phone, which through database/sql made 69
// objects. The bindings' AOR is aor, their Proto one of the store's own.
func (s *SQLite) Lookup(aor string) ([]Binding, error) {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	if s.raw == nil {
		return nil, s.fail("lookup", errClosed)
	}
	st := s.rawLookup
	if err := errors.Join(st.text(1, aor), st.int(2, s.Now().UnixNano())); err != nil {
		st.reset()
		return nil, s.fail("lookup", err)
	}
	var out []Binding
	for {
		row, err := st.step()
		if err != nil {
			return nil, s.fail("lookup", err)
		}
		if !row {
			return out, nil
		}
		out = append(out, Binding{
			AOR:       aor,
			Contact:   string(st.col(1)),
			Expires:   time.Unix(0, st.colInt(2)),
			CallID:    string(st.col(3)),
			CSeq:      uint32(st.colInt(4)),
			Received:  string(st.col(5)),
			Proto:     protoName(st.col(6)),
			UserAgent: string(st.col(7)),
			Instance:  string(st.col(8)),
			RegID:     string(st.col(9)),
			Path:      string(st.col(10)),
		})
	}
}

// protoName is p as a string, one of the transports' without a copy.
func protoName(p []byte) string {
	for _, n := range [...]string{"udp", "tcp", "tls", "ws", "wss", "sctp"} {
		if string(p) == n {
			return n
		}
	}
	return string(p)
}

// Remove implements Store.
func (s *SQLite) Remove(aor, contact string) error {
	if aor == "" {
		return ErrEmptyAOR
	}
	ctx, cancel := s.ctx()
	defer cancel()
	var err error
	if contact == "" {
		_, err = s.delAll.ExecContext(ctx, aor)
	} else {
		_, err = s.del.ExecContext(ctx, aor, contact)
	}
	return s.fail("remove", err)
}

// Expire implements Store.
func (s *SQLite) Expire(now time.Time) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	total := 0
	for {
		res, err := s.expire.ExecContext(ctx, now.UnixNano(), sweepBatch)
		if err != nil {
			return total, s.fail("expire", err)
		}
		n, _ := res.RowsAffected()
		total += int(n)
		if n < sweepBatch {
			break
		}
	}
	if _, err := s.expireNonces.ExecContext(ctx, now.UnixNano()); err != nil {
		return total, s.fail("expire", err)
	}
	return total, nil
}

// sweepBatch is how many lapsed bindings one statement of a sweep deletes:
// a few milliseconds of the write lock, which the workers' REGISTERs wait
// for (busy_timeout).
const sweepBatch = 2000

// List implements Store.
func (s *SQLite) List() ([]Binding, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := s.list.QueryContext(ctx, s.Now().UnixNano())
	if err != nil {
		return nil, s.fail("list", err)
	}
	bs, err := scanBindings(rows)
	return bs, s.fail("list", err)
}

// EachCallID implements CallIDLister: one column, read in place.
func (s *SQLite) EachCallID(fn func(callID []byte)) (int, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := s.callIDs.QueryContext(ctx, s.Now().UnixNano())
	if err != nil {
		return 0, s.fail("list", err)
	}
	defer rows.Close()
	n := 0
	var id sql.RawBytes
	for rows.Next() {
		if err := rows.Scan(&id); err != nil {
			return n, s.fail("list", err)
		}
		fn(id)
		n++
	}
	return n, s.fail("list", rows.Err())
}

// Close implements Store.
//
// The statements are closed first: with them left open, a handle on the
// file outlived db.Close and the -wal and -shm files stayed, which SQLite
// removes only when the last handle on the database closes.
func (s *SQLite) Close() error {
	for _, st := range []*sql.Stmt{s.upsert, s.del, s.delAll, s.list, s.expire, s.callIDs,
		s.putUser, s.rmUser, s.listUsers, s.expireNonces,
		s.begin, s.commit, s.rollback, s.regUpsert, s.regDel, s.regDelAll, s.regLookup} {
		if st != nil {
			st.Close()
		}
	}
	s.regConn.Close()
	s.regMu.Lock()
	if s.raw != nil {
		s.raw.close()
		s.raw = nil
	}
	s.regMu.Unlock()
	return s.db.Close()
}

func (s *SQLite) fail(op string, err error) error {
	if err == nil {
		return nil
	}
	return unavailable(fmt.Errorf("sqlite %s %s: %w", op, s.path, err))
}

func scanBindings(rows *sql.Rows) ([]Binding, error) {
	defer rows.Close()
	var out []Binding
	for rows.Next() {
		var (
			b       Binding
			exp, cs int64
		)
		if err := rows.Scan(&b.AOR, &b.Contact, &exp, &b.CallID, &cs, &b.Received, &b.Proto, &b.UserAgent, &b.Instance, &b.RegID, &b.Path); err != nil {
			return nil, err
		}
		b.Expires = time.Unix(0, exp)
		b.CSeq = uint32(cs)
		out = append(out, b)
	}
	return out, rows.Err()
}

// PutUser implements Users.
func (s *SQLite) PutUser(u User) error {
	ctx, cancel := s.ctx()
	defer cancel()
	_, err := s.putUser.ExecContext(ctx, u.Name, u.Realm, u.HA1MD5, u.HA1SHA256)
	return s.fail("put user", err)
}

// GetUser implements Users, on the raw connection.
func (s *SQLite) GetUser(name, realm string) (User, bool, error) {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	if s.raw == nil {
		return User{}, false, s.fail("get user", errClosed)
	}
	st := s.rawGetUser
	if err := errors.Join(st.text(1, name), st.text(2, realm)); err != nil {
		st.reset()
		return User{}, false, s.fail("get user", err)
	}
	row, err := st.step()
	if err != nil {
		return User{}, false, s.fail("get user", err)
	}
	if !row {
		return User{}, false, nil
	}
	u := User{Name: name, Realm: realm, HA1MD5: s.ha1s.get(st.col(0)), HA1SHA256: s.ha1s.get(st.col(1))}
	st.reset()
	return u, true, nil
}

// RemoveUser implements Users.
func (s *SQLite) RemoveUser(name, realm string) (bool, error) {
	ctx, cancel := s.ctx()
	defer cancel()
	res, err := s.rmUser.ExecContext(ctx, name, realm)
	if err != nil {
		return false, s.fail("remove user", err)
	}
	n, _ := res.RowsAffected()
	return n > 0, nil
}

// ListUsers implements Users.
func (s *SQLite) ListUsers() ([]User, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	rows, err := s.listUsers.QueryContext(ctx)
	if err != nil {
		return nil, s.fail("list users", err)
	}
	defer rows.Close()
	var out []User
	for rows.Next() {
		var u User
		if err := rows.Scan(&u.Name, &u.Realm, &u.HA1MD5, &u.HA1SHA256); err != nil {
			return nil, s.fail("list users", err)
		}
		out = append(out, u)
	}
	return out, s.fail("list users", rows.Err())
}

// UseNonce implements Users, on the raw connection: the count is
// written, in a transaction of its own, before it is accepted, so that a
// replay to another worker or process is refused at once.
func (s *SQLite) UseNonce(nonce string, nc uint32, ttl time.Duration) (bool, error) {
	s.regMu.Lock()
	defer s.regMu.Unlock()
	if s.raw == nil {
		return false, s.fail("use nonce", errClosed)
	}
	now := s.Now()
	st := s.rawUseNonce
	if err := errors.Join(st.text(1, nonce), st.int(2, int64(nc)), st.int(3, now.Add(ttl).UnixNano()), st.int(4, now.UnixNano())); err != nil {
		st.reset()
		return false, s.fail("use nonce", err)
	}
	n, err := st.exec()
	if err != nil {
		return false, s.fail("use nonce", err)
	}
	return n > 0, nil
}

// Secret implements Users: the first process to ask makes it.
func (s *SQLite) Secret() ([]byte, error) {
	s.secretMu.Lock()
	defer s.secretMu.Unlock()
	if s.secret != nil {
		return s.secret, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := s.db.ExecContext(ctx, `INSERT OR IGNORE INTO secret (id, key) VALUES (1, ?)`, newSecret()); err != nil {
		return nil, s.fail("secret", err)
	}
	var key []byte
	if err := s.db.QueryRowContext(ctx, `SELECT key FROM secret WHERE id = 1`).Scan(&key); err != nil {
		return nil, s.fail("secret", err)
	}
	s.secret = key
	return key, nil
}

// addOutboundColumns brings a location table made before outbound (RFC
// 5626) up to date: the columns instance, reg_id and path, empty for the
// bindings already there. Workers open the file at once, so another may
// have added a column since this one looked: that is no error.
func (s *SQLite) addOutboundColumns(ctx context.Context) error {
	rows, err := s.db.QueryContext(ctx, `SELECT name FROM pragma_table_info('location')`)
	if err != nil {
		return fmt.Errorf("read the location table's columns: %w", err)
	}
	have := map[string]bool{}
	for rows.Next() {
		var name string
		if err := rows.Scan(&name); err != nil {
			rows.Close()
			return err
		}
		have[name] = true
	}
	rows.Close()
	for _, col := range []string{"instance", "reg_id", "path"} {
		if have[col] {
			continue
		}
		_, err := s.db.ExecContext(ctx, `ALTER TABLE location ADD COLUMN `+col+` TEXT NOT NULL DEFAULT ''`)
		if err != nil && !strings.Contains(err.Error(), "duplicate column") {
			return fmt.Errorf("add column %s to the location table: %w", col, err)
		}
	}
	return nil
}
