package wire

import (
	"io"
	"net"
	"syscall"

	"github.com/sipvisor/sipvisor/internal/rawio"
)

// ControlConn is a control channel (SEQPACKET), either end, read and written
// through the network poller with rawio's calls. Both ends wake for every
// echo and every call (a REGISTER's save is one), and a read or write
// through net.Conn woke the runtime's monitor thread each time; see package
// rawio.
type ControlConn struct {
	*net.UnixConn // Close, deadlines, addresses
	rc            syscall.RawConn
}

// NewControlConn wraps one end of the control channel.
func NewControlConn(c *net.UnixConn) (*ControlConn, error) {
	rc, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	return &ControlConn{UnixConn: c, rc: rc}, nil
}

// Read reads one frame; a frame of 0 bytes is the peer's close.
func (f *ControlConn) Read(b []byte) (int, error) {
	var (
		n int
		e syscall.Errno
	)
	err := f.rc.Read(func(fd uintptr) bool {
		n, _, e = rawio.Recvmsg(int(fd), b, nil)
		return e != rawio.EAGAIN && e != rawio.EINTR
	})
	switch {
	case err != nil:
		return 0, err
	case e != 0:
		return 0, &net.OpError{Op: "read", Net: "unixpacket", Err: e}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

// Write writes b as one frame, waiting for room if the channel is full.
func (f *ControlConn) Write(b []byte) (int, error) {
	var (
		n int
		e syscall.Errno
	)
	err := f.rc.Write(func(fd uintptr) bool {
		n, e = rawio.Write(int(fd), b)
		return e != rawio.EAGAIN && e != rawio.EINTR
	})
	switch {
	case err != nil:
		return 0, err
	case e != 0:
		return 0, &net.OpError{Op: "write", Net: "unixpacket", Err: e}
	}
	return n, nil
}
