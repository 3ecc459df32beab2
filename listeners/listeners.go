// Package listeners parses SIP socket addresses, binds them, and moves the
// bound sockets between processes as inherited file descriptors.
//
// The supervisor binds every SIP socket once, before any worker exists, and
// holds it for its whole life: a worker that exits or is replaced never takes a
// socket with it, and a bind error stops start-up before anything is forked.
package listeners

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/sipvisor/sipvisor/internal/rawio"
	"golang.org/x/sys/unix"
)

// Addr is a SIP socket address such as udp:127.0.0.1:5060.
type Addr struct {
	Proto string // "udp", "tcp", "tls", "ws" or "wss"
	Host  string
	Port  int
}

// String renders the address as the config writes it.
func (a Addr) String() string {
	return a.Proto + ":" + net.JoinHostPort(a.Host, strconv.Itoa(a.Port))
}

// ParseAddr parses proto:host:port (IPv6 hosts in brackets).
func ParseAddr(s string) (Addr, error) {
	proto, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Addr{}, fmt.Errorf("socket %q: want proto:host:port", s)
	}
	proto = strings.ToLower(proto)
	if !Stream(proto) && proto != "udp" {
		return Addr{}, fmt.Errorf("socket %q: protocol %q is not udp, tcp, tls, ws or wss", s, proto)
	}
	host, port, err := net.SplitHostPort(rest)
	if err != nil {
		return Addr{}, fmt.Errorf("socket %q: %w", s, err)
	}
	p, err := strconv.Atoi(port)
	if err != nil || p < 0 || p > 65535 {
		return Addr{}, fmt.Errorf("socket %q: port %q is not a number from 0 to 65535", s, port)
	}
	return Addr{Proto: proto, Host: host, Port: p}, nil
}

// Stream reports whether proto's sockets take connections: tcp, tls, ws
// and wss all listen on TCP and are read by the TCP group.
func Stream(proto string) bool {
	return proto == "tcp" || proto == "tls" || proto == "ws" || proto == "wss"
}

// EnvBound names the environment variable in which the supervisor tells
// its workers every SIP socket it serves, as bound (FormatAddrs). A worker
// holds only the UDP sockets' descriptors, so it learns the TCP and TLS
// ports that a port 0 in the config left to the kernel from here alone, and
// it must advertise those (Via, Record-Route) and know them as its own.
const EnvBound = "SIPVISOR_BOUND"

// FormatAddrs writes addresses for EnvBound: comma-separated, as the config
// writes each.
func FormatAddrs(addrs []Addr) string {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		out[i] = a.String()
	}
	return strings.Join(out, ",")
}

// ParseAddrs reads what FormatAddrs wrote.
func ParseAddrs(s string) ([]Addr, error) {
	if s == "" {
		return nil, nil
	}
	var out []Addr
	for _, f := range strings.Split(s, ",") {
		a, err := ParseAddr(f)
		if err != nil {
			return nil, err
		}
		out = append(out, a)
	}
	return out, nil
}

// Socket is one bound SIP socket.
type Socket struct {
	// Addr is the configured address; Bound is the address actually bound
	// (differs when the configured port is 0).
	Addr  Addr
	Bound Addr
	// Exactly one of UDP and TCP is set; TLS and WebSocket sockets listen
	// on TCP (the worker that takes a connection does the handshakes).
	UDP *net.UDPConn
	TCP *net.TCPListener

	// accept is a copy of TCP's descriptor that Accept waits on in the
	// runtime's poller (a listener's own RawConn cannot wait); CloseStream
	// closes both.
	acceptMu sync.Mutex
	accept   *os.File
	closed   bool
}

// Name is how the socket is named to workers: the bound address.
func (s *Socket) Name() string { return s.Bound.String() }

// ReadBuffer is the receive buffer asked for on every UDP socket. Bursts of
// several thousand datagrams must fit while the front door is busy.
const ReadBuffer = 8 << 20

// Bind binds every address, in order. On any error it closes what it bound.
func Bind(addrs []Addr) ([]*Socket, error) { return BindUDPGroups(addrs, false) }

// BindUDPGroups is Bind, with each UDP socket made the first of an
// SO_REUSEPORT group when groups is set, so that workers can join it
// (JoinGroup) and read the port themselves. A port another socket holds
// is still an error, as without groups: before the group is bound, the
// address is bound once without SO_REUSEPORT, which fails when it is in
// use, whether the holder shares it or not; on port 0, that bind picks the
// port, so that the group joins no other's.
func BindUDPGroups(addrs []Addr, groups bool) ([]*Socket, error) {
	return BindFrom(addrs, groups, nil)
}

// BindFrom is BindUDPGroups, taking over instead of binding each address
// for which inherited returns a descriptor: the socket a previous
// sipvisor bound and passed on at an upgrade, so that not one datagram or
// connection waits for a bind. inherited may be nil.
func BindFrom(addrs []Addr, groups bool, inherited func(Addr) *os.File) ([]*Socket, error) {
	var out []*Socket
	fail := func(err error) ([]*Socket, error) {
		Close(out)
		return nil, err
	}
	for _, a := range addrs {
		s := &Socket{Addr: a}
		if inherited != nil {
			if f := inherited(a); f != nil {
				err := s.adopt(f)
				f.Close()
				if err != nil {
					return fail(fmt.Errorf("take over %s: %w", a, err))
				}
				out = append(out, s)
				continue
			}
		}
		hp := net.JoinHostPort(a.Host, strconv.Itoa(a.Port))
		switch a.Proto {
		case "udp":
			ua, err := net.ResolveUDPAddr("udp", hp)
			if err != nil {
				return fail(fmt.Errorf("bind %s: %w", a, err))
			}
			c, err := listenUDP(ua, groups)
			if err != nil {
				return fail(fmt.Errorf("bind %s: %w", a, err))
			}
			_ = c.SetReadBuffer(ReadBuffer)
			_ = c.SetWriteBuffer(ReadBuffer)
			pollReadsOnly(c)
			s.UDP = c
			s.Bound = boundAddr("udp", c.LocalAddr())
		case "tcp", "tls", "ws", "wss":
			ta, err := net.ResolveTCPAddr("tcp", hp)
			if err != nil {
				return fail(fmt.Errorf("bind %s: %w", a, err))
			}
			l, err := net.ListenTCP("tcp", ta)
			if err != nil {
				return fail(fmt.Errorf("bind %s: %w", a, err))
			}
			s.TCP = l
			s.Bound = boundAddr(a.Proto, l.Addr())
		default:
			return fail(fmt.Errorf("bind %s: unknown protocol", a))
		}
		out = append(out, s)
	}
	return out, nil
}

// pollReadsOnly keeps the network poller of the process that holds c (the
// SIP socket or a copy of it), the supervisor, from waking at each
// datagram sent on c: the door only reads c through the poller and sends
// raw, and workers send on the same socket (rawio.PollReadsOnly). Without
// it, over TLS, the supervisor woke twice a call for the TCP workers'
// relays. Where it cannot, the poller wakes as before, which costs time
// and loses nothing.
func pollReadsOnly(c syscall.Conn) {
	if rc, err := c.SyscallConn(); err == nil {
		rc.Control(func(fd uintptr) { _ = rawio.PollReadsOnly(int(fd)) })
	}
}

// adopt makes s of an inherited descriptor, which must be a socket of the
// kind s.Addr names.
func (s *Socket) adopt(f *os.File) error {
	if s.Addr.Proto == "udp" {
		pc, err := net.FilePacketConn(f)
		if err != nil {
			return err
		}
		c, ok := pc.(*net.UDPConn)
		if !ok {
			pc.Close()
			return fmt.Errorf("descriptor %s is not a UDP socket", f.Name())
		}
		pollReadsOnly(c)
		s.UDP = c
		s.Bound = boundAddr("udp", c.LocalAddr())
		return nil
	}
	l, err := net.FileListener(f)
	if err != nil {
		return err
	}
	tl, ok := l.(*net.TCPListener)
	if !ok {
		l.Close()
		return fmt.Errorf("descriptor %s is not a TCP listener", f.Name())
	}
	s.TCP = tl
	s.Bound = boundAddr(s.Addr.Proto, tl.Addr())
	return nil
}

// File duplicates the socket's descriptor, to pass the socket itself to
// another process.
func (s *Socket) File() (*os.File, error) {
	if s.UDP != nil {
		return s.UDP.File()
	}
	return s.TCP.File()
}

func listenUDP(ua *net.UDPAddr, group bool) (*net.UDPConn, error) {
	if !group {
		return net.ListenUDP("udp", ua)
	}
	// Port 0 is probed too, and the group bound on the port the probe was
	// given: the kernel's choice of a port for an SO_REUSEPORT socket
	// counts a port that another such socket of the same user holds as
	// free, and binding there joins that socket's group (another node's,
	// started on port 0 on the same host), whose program then places this
	// node's datagrams on that node's socket. A probe without SO_REUSEPORT
	// is given a port no socket holds.
	for tries := 1; ; tries++ {
		probe, err := net.ListenUDP("udp", ua)
		if err != nil {
			return nil, err
		}
		at := *ua
		at.Port = probe.LocalAddr().(*net.UDPAddr).Port
		probe.Close()
		c, err := listenReusePort(&at)
		if err != nil && ua.Port == 0 && tries < 3 && errors.Is(err, syscall.EADDRINUSE) {
			// Another socket took the probe's port in between: probe again.
			continue
		}
		return c, err
	}
}

func listenReusePort(ua *net.UDPAddr) (*net.UDPConn, error) {
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		if err := rc.Control(func(fd uintptr) {
			serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1)
		}); err != nil {
			return err
		}
		return serr
	}}
	pc, err := lc.ListenPacket(context.Background(), "udp", ua.String())
	if err != nil {
		return nil, err
	}
	return pc.(*net.UDPConn), nil
}

// JoinGroup binds one more socket of s's SO_REUSEPORT group (BindUDPGroups)
// and returns it as a file to pass to a worker. The kernel numbers a
// group's sockets in the order they join and moves the last into the place
// of one that closes, so a caller that keeps every member open for the
// group's life knows each one's index: s is 0, the n-th joined is n.
//
// The socket is made with raw system calls and left blocking, so that the
// file is not registered with the caller's network poller: the worker
// reads it, and a poller here would wake at every datagram it gets.
func JoinGroup(s *Socket) (*os.File, error) {
	if s.UDP == nil {
		return nil, fmt.Errorf("join %s: not a UDP socket", s.Name())
	}
	fail := func(err error) (*os.File, error) { return nil, fmt.Errorf("join %s: %w", s.Name(), err) }
	// The member is the first socket's twin: its family (a wildcard is an
	// IPv6 socket that takes IPv4 too), the same v6-only flag, the same
	// address.
	rc, err := s.UDP.SyscallConn()
	if err != nil {
		return fail(err)
	}
	var (
		sa             unix.Sockaddr
		family, v6only int
		qerr           error
	)
	if err := rc.Control(func(fd uintptr) {
		if sa, qerr = unix.Getsockname(int(fd)); qerr != nil {
			return
		}
		if family, qerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_DOMAIN); qerr != nil {
			return
		}
		if family == unix.AF_INET6 {
			v6only, qerr = unix.GetsockoptInt(int(fd), unix.IPPROTO_IPV6, unix.IPV6_V6ONLY)
		}
	}); err != nil {
		return fail(err)
	}
	if qerr != nil {
		return fail(qerr)
	}
	fd, err := unix.Socket(family, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, unix.IPPROTO_UDP)
	if err != nil {
		return fail(err)
	}
	opts := [][3]int{{unix.SOL_SOCKET, unix.SO_REUSEPORT, 1}}
	if family == unix.AF_INET6 {
		opts = append(opts, [3]int{unix.IPPROTO_IPV6, unix.IPV6_V6ONLY, v6only})
	}
	for _, o := range opts {
		if err := unix.SetsockoptInt(fd, o[0], o[1], o[2]); err != nil {
			unix.Close(fd)
			return fail(err)
		}
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, ReadBuffer)
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_SNDBUF, ReadBuffer)
	if err := unix.Bind(fd, sa); err != nil {
		unix.Close(fd)
		return fail(err)
	}
	return os.NewFile(uintptr(fd), "udp:"+s.Bound.String()), nil
}

func boundAddr(proto string, a net.Addr) Addr {
	ap, err := netip.ParseAddrPort(a.String())
	if err != nil {
		return Addr{Proto: proto, Host: a.String()}
	}
	return Addr{Proto: proto, Host: ap.Addr().Unmap().String(), Port: int(ap.Port())}
}

// Close closes every socket.
func Close(ss []*Socket) {
	for _, s := range ss {
		if s.UDP != nil {
			s.UDP.Close()
		}
		s.CloseStream()
	}
}

// CloseStream stops a stream socket's listening: TCP and the copy Accept
// waits on, which ends an Accept under way with net.ErrClosed.
func (s *Socket) CloseStream() {
	if s.TCP == nil {
		return
	}
	s.acceptMu.Lock()
	defer s.acceptMu.Unlock()
	s.closed = true
	s.TCP.Close()
	if s.accept != nil {
		s.accept.Close()
	}
}

// Accept accepts one connection on a stream socket by the system call:
// its descriptor (non-blocking, close-on-exec), which the caller owns, and
// the peer's address, IPv4-mapped addresses unmapped. A caller that only
// hands connections on (the supervisor) so spares what net's Accept does
// for a connection it would read itself: a registration in the runtime's
// poller, an address lookup and the socket options that SetAcceptOptions
// sets once on the listener instead. A connection reset before it was
// accepted is skipped; CloseStream ends the wait with net.ErrClosed.
func (s *Socket) Accept() (int, netip.AddrPort, error) {
	f, err := s.acceptFile()
	if err != nil {
		return -1, netip.AddrPort{}, err
	}
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, netip.AddrPort{}, err
	}
	for {
		var (
			nfd  int
			peer netip.AddrPort
			aerr syscall.Errno
		)
		// rawio's accept4: through the scheduler's hooks, the first call
		// after the supervisor was idle woke the runtime's monitor thread.
		err := rc.Read(func(fd uintptr) bool {
			for {
				nfd, peer, aerr = rawio.Accept4(int(fd))
				if aerr != rawio.EINTR {
					return aerr != rawio.EAGAIN
				}
			}
		})
		switch {
		case err != nil && s.isClosed():
			// A close after the copy was handed out ends the wait, or
			// the read before it, with the poller's "use of closed
			// file", which os translates for its own reads but not
			// for a raw connection's.
			return -1, netip.AddrPort{}, net.ErrClosed
		case errors.Is(err, os.ErrClosed):
			return -1, netip.AddrPort{}, net.ErrClosed
		case err != nil:
			return -1, netip.AddrPort{}, err
		case aerr == syscall.ECONNABORTED:
			continue
		case aerr != 0:
			return -1, netip.AddrPort{}, aerr
		}
		return nfd, peer, nil
	}
}

// isClosed says CloseStream was called.
func (s *Socket) isClosed() bool {
	s.acceptMu.Lock()
	defer s.acceptMu.Unlock()
	return s.closed
}

// acceptFile is the copy of TCP's descriptor Accept waits on, made at the
// first Accept.
func (s *Socket) acceptFile() (*os.File, error) {
	s.acceptMu.Lock()
	defer s.acceptMu.Unlock()
	if s.closed {
		return nil, net.ErrClosed
	}
	if s.accept == nil {
		rc, err := s.TCP.SyscallConn()
		if err != nil {
			return nil, err
		}
		// A copy made here, not by File, which would leave the socket
		// blocking: the copy shares the listener's non-blocking mode, so
		// NewFile registers it with the poller.
		nfd, derr := -1, error(nil)
		if err := rc.Control(func(fd uintptr) { nfd, derr = unix.FcntlInt(fd, unix.F_DUPFD_CLOEXEC, 0) }); err != nil {
			return nil, err
		}
		if derr != nil {
			return nil, derr
		}
		s.accept = os.NewFile(uintptr(nfd), "accept "+s.Name())
	}
	return s.accept, nil
}

// KeepAlive is the idle time before a connection's first keep-alive probe
// and between probes: net's default for the connections it accepts.
const KeepAlive = 15 * time.Second

// KeepAliveProbes is how many probes go unanswered before a connection is
// dropped (net's default, the system's).
const KeepAliveProbes = 9

// SetAcceptOptions sets on a stream socket's listener the options every
// connection it accepts inherits (Linux copies them from the listener):
// Nagle off, as a SIP message is written whole and a reply must not wait
// on an ACK, and keep-alive probes, as net's Accept sets on each.
func (s *Socket) SetAcceptOptions() error {
	rc, err := s.TCP.SyscallConn()
	if err != nil {
		return err
	}
	cerr := rc.Control(func(fd uintptr) {
		for _, o := range []struct{ level, name, v int }{
			{unix.IPPROTO_TCP, unix.TCP_NODELAY, 1},
			{unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
			{unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, int(KeepAlive / time.Second)},
			{unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, int(KeepAlive / time.Second)},
			{unix.IPPROTO_TCP, unix.TCP_KEEPCNT, KeepAliveProbes},
		} {
			if err = unix.SetsockoptInt(int(fd), o.level, o.name, o.v); err != nil {
				return
			}
		}
	})
	if cerr != nil {
		return cerr
	}
	return err
}

// Files duplicates the UDP sockets' descriptors for a child process, in order,
// with their names. TCP listeners stay with the supervisor: it accepts and
// hands each connection over, so no worker ever accepts.
func Files(ss []*Socket) (files []*os.File, names []string, err error) {
	for _, s := range ss {
		if s.UDP == nil {
			continue
		}
		f, err := s.UDP.File()
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, nil, fmt.Errorf("export %s: %w", s.Name(), err)
		}
		// The copy is a file of the poller too, kept for the server's
		// life: the workers' sends on it would wake the poller as on s.UDP.
		pollReadsOnly(f)
		files = append(files, f)
		names = append(names, s.Name())
	}
	return files, names, nil
}

// FromFiles rebuilds inherited UDP sockets in a worker.
func FromFiles(names []string, files []*os.File) ([]net.PacketConn, error) {
	if len(names) != len(files) {
		return nil, errors.New("import sockets: names and descriptors differ in number")
	}
	out := make([]net.PacketConn, 0, len(files))
	for i, f := range files {
		c, err := net.FilePacketConn(f)
		f.Close()
		if err != nil {
			for _, c := range out {
				c.Close()
			}
			return nil, fmt.Errorf("import %s: %w", names[i], err)
		}
		out = append(out, c)
	}
	return out, nil
}
