package rawio

import (
	"io"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"
)

// Accept4 accepts one connection on the non-blocking listening socket fd:
// its descriptor, non-blocking and close-on-exec, and the peer's address,
// unmapped as Recvfrom's, with its zone if it is link-local.
func Accept4(fd int) (int, netip.AddrPort, syscall.Errno) {
	var (
		sa   syscall.RawSockaddrAny
		size = uint32(unsafe.Sizeof(sa))
	)
	nfd, _, e := syscall.RawSyscall6(syscall.SYS_ACCEPT4, uintptr(fd), uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&size)),
		syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0, 0)
	if e != 0 {
		return -1, netip.AddrPort{}, e
	}
	ap := addrPort(&sa)
	if sa.Addr.Family == syscall.AF_INET6 {
		p := (*syscall.RawSockaddrInet6)(unsafe.Pointer(&sa))
		if p.Scope_id != 0 && ap.Addr().Is6() {
			// A link-local peer: its zone is part of the address the
			// worker reports when the connection ends.
			if ifi, err := net.InterfaceByIndex(int(p.Scope_id)); err == nil {
				ap = netip.AddrPortFrom(ap.Addr().WithZone(ifi.Name), ap.Port())
			}
		}
	}
	return int(nfd), ap, 0
}

// SendFD sends b as one frame on the non-blocking SEQPACKET socket fd, with
// passed as a descriptor (SCM_RIGHTS). The control message is built on the
// stack: syscall.UnixRights allocates one per call.
func SendFD(fd int, b []byte, passed int) syscall.Errno {
	var oob [cmsgSpace4]byte
	h := (*syscall.Cmsghdr)(unsafe.Pointer(&oob[0]))
	h.Level = syscall.SOL_SOCKET
	h.Type = syscall.SCM_RIGHTS
	h.SetLen(syscall.CmsgLen(4))
	*(*int32)(unsafe.Pointer(&oob[syscall.CmsgLen(0)])) = int32(passed)
	var iov syscall.Iovec
	iov.Base = (*byte)(bufPtr(b))
	iov.SetLen(len(b))
	var msg syscall.Msghdr
	msg.Iov = &iov
	msg.Iovlen = 1
	msg.Control = &oob[0]
	msg.SetControllen(len(oob))
	_, _, e := syscall.RawSyscall(syscall.SYS_SENDMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), 0)
	return e
}

// cmsgSpace4 is syscall.CmsgSpace(4) on 64-bit Linux, as a constant for an
// array on the stack.
const cmsgSpace4 = 24

// Close closes fd, which must be a socket without SO_LINGER set (whose close
// never waits), and not in the runtime's poller.
func Close(fd int) syscall.Errno {
	_, _, e := syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0)
	return e
}

// Shutdown shuts both directions of the connected socket fd down: the peer
// gets a FIN whoever else holds a descriptor of it.
func Shutdown(fd int) syscall.Errno {
	_, _, e := syscall.RawSyscall(syscall.SYS_SHUTDOWN, uintptr(fd), syscall.SHUT_RDWR, 0)
	return e
}

// Sockname and Peername are fd's local and remote addresses, unmapped.
func Sockname(fd int) (netip.AddrPort, syscall.Errno) { return sockAddr(syscall.SYS_GETSOCKNAME, fd) }
func Peername(fd int) (netip.AddrPort, syscall.Errno) { return sockAddr(syscall.SYS_GETPEERNAME, fd) }

func sockAddr(call uintptr, fd int) (netip.AddrPort, syscall.Errno) {
	var (
		sa   syscall.RawSockaddrAny
		size = uint32(unsafe.Sizeof(sa))
	)
	_, _, e := syscall.RawSyscall(call, uintptr(fd), uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&size)))
	if e != 0 {
		return netip.AddrPort{}, e
	}
	return addrPort(&sa), 0
}

// SetNonblock puts fd in non-blocking mode if it is not.
func SetNonblock(fd int) syscall.Errno {
	flags, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFL, 0)
	if e != 0 || flags&syscall.O_NONBLOCK != 0 {
		return e
	}
	_, _, e = syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_SETFL, flags|syscall.O_NONBLOCK)
	return e
}

// Base is what a Stream takes from the connection or file it reads through:
// closing, deadlines and addresses.
type Base interface {
	Close() error
	LocalAddr() net.Addr
	RemoteAddr() net.Addr
	SetDeadline(t time.Time) error
	SetReadDeadline(t time.Time) error
	SetWriteDeadline(t time.Time) error
}

// Stream is a connected stream socket (TCP, under TLS too) read and written
// with this package's calls through its raw descriptor, rather than
// net.Conn's or os.File's: those bracket each call with the scheduler's
// system-call hooks. The descriptor is non-blocking, and the waits are the
// network poller's, deadlines included. One goroutine reads; writes take a
// lock.
type Stream struct {
	Base
	rc     syscall.RawConn
	wmu    sync.Mutex
	closed atomic.Bool
	// Each call's buffer and result, and the function the poller calls
	// with the descriptor, made once: a closure made per call would be an
	// allocation per message.
	rb, wb         []byte
	rn, wn         int
	re, we         syscall.Errno
	readFn, writeF func(uintptr) bool
}

// NewStream reads and writes rc's descriptor, closing and timing through b.
func NewStream(b Base, rc syscall.RawConn) *Stream {
	s := &Stream{Base: b, rc: rc}
	s.readFn, s.writeF = s.readFD, s.writeFD
	return s
}

func (s *Stream) readFD(fd uintptr) bool {
	for {
		s.rn, _, s.re = Recvmsg(int(fd), s.rb, nil)
		if s.re != EINTR {
			return s.re != EAGAIN
		}
	}
}

func (s *Stream) Read(b []byte) (int, error) {
	if s.closed.Load() {
		return 0, net.ErrClosed
	}
	if len(b) == 0 {
		return 0, nil
	}
	s.rb, s.rn, s.re = b, 0, 0
	err := s.rc.Read(s.readFn)
	n, e := s.rn, s.re
	s.rb = nil
	switch {
	case (err != nil || e != 0 || n == 0) && s.closed.Load():
		// Closed while it waited: woken by its base, or finding the
		// socket shut down (EOF), it says so alike.
		return 0, net.ErrClosed
	case err != nil:
		return 0, err
	case e != 0:
		return 0, &net.OpError{Op: "read", Net: "tcp", Source: s.LocalAddr(), Addr: s.RemoteAddr(), Err: os.NewSyscallError("recvmsg", e)}
	case n == 0:
		return 0, io.EOF
	}
	return n, nil
}

func (s *Stream) writeFD(fd uintptr) bool {
	for s.wn < len(s.wb) {
		k, e := Write(int(fd), s.wb[s.wn:])
		switch e {
		case 0:
			s.wn += k
		case EINTR:
		case EAGAIN:
			return false
		default:
			s.we = e
			return true
		}
	}
	return true
}

// Write writes all of b, waiting for room in the socket's buffer as
// net.Conn does, within the write deadline.
func (s *Stream) Write(b []byte) (int, error) {
	s.wmu.Lock()
	defer s.wmu.Unlock()
	if s.closed.Load() {
		return 0, net.ErrClosed
	}
	s.wb, s.wn, s.we = b, 0, 0
	err := s.rc.Write(s.writeF)
	n, e := s.wn, s.we
	s.wb = nil
	switch {
	case err != nil:
		return n, err
	case e != 0:
		return n, &net.OpError{Op: "write", Net: "tcp", Source: s.LocalAddr(), Addr: s.RemoteAddr(), Err: os.NewSyscallError("write", e)}
	}
	return n, nil
}

// Close ends the connection: its peer gets a FIN even if another process
// holds a copy of the descriptor (the supervisor does of every connection
// it hands over).
func (s *Stream) Close() error {
	if s.closed.Swap(true) {
		return net.ErrClosed
	}
	s.rc.Control(func(fd uintptr) { Shutdown(int(fd)) })
	return s.Base.Close()
}

// Release closes this process's descriptor only, leaving the connection
// to whoever holds another copy: a draining worker's hand-off.
func (s *Stream) Release() error {
	if s.closed.Swap(true) {
		return net.ErrClosed
	}
	return s.Base.Close()
}
