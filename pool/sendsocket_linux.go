package pool

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// sendSocket is a worker's handle on one of the supervisor's UDP sockets:
// it only sends. Wrapping the descriptor with net.FilePacketConn would
// register it with the worker's network poller, and since every process
// holding the socket then polls it, each datagram arriving for the
// supervisor would wake every worker for nothing.
type sendSocket struct {
	fd    int
	local *net.UDPAddr
}

var errSendOnly = errors.New("worker sockets only send: the supervisor reads them")

func newSendSocket(fd int) (*sendSocket, error) {
	sa, err := unix.Getsockname(fd)
	if err != nil {
		return nil, err
	}
	s := &sendSocket{fd: fd}
	switch a := sa.(type) {
	case *unix.SockaddrInet4:
		s.local = &net.UDPAddr{IP: net.IP(a.Addr[:]).To16(), Port: a.Port}
	case *unix.SockaddrInet6:
		s.local = &net.UDPAddr{IP: net.IP(a.Addr[:]), Port: a.Port}
	default:
		return nil, errors.New("not an IP socket")
	}
	return s, nil
}

// WriteToUDPAddrPort sends b to ap without allocating.
func (s *sendSocket) WriteToUDPAddrPort(b []byte, ap netip.AddrPort) (int, error) {
	var (
		ptr  unsafe.Pointer
		size uintptr
		sa4  unix.RawSockaddrInet4
		sa6  unix.RawSockaddrInet6
	)
	port := ap.Port()
	// The port is in network byte order in memory, whatever the machine's.
	nport := [2]byte{byte(port >> 8), byte(port)}
	if a := ap.Addr(); a.Is4() || a.Is4In6() {
		sa4.Family = unix.AF_INET
		*(*[2]byte)(unsafe.Pointer(&sa4.Port)) = nport
		sa4.Addr = a.Unmap().As4()
		if s.local.IP.To4() == nil {
			// An IPv6 socket reaches IPv4 peers through mapped addresses.
			sa6.Family = unix.AF_INET6
			sa6.Port = sa4.Port
			sa6.Addr = netip.AddrFrom4(sa4.Addr).As16()
			ptr, size = unsafe.Pointer(&sa6), unsafe.Sizeof(sa6)
		} else {
			ptr, size = unsafe.Pointer(&sa4), unsafe.Sizeof(sa4)
		}
	} else {
		sa6.Family = unix.AF_INET6
		*(*[2]byte)(unsafe.Pointer(&sa6.Port)) = nport
		sa6.Addr = a.As16()
		ptr, size = unsafe.Pointer(&sa6), unsafe.Sizeof(sa6)
	}
	var p unsafe.Pointer
	if len(b) > 0 {
		p = unsafe.Pointer(&b[0])
	}
	for tries := 0; ; tries++ {
		n, _, e := syscall.Syscall6(syscall.SYS_SENDTO, uintptr(s.fd), uintptr(p), uintptr(len(b)), 0, uintptr(ptr), size)
		switch e {
		case 0:
			return int(n), nil
		case unix.EINTR:
			continue
		case unix.EAGAIN:
			// The socket is the supervisor's and non-blocking; a full send
			// buffer empties in microseconds on loopback or a LAN.
			if tries < 100 {
				fds := []unix.PollFd{{Fd: int32(s.fd), Events: unix.POLLOUT}}
				unix.Poll(fds, 10)
				continue
			}
		}
		return 0, &net.OpError{Op: "write", Net: "udp", Addr: net.UDPAddrFromAddrPort(ap), Err: e}
	}
}

// WriteTo sends b to addr, a *net.UDPAddr.
func (s *sendSocket) WriteTo(b []byte, addr net.Addr) (int, error) {
	ua, ok := addr.(*net.UDPAddr)
	if !ok {
		return 0, errors.New("want a UDP address")
	}
	return s.WriteToUDPAddrPort(b, ua.AddrPort())
}

func (s *sendSocket) ReadFrom([]byte) (int, net.Addr, error) { return 0, nil, errSendOnly }
func (s *sendSocket) Close() error                           { return unix.Close(s.fd) }
func (s *sendSocket) LocalAddr() net.Addr                    { return s.local }
func (s *sendSocket) SetDeadline(time.Time) error            { return nil }
func (s *sendSocket) SetReadDeadline(time.Time) error        { return nil }
func (s *sendSocket) SetWriteDeadline(time.Time) error       { return nil }
