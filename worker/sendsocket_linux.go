package worker

import (
	"errors"
	"net"
	"net/netip"
	"syscall"
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
	// batch, when the worker's loop batches this socket's sends (batchSends),
	// holds the responses sent since the loop last read its sources: they
	// leave in one sendmmsg with the next request sent, or as the loop is
	// about to read or wait again.
	// A request is never held: its sender acts on its error (another
	// destination, a reply to the caller), and the kernel reports a
	// datagram's error only when it is the first of a call.
	batch *rawio.SendBatch
	// lost is told of a held response the kernel would not send.
	lost func(to netip.AddrPort, err error)
}

// sendBatch is how many responses a socket holds at most, and in how many
// bytes: a wake-up's worth at thousands of calls a second, the loop reading
// directBatch datagrams at a time.
const (
	sendBatch      = 16
	sendBatchBytes = 32 << 10
)

// batchSends makes s hold its responses until flush, or until a request
// is sent; lost is told of one the kernel would not send.
func (s *sendSocket) batchSends(lost func(netip.AddrPort, error)) {
	s.batch = rawio.NewSendBatch(sendBatch, sendBatchBytes)
	s.lost = lost
}

// isResponse says whether b is a SIP response: a status line begins with
// the protocol, a request line with its method.
func isResponse(b []byte) bool { return len(b) >= 4 && string(b[:4]) == "SIP/" }

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

// WriteToUDPAddrPort sends b to ap without allocating; a response, when
// s holds its responses, leaves at the next request or flush.
func (s *sendSocket) WriteToUDPAddrPort(b []byte, ap netip.AddrPort) (int, error) {
	sa := rawio.MakeSockaddr(ap, s.local.IP.To4() == nil)
	if s.batch != nil {
		switch {
		case isResponse(b):
			if s.batch.Add(b, &sa) {
				return len(b), nil
			}
			s.flush()
			if s.batch.Add(b, &sa) {
				return len(b), nil
			}
		case s.batch.Len() > 0:
			// The request leaves last, after the responses held, in the
			// same call; its error is its own.
			if s.batch.Add(b, &sa) {
				if e := s.send(true); e != 0 {
					return 0, &net.OpError{Op: "write", Net: "udp", Addr: net.UDPAddrFromAddrPort(ap), Err: e}
				}
				return len(b), nil
			}
			s.flush()
		}
	}
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
				waitWritable(s.fd)
				continue
			}
		}
		return 0, &net.OpError{Op: "write", Net: "udp", Addr: net.UDPAddrFromAddrPort(ap), Err: e}
	}
}

// flush sends the responses s holds; s may be nil.
func (s *sendSocket) flush() {
	if s != nil && s.batch != nil && s.batch.Len() > 0 {
		s.send(false)
	}
}

// send sends what the batch holds, in order, and empties it. The error of
// its last datagram is returned when last says the caller wants it (a
// request's); any other datagram's goes to s.lost.
func (s *sendSocket) send(last bool) syscall.Errno {
	var lastErr syscall.Errno
	n := s.batch.Len()
	for from, tries := 0, 0; from < n; {
		k, e := rawio.Sendmmsg(s.fd, s.batch, from)
		switch e {
		case 0:
			// Each datagram has its own tries at a full buffer.
			from, tries = from+k, 0
			continue
		case rawio.EINTR:
			continue
		case rawio.EAGAIN:
			if tries < 100 {
				tries++
				waitWritable(s.fd)
				continue
			}
		}
		if last && from == n-1 {
			lastErr = e
		} else if s.lost != nil {
			s.lost(s.batch.To(from), e)
		}
		from, tries = from+1, 0
	}
	s.batch.Reset()
	return lastErr
}

// waitWritable waits, 10 ms at most, for fd to have room to send.
func waitWritable(fd int) {
	unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLOUT}}, 10)
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
