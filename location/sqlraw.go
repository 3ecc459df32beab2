package location

import (
	"errors"
	"fmt"
	"unsafe"

	"modernc.org/libc"
	"modernc.org/libc/sys/types"
	sqlite3 "modernc.org/sqlite/lib"
)

// rawConn is a connection to the database file through SQLite's own API,
// as modernc.org/sqlite translates it to Go, for what a worker asks on
// every REGISTER: the credentials, the nonce-count and the group commit.
// Through database/sql and the driver each statement made 14 to 37 Go
// objects (its arguments boxed, a result, rows and their columns, a
// context watcher); here a statement is prepared once, its text arguments
// are copied into one buffer of SQLite's memory, and its columns are read
// where SQLite holds them. It is not safe for concurrent use: SQLite's
// holds it under regMu.
type rawConn struct {
	tls *libc.TLS
	db  uintptr
	// arg is C memory the text arguments of a statement are copied into
	// (bound SQLITE_TRANSIENT, so SQLite copies them in turn and arg is
	// free again once the bind returns), argCap its size.
	arg    uintptr
	argCap int
	stmts  []*rawStmt
}

// rawStmt is a statement prepared once on a rawConn.
type rawStmt struct {
	c *rawConn
	p uintptr
}

// openRaw opens path with the settings OpenSQLite's connections have.
func openRaw(path string, pragmas string) (_ *rawConn, err error) {
	c := &rawConn{tls: libc.NewTLS()}
	name, err := libc.CString(path)
	if err != nil {
		c.tls.Close()
		return nil, err
	}
	defer libc.Xfree(c.tls, name)
	pdb := libc.Xmalloc(c.tls, 8)
	if pdb == 0 {
		c.tls.Close()
		return nil, errors.New("sqlite: out of memory")
	}
	defer libc.Xfree(c.tls, pdb)
	*(*uintptr)(cptr(pdb)) = 0
	rc := sqlite3.Xsqlite3_open_v2(c.tls, name, pdb, sqlite3.SQLITE_OPEN_READWRITE|sqlite3.SQLITE_OPEN_NOMUTEX, 0)
	c.db = *(*uintptr)(cptr(pdb))
	if rc != sqlite3.SQLITE_OK {
		err = c.err(rc)
		c.close()
		return nil, err
	}
	sqlite3.Xsqlite3_extended_result_codes(c.tls, c.db, 1)
	if err := c.exec(pragmas); err != nil {
		c.close()
		return nil, err
	}
	return c, nil
}

// err is the error rc stands for, with the connection's message.
func (c *rawConn) err(rc int32) error {
	msg := ""
	if c.db != 0 {
		msg = libc.GoString(sqlite3.Xsqlite3_errmsg(c.tls, c.db))
	} else {
		msg = libc.GoString(sqlite3.Xsqlite3_errstr(c.tls, rc))
	}
	return fmt.Errorf("%s (%d)", msg, rc)
}

// exec runs sql, one or more statements without arguments.
func (c *rawConn) exec(sql string) error {
	s, err := libc.CString(sql)
	if err != nil {
		return err
	}
	defer libc.Xfree(c.tls, s)
	if rc := sqlite3.Xsqlite3_exec(c.tls, c.db, s, 0, 0, 0); rc != sqlite3.SQLITE_OK {
		return c.err(rc)
	}
	return nil
}

// prepare prepares sql, one statement, to be used for the connection's
// life.
func (c *rawConn) prepare(sql string) (*rawStmt, error) {
	s, err := libc.CString(sql)
	if err != nil {
		return nil, err
	}
	defer libc.Xfree(c.tls, s)
	pp := libc.Xmalloc(c.tls, 8)
	if pp == 0 {
		return nil, errors.New("sqlite: out of memory")
	}
	defer libc.Xfree(c.tls, pp)
	*(*uintptr)(cptr(pp)) = 0
	if rc := sqlite3.Xsqlite3_prepare_v3(c.tls, c.db, s, -1, sqlite3.SQLITE_PREPARE_PERSISTENT, pp, 0); rc != sqlite3.SQLITE_OK {
		return nil, fmt.Errorf("prepare %q: %w", sql, c.err(rc))
	}
	st := &rawStmt{c: c, p: *(*uintptr)(cptr(pp))}
	c.stmts = append(c.stmts, st)
	return st, nil
}

// close finalizes the statements and closes the connection.
func (c *rawConn) close() error {
	for _, st := range c.stmts {
		sqlite3.Xsqlite3_finalize(c.tls, st.p)
	}
	c.stmts = nil
	var err error
	if c.db != 0 {
		if rc := sqlite3.Xsqlite3_close_v2(c.tls, c.db); rc != sqlite3.SQLITE_OK {
			err = c.err(rc)
		}
		c.db = 0
	}
	if c.arg != 0 {
		libc.Xfree(c.tls, c.arg)
		c.arg, c.argCap = 0, 0
	}
	c.tls.Close()
	return err
}

// text binds s to parameter i (from 1), copied.
func (st *rawStmt) text(i int, s string) error {
	c := st.c
	if len(s) > c.argCap {
		n := max(256, 2*len(s))
		p := libc.Xmalloc(c.tls, types.Size_t(n))
		if p == 0 {
			return errors.New("sqlite: out of memory")
		}
		if c.arg != 0 {
			libc.Xfree(c.tls, c.arg)
		}
		c.arg, c.argCap = p, n
	}
	if len(s) > 0 {
		copy(unsafe.Slice((*byte)(cptr(c.arg)), len(s)), s)
	}
	if rc := sqlite3.Xsqlite3_bind_text(c.tls, st.p, int32(i), c.arg, int32(len(s)), sqlite3.SQLITE_TRANSIENT); rc != sqlite3.SQLITE_OK {
		return c.err(rc)
	}
	return nil
}

// int binds n to parameter i (from 1).
func (st *rawStmt) int(i int, n int64) error {
	if rc := sqlite3.Xsqlite3_bind_int64(st.c.tls, st.p, int32(i), n); rc != sqlite3.SQLITE_OK {
		return st.c.err(rc)
	}
	return nil
}

// step runs the statement to its next row; row is false when it is done.
// After done or an error the statement is reset, ready to be bound again.
func (st *rawStmt) step() (row bool, err error) {
	switch rc := sqlite3.Xsqlite3_step(st.c.tls, st.p); rc {
	case sqlite3.SQLITE_ROW:
		return true, nil
	case sqlite3.SQLITE_DONE:
		st.reset()
		return false, nil
	default:
		err := st.c.err(rc)
		st.reset()
		return false, err
	}
}

// exec runs the statement to its end and reports how many rows it
// changed.
func (st *rawStmt) exec() (int, error) {
	for {
		row, err := st.step()
		if err != nil {
			return 0, err
		}
		if !row {
			return int(sqlite3.Xsqlite3_changes(st.c.tls, st.c.db)), nil
		}
	}
}

// reset ends a run of the statement and drops its arguments.
func (st *rawStmt) reset() {
	sqlite3.Xsqlite3_reset(st.c.tls, st.p)
	sqlite3.Xsqlite3_clear_bindings(st.c.tls, st.p)
}

// col is column i (from 0) of the current row, where SQLite holds it:
// valid until the statement steps or is reset.
func (st *rawStmt) col(i int) []byte {
	p := sqlite3.Xsqlite3_column_text(st.c.tls, st.p, int32(i))
	n := sqlite3.Xsqlite3_column_bytes(st.c.tls, st.p, int32(i))
	if p == 0 || n <= 0 {
		return nil
	}
	return unsafe.Slice((*byte)(cptr(p)), int(n))
}

// colInt is column i (from 0) of the current row as an integer.
func (st *rawStmt) colInt(i int) int64 {
	return sqlite3.Xsqlite3_column_int64(st.c.tls, st.p, int32(i))
}

// interned makes one string of the same bytes read again: the string
// made the first time. It holds at most internMax strings, and forgets
// them all when full.
type interned struct{ m map[string]string }

const internMax = 4096

func (t *interned) get(b []byte) string {
	if s, ok := t.m[string(b)]; ok {
		return s
	}
	if t.m == nil || len(t.m) >= internMax {
		t.m = make(map[string]string)
	}
	s := string(b)
	t.m[s] = s
	return s
}

// cptr is p, an address in SQLite's memory, as a pointer. That memory is
// the C library's (modernc.org/libc maps it itself), outside Go's heap,
// so that the collector neither follows nor moves it.
func cptr(p uintptr) unsafe.Pointer { return *(*unsafe.Pointer)(unsafe.Pointer(&p)) }
