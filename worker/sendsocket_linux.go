package worker

import (
	"errors"
	"net"
	"net/netip"
	"time"

	"github.com/sipvisor/sipvisor/internal/rawio"
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

// replyBuffer is the receive buffer asked for on a reply socket: a worker's
// share of a burst of responses.
const replyBuffer = 2 << 20

// bindReplySocket binds a non-blocking UDP socket on ip, port chosen by the
// kernel, that this process alone holds.
func bindReplySocket(ip net.IP) (*sendSocket, error) {
	var (
		fd  int
		err error
		sa  unix.Sockaddr
	)
	if ip4 := ip.To4(); ip4 != nil {
		fd, err = unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		sa = &unix.SockaddrInet4{Addr: [4]byte(ip4)}
	} else {
		fd, err = unix.Socket(unix.AF_INET6, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
		sa = &unix.SockaddrInet6{Addr: [16]byte(ip.To16())}
	}
	if err != nil {
		return nil, err
	}
	// As large as the kernel allows; a smaller buffer still works.
	unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, replyBuffer)
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return nil, err
	}
	s, err := newSendSocket(fd)
	if err != nil {
		unix.Close(fd)
		return nil, err
	}
	return s, nil
}

// WriteToUDPAddrPort sends b to ap without allocating.
func (s *sendSocket) WriteToUDPAddrPort(b []byte, ap netip.AddrPort) (int, error) {
	sa := rawio.MakeSockaddr(ap, s.local.IP.To4() == nil)
	for tries := 0; ; tries++ {
		n, e := rawio.Sendto(s.fd, b, &sa)
		switch e {
		case 0:
			return n, nil
		case rawio.EINTR:
			continue
		case rawio.EAGAIN:
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
