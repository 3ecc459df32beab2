package supervisor

import (
	"errors"
	"syscall"

	"github.com/sipvisor/sipvisor/internal/rawio"
)

// connCopy is the supervisor's copy of the descriptor of a connection a
// worker reads: what it hands to another worker when that one drains, or
// to the next generation at an upgrade. The supervisor never reads or
// writes it, so it stays out of the runtime's poller: a registered copy
// shares the socket's edge-triggered readiness with the worker's, and
// would wake the supervisor at every segment the worker reads or writes
// on the connection, a few times a call.
type connCopy struct{ fd int }

// errConnCopy: a connCopy is never read or written.
var errConnCopy = errors.New("a connection's copy is not for reading or writing")

// SyscallConn lets the copy be sent with SCM_RIGHTS (pool.Worker's
// sendFile, the upgrade's link), which only calls Control.
func (c *connCopy) SyscallConn() (syscall.RawConn, error) { return c, nil }

func (c *connCopy) Control(f func(fd uintptr)) error {
	if c.fd < 0 {
		return errConnCopy
	}
	f(uintptr(c.fd))
	return nil
}

func (c *connCopy) Read(func(fd uintptr) bool) error  { return errConnCopy }
func (c *connCopy) Write(func(fd uintptr) bool) error { return errConnCopy }

// Close closes the copy; the worker's descriptor stays open.
func (c *connCopy) Close() error {
	if c.fd < 0 {
		return nil
	}
	// rawio's close, not through the scheduler's hooks: it would wake the
	// runtime's monitor thread once a connection.
	e := rawio.Close(c.fd)
	c.fd = -1
	if e != 0 {
		return e
	}
	return nil
}
