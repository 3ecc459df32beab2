// Package rawio makes the socket calls of the message path — read a datagram,
// send one, write or read a frame — on non-blocking descriptors, without
// going through the Go scheduler's system-call hooks.
//
// syscall.Syscall brackets every call with entersyscall and exitsyscall, so
// that the runtime can give the thread's P to another thread if the call
// blocks. The first such call after the process has been idle also wakes the
// runtime's monitor thread (sysmon), which then polls every 20 µs until the
// process is idle again. A process that handles one message per wake-up, as
// every sipvisor process does at moderate rates, paid that on every message:
// traced on the front door refusing 200 sessions a second, a futex wake and
// two to four 20 µs sleeps of the monitor per datagram, 5.5 context switches
// per refused session where the datagrams themselves need two.
//
// A call on a non-blocking descriptor returns at once, so there is nothing to
// hand off: RawSyscall is enough, and the monitor sleeps on. Every function
// here but EpollWait is for non-blocking descriptors only; on a blocking one
// it would stall its thread, and with it a P, for as long as the call blocks.
// EpollWait does that on purpose, for a caller that has nothing else to run.
package rawio

import (
	"net/netip"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// Errors the callers test for.
const (
	EAGAIN = syscall.EAGAIN
	EINTR  = syscall.EINTR
)

// Sockaddr is a socket address in the kernel's form, built once per
// destination without allocating.
type Sockaddr struct {
	raw  syscall.RawSockaddrInet6 // large enough for either family
	size uintptr
}

// MakeSockaddr is ap as a socket of family v6 (an AF_INET6 socket) or not
// must be given it: an IPv6 socket reaches IPv4 peers through mapped
// addresses.
func MakeSockaddr(ap netip.AddrPort, v6 bool) Sockaddr {
	var s Sockaddr
	port := ap.Port()
	// The port is in network byte order in memory, whatever the machine's.
	nport := [2]byte{byte(port >> 8), byte(port)}
	a := ap.Addr()
	if (a.Is4() || a.Is4In6()) && !v6 {
		sa := (*syscall.RawSockaddrInet4)(unsafe.Pointer(&s.raw))
		sa.Family = syscall.AF_INET
		*(*[2]byte)(unsafe.Pointer(&sa.Port)) = nport
		sa.Addr = a.Unmap().As4()
		s.size = unsafe.Sizeof(*sa)
		return s
	}
	s.raw.Family = syscall.AF_INET6
	*(*[2]byte)(unsafe.Pointer(&s.raw.Port)) = nport
	s.raw.Addr = a.As16()
	s.size = unsafe.Sizeof(s.raw)
	return s
}

// AddrPort is the address s names, unmapped.
func (s *Sockaddr) AddrPort() netip.AddrPort {
	if s.raw.Family == syscall.AF_INET {
		p := (*syscall.RawSockaddrInet4)(unsafe.Pointer(&s.raw))
		return netip.AddrPortFrom(netip.AddrFrom4(p.Addr), port(p.Port))
	}
	return netip.AddrPortFrom(netip.AddrFrom16(s.raw.Addr).Unmap(), port(s.raw.Port))
}

// Sendto sends b to the address on fd.
func Sendto(fd int, b []byte, to *Sockaddr) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_SENDTO, uintptr(fd), uintptr(bufPtr(b)), uintptr(len(b)),
		syscall.MSG_DONTWAIT, uintptr(unsafe.Pointer(&to.raw)), to.size)
	return int(n), e
}

// Recvfrom reads one datagram into b and says where it came from. IPv4
// peers of an IPv6 socket come as mapped addresses, unmapped here so that
// they compare equal to the same peer on an IPv4 socket.
func Recvfrom(fd int, b []byte) (int, netip.AddrPort, syscall.Errno) {
	var (
		sa   syscall.RawSockaddrAny
		size = uint32(unsafe.Sizeof(sa))
	)
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(bufPtr(b)), uintptr(len(b)),
		syscall.MSG_DONTWAIT, uintptr(unsafe.Pointer(&sa)), uintptr(unsafe.Pointer(&size)))
	if e != 0 {
		return 0, netip.AddrPort{}, e
	}
	return int(n), addrPort(&sa), 0
}

func addrPort(sa *syscall.RawSockaddrAny) netip.AddrPort {
	switch sa.Addr.Family {
	case syscall.AF_INET:
		p := (*syscall.RawSockaddrInet4)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom4(p.Addr), port(p.Port))
	case syscall.AF_INET6:
		p := (*syscall.RawSockaddrInet6)(unsafe.Pointer(sa))
		return netip.AddrPortFrom(netip.AddrFrom16(p.Addr).Unmap(), port(p.Port))
	}
	return netip.AddrPort{}
}

// port reads a port kept in network byte order.
func port(p uint16) uint16 {
	b := (*[2]byte)(unsafe.Pointer(&p))
	return uint16(b[0])<<8 | uint16(b[1])
}

// Write writes b to fd: one frame on a SEQPACKET socket.
func Write(fd int, b []byte) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall(syscall.SYS_WRITE, uintptr(fd), uintptr(bufPtr(b)), uintptr(len(b)))
	return int(n), e
}

// Recvmsg reads one frame into p and any control message (passed
// descriptors) into oob; passed descriptors are made close-on-exec.
func Recvmsg(fd int, p, oob []byte) (n, oobn int, e syscall.Errno) {
	var iov syscall.Iovec
	iov.Base = (*byte)(bufPtr(p))
	iov.SetLen(len(p))
	var msg syscall.Msghdr
	msg.Iov = &iov
	msg.Iovlen = 1
	if len(oob) > 0 {
		msg.Control = &oob[0]
		msg.SetControllen(len(oob))
	}
	r, _, e := syscall.RawSyscall(syscall.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), syscall.MSG_CMSG_CLOEXEC)
	if e != 0 {
		return 0, 0, e
	}
	return int(r), int(msg.Controllen), 0
}

// RecvmsgFrom reads one datagram into p and its control messages (such as
// a receive timestamp) into oob, and says where it came from, unmapped as
// Recvfrom does.
func RecvmsgFrom(fd int, p, oob []byte) (n, oobn int, from netip.AddrPort, e syscall.Errno) {
	var sa syscall.RawSockaddrAny
	var iov syscall.Iovec
	iov.Base = (*byte)(bufPtr(p))
	iov.SetLen(len(p))
	var msg syscall.Msghdr
	msg.Name = (*byte)(unsafe.Pointer(&sa))
	msg.Namelen = uint32(unsafe.Sizeof(sa))
	msg.Iov = &iov
	msg.Iovlen = 1
	if len(oob) > 0 {
		msg.Control = &oob[0]
		msg.SetControllen(len(oob))
	}
	r, _, e := syscall.RawSyscall(syscall.SYS_RECVMSG, uintptr(fd), uintptr(unsafe.Pointer(&msg)), 0)
	if e != 0 {
		return 0, 0, netip.AddrPort{}, e
	}
	return int(r), int(msg.Controllen), addrPort(&sa), 0
}

// EpollPoll reports the ready descriptors of an epoll set without waiting.
// It also clears the set's list of descriptors that were ready and no longer
// are, without which a set inside another poller would look readable
// forever and never signal again.
func EpollPoll(epfd int, events []syscall.EpollEvent) (int, syscall.Errno) {
	var p unsafe.Pointer
	if len(events) > 0 {
		p = unsafe.Pointer(&events[0])
	}
	n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(p), uintptr(len(events)), 0, 0, 0)
	return int(n), e
}

// EpollWait waits in the epoll set epfd until a descriptor of it is ready
// or timeout (nanoseconds) has passed, and reports the ready ones; a
// timeout of 0 or less only polls. Unlike everything else here it blocks,
// and on purpose holds the thread's P while it does: a process whose one
// goroutine of work waits in it spares the scheduler's park and wake-up
// and the poll the scheduler makes before it sleeps. A signal ends the
// wait early (EINTR): the runtime's preemption and stop-the-world signal
// the thread, and the caller must return to Go code, where the runtime
// takes the P when it wants it.
func EpollWait(epfd int, events []syscall.EpollEvent, timeout int64) (int, syscall.Errno) {
	if timeout <= 0 {
		return EpollPoll(epfd, events)
	}
	var p unsafe.Pointer
	if len(events) > 0 {
		p = unsafe.Pointer(&events[0])
	}
	if !noPwait2.Load() {
		ts := unix.NsecToTimespec(timeout)
		n, _, e := syscall.RawSyscall6(unix.SYS_EPOLL_PWAIT2, uintptr(epfd), uintptr(p), uintptr(len(events)), uintptr(unsafe.Pointer(&ts)), 0, 0)
		if e != syscall.ENOSYS {
			return int(n), e
		}
		noPwait2.Store(true)
	}
	// Kernels before 5.11 count the timeout in milliseconds, rounded up
	// so that the wait does not end before its time.
	ms := (timeout + 999_999) / 1_000_000
	n, _, e := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(p), uintptr(len(events)), uintptr(ms), 0, 0)
	return int(n), e
}

// noPwait2 says the kernel has no epoll_pwait2.
var noPwait2 atomic.Bool

// SocketMemory is a socket's receive memory (SO_MEMINFO): the bytes its
// queued datagrams take (SK_MEMINFO_RMEM_ALLOC, kernel overhead included)
// and its receive buffer (SK_MEMINFO_RCVBUF).
func SocketMemory(fd int) (queued, size uint32, e syscall.Errno) {
	var mi [9]uint32 // SK_MEMINFO_VARS
	n := uint32(unsafe.Sizeof(mi))
	_, _, e = syscall.RawSyscall6(syscall.SYS_GETSOCKOPT, uintptr(fd), syscall.SOL_SOCKET, soMeminfo,
		uintptr(unsafe.Pointer(&mi[0])), uintptr(unsafe.Pointer(&n)), 0)
	if e == 0 && n < 8 {
		e = syscall.EINVAL
	}
	return mi[0], mi[1], e
}

// Pread reads from offset off of fd into b. For files the kernel answers
// at once, as procfs ones: the supervisor reads /proc/meminfo every cycle,
// and through syscall.Syscall that read was the one call of an idle
// supervisor's second that woke the monitor thread from its sleep (strace
// showed it then polling every 20 µs until the process was idle again).
func Pread(fd int, b []byte, off int64) (int, syscall.Errno) {
	n, _, e := syscall.RawSyscall6(syscall.SYS_PREAD64, uintptr(fd), uintptr(bufPtr(b)), uintptr(len(b)), uintptr(off), 0, 0)
	return int(n), e
}

// soMeminfo is SO_MEMINFO, which package syscall does not name.
const soMeminfo = 55

// bufPtr is where b's bytes are; a valid pointer even for an empty b, as the
// kernel reads nothing from it then.
func bufPtr(b []byte) unsafe.Pointer {
	if len(b) == 0 {
		return unsafe.Pointer(&zero)
	}
	return unsafe.Pointer(&b[0])
}

var zero byte
