package rawio

import (
	"net"
	"net/netip"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/testkit"
)

// udpFD is a non-blocking UDP socket on the loopback and its descriptor.
func udpFD(t *testing.T, network, addr string) (*net.UDPConn, int) {
	t.Helper()
	c, err := net.ListenUDP(network, net.UDPAddrFromAddrPort(netip.MustParseAddrPort(addr)))
	if err != nil {
		t.Skipf("%s %s: %v", network, addr, err)
	}
	t.Cleanup(func() { c.Close() })
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	rc.Control(func(f uintptr) { fd = int(f) })
	return c, fd
}

// recvWait reads one datagram from the non-blocking fd, waiting up to 5 s
// for it to arrive.
func recvWait(t *testing.T, fd int, b []byte) (int, netip.AddrPort) {
	t.Helper()
	var n int
	var from netip.AddrPort
	var e syscall.Errno
	testkit.WaitFor(t, 5*time.Second, "a datagram", func() bool {
		n, from, e = Recvfrom(fd, b)
		return e != EAGAIN
	})
	if e != 0 {
		t.Fatalf("recvfrom: want a datagram, have %v", e)
	}
	return n, from
}

func TestSendtoRecvfrom(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, network, a, b string
		v6                  bool
		want                string // the sender as the receiver sees it
	}{
		{"ipv4", "udp4", "127.0.0.1:0", "127.0.0.1:0", false, "127.0.0.1"},
		{"ipv6", "udp6", "[::1]:0", "[::1]:0", true, "::1"},
		// An IPv4 peer of a dual-stack socket arrives mapped and is unmapped.
		{"v4 peer of a v6 socket", "udp", "[::]:0", "127.0.0.1:0", true, "127.0.0.1"},
	} {
		t.Run(c.name, func(t *testing.T) {
			a, afd := udpFD(t, c.network, c.a)
			bn := "udp4"
			if c.network == "udp6" {
				bn = "udp6"
			}
			b, bfd := udpFD(t, bn, c.b)
			to := netip.AddrPortFrom(netip.MustParseAddr(c.want), b.LocalAddr().(*net.UDPAddr).AddrPort().Port())
			sa := MakeSockaddr(to, c.v6)
			if n, e := Sendto(afd, []byte("OPTIONS"), &sa); e != 0 || n != 7 {
				t.Fatalf("sendto %v: want 7, have %d (%v)", to, n, e)
			}
			buf := make([]byte, 64)
			n, from := recvWait(t, bfd, buf)
			if string(buf[:n]) != "OPTIONS" {
				t.Errorf("want OPTIONS, have %q", buf[:n])
			}
			wantFrom := netip.AddrPortFrom(netip.MustParseAddr(c.want), a.LocalAddr().(*net.UDPAddr).AddrPort().Port())
			if from != wantFrom {
				t.Errorf("want from %v, have %v", wantFrom, from)
			}
		})
	}
}

func TestRecvfromEmptySocket(t *testing.T) {
	t.Parallel()
	_, fd := udpFD(t, "udp4", "127.0.0.1:0")
	if _, _, e := Recvfrom(fd, make([]byte, 16)); e != EAGAIN {
		t.Errorf("want EAGAIN, have %v", e)
	}
}

func TestSendtoWrongFamily(t *testing.T) {
	t.Parallel()
	_, fd := udpFD(t, "udp4", "127.0.0.1:0")
	sa := MakeSockaddr(netip.MustParseAddrPort("[::1]:5060"), false)
	if _, e := Sendto(fd, []byte("x"), &sa); e == 0 {
		t.Error("want an error sending to an IPv6 address from an IPv4 socket, have none")
	}
}

func seqpacket(t *testing.T) (int, int) {
	t.Helper()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Close(fds[0]); syscall.Close(fds[1]) })
	return fds[0], fds[1]
}

func TestWriteRecvmsgKeepsFrames(t *testing.T) {
	t.Parallel()
	a, b := seqpacket(t)
	for _, f := range []string{"first", "", "third frame"} {
		if n, e := Write(a, []byte(f)); e != 0 || n != len(f) {
			t.Fatalf("write %q: have %d (%v)", f, n, e)
		}
	}
	buf, oob := make([]byte, 64), make([]byte, 64)
	for _, want := range []string{"first", "", "third frame"} {
		n, oobn, e := Recvmsg(b, buf, oob)
		if e != 0 || string(buf[:n]) != want || oobn != 0 {
			t.Errorf("want frame %q, have %q (oob %d, %v)", want, buf[:n], oobn, e)
		}
	}
	if _, _, e := Recvmsg(b, buf, oob); e != EAGAIN {
		t.Errorf("want EAGAIN on an empty channel, have %v", e)
	}
}

func TestRecvmsgPassesDescriptorCloseOnExec(t *testing.T) {
	t.Parallel()
	a, b := seqpacket(t)
	f, err := os.CreateTemp(t.TempDir(), "passed")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := syscall.Sendmsg(a, []byte{'c'}, syscall.UnixRights(int(f.Fd())), nil, 0); err != nil {
		t.Fatal(err)
	}
	_, passed := recvPassed(t, b)
	defer syscall.Close(passed)
	flags, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(passed), syscall.F_GETFD, 0)
	if e != 0 || flags&syscall.FD_CLOEXEC == 0 {
		t.Errorf("want the passed descriptor close-on-exec, have flags %#x (%v)", flags, e)
	}
}

// recvPassed reads one frame with one passed descriptor from fd.
func recvPassed(t *testing.T, fd int) ([]byte, int) {
	t.Helper()
	buf, oob := make([]byte, 8), make([]byte, syscall.CmsgSpace(4))
	n, oobn, e := Recvmsg(fd, buf, oob)
	if e != 0 || oobn == 0 {
		t.Fatalf("want a frame and a control message, have %d, %d (%v)", n, oobn, e)
	}
	msgs, err := syscall.ParseSocketControlMessage(oob[:oobn])
	if err != nil || len(msgs) != 1 {
		t.Fatalf("control message: %v (%d)", err, len(msgs))
	}
	fds, err := syscall.ParseUnixRights(&msgs[0])
	if err != nil || len(fds) != 1 {
		t.Fatalf("rights: %v (%d)", err, len(fds))
	}
	return buf[:n], fds[0]
}

// Not parallel: it measures the process's allocations.
func TestNoAllocations(t *testing.T) {
	a, afd := udpFD(t, "udp4", "127.0.0.1:0")
	sa := MakeSockaddr(a.LocalAddr().(*net.UDPAddr).AddrPort(), false)
	buf := make([]byte, 64)
	x, y := seqpacket(t)
	oob := make([]byte, 32)
	allocs := testing.AllocsPerRun(100, func() {
		Sendto(afd, []byte("x"), &sa)
		Recvfrom(afd, buf)
		Sendto(afd, []byte("x"), &sa)
		RecvmsgFrom(afd, buf, oob)
		Write(x, buf[:4])
		Recvmsg(y, buf, oob)
	})
	if allocs != 0 {
		t.Errorf("want 0 allocations per round, have %v", allocs)
	}
}

// A set inside another poller: once its member has been read empty,
// EpollPoll finds nothing and leaves the set quiet, and new data makes it
// ready again.
func TestEpollPoll(t *testing.T) {
	t.Parallel()
	a, b := seqpacket(t)
	ep, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	defer syscall.Close(ep)
	if err := syscall.EpollCtl(ep, syscall.EPOLL_CTL_ADD, b, &syscall.EpollEvent{Events: syscall.EPOLLIN, Fd: int32(b)}); err != nil {
		t.Fatal(err)
	}
	ev := make([]syscall.EpollEvent, 4)
	if n, e := EpollPoll(ep, ev); e != 0 || n != 0 {
		t.Fatalf("empty set: want 0 ready, have %d (%v)", n, e)
	}
	Write(a, []byte("frame"))
	if n, e := EpollPoll(ep, ev); e != 0 || n != 1 || ev[0].Fd != int32(b) {
		t.Fatalf("after a write: want the member ready, have %d (%v) %+v", n, e, ev[:n])
	}
	buf := make([]byte, 16)
	if _, _, e := Recvmsg(b, buf, nil); e != 0 {
		t.Fatal(e)
	}
	if n, e := EpollPoll(ep, ev); e != 0 || n != 0 {
		t.Errorf("read empty: want 0 ready, have %d (%v)", n, e)
	}
}

func TestRecvmsgFrom(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name, network, addr string
	}{
		{"ipv4", "udp4", "127.0.0.1:0"},
		// An IPv4 peer of a dual-stack socket arrives mapped and is unmapped.
		{"v4 peer of a v6 socket", "udp", "[::]:0"},
	} {
		t.Run(c.name, func(t *testing.T) {
			b, bfd := udpFD(t, c.network, c.addr)
			if err := syscall.SetsockoptInt(bfd, syscall.SOL_SOCKET, syscall.SO_TIMESTAMPNS, 1); err != nil {
				t.Fatal(err)
			}
			a, afd := udpFD(t, "udp4", "127.0.0.1:0")
			to := netip.AddrPortFrom(netip.MustParseAddr("127.0.0.1"), b.LocalAddr().(*net.UDPAddr).AddrPort().Port())
			sa := MakeSockaddr(to, false)
			if _, e := Sendto(afd, []byte("INVITE"), &sa); e != 0 {
				t.Fatal(e)
			}
			buf, oob := make([]byte, 64), make([]byte, 64)
			var (
				n, oobn int
				from    netip.AddrPort
				e       syscall.Errno
			)
			testkit.WaitFor(t, 5*time.Second, "a datagram", func() bool {
				n, oobn, from, e = RecvmsgFrom(bfd, buf, oob)
				return e != EAGAIN
			})
			if e != 0 || string(buf[:n]) != "INVITE" {
				t.Fatalf("want INVITE, have %q (%v)", buf[:n], e)
			}
			if want := a.LocalAddr().(*net.UDPAddr).AddrPort(); from != want {
				t.Errorf("want from %v, have %v", want, from)
			}
			// The timestamp asked for comes as a control message.
			if oobn == 0 {
				t.Error("want a control message, have none")
			}
			if _, _, _, e := RecvmsgFrom(bfd, buf, oob); e != EAGAIN {
				t.Errorf("want EAGAIN on an empty socket, have %v", e)
			}
		})
	}
}

// SocketMemory counts a queued datagram against the buffer (UDP frees
// read datagrams in batches, so what is read is not checked).
func TestSocketMemory(t *testing.T) {
	c, fd := udpFD(t, "udp4", "127.0.0.1:0")
	queued, size, e := SocketMemory(fd)
	if e != 0 || queued != 0 || size == 0 {
		t.Fatalf("an empty socket: want 0 queued of a buffer, have %d of %d (%v)", queued, size, e)
	}
	if _, err := c.WriteToUDP(make([]byte, 100), c.LocalAddr().(*net.UDPAddr)); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 5*time.Second, "the datagram counted", func() bool {
		queued, _, e = SocketMemory(fd)
		return e != 0 || queued >= 100
	})
	if e != 0 {
		t.Fatalf("SO_MEMINFO: %v", e)
	}
	recvWait(t, fd, make([]byte, 200))
	if _, _, e := SocketMemory(-1); e == 0 {
		t.Fatal("a bad descriptor: want an error")
	}
}

func TestPread(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "pread")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.WriteString("MemTotal: 1000 kB\n"); err != nil {
		t.Fatal(err)
	}
	fd := int(f.Fd())
	b := make([]byte, 64)
	// Twice from the start: the offset is the call's, not the file's.
	for range 2 {
		n, e := Pread(fd, b, 0)
		if e != 0 || string(b[:n]) != "MemTotal: 1000 kB\n" {
			t.Fatalf("want the file, have %q (%v)", b[:n], e)
		}
	}
	if n, e := Pread(fd, b, 10); e != 0 || string(b[:n]) != "1000 kB\n" {
		t.Fatalf("from offset 10: want the rest, have %q (%v)", b[:n], e)
	}
	if _, e := Pread(-1, b, 0); e != syscall.EBADF {
		t.Fatalf("a bad descriptor: want EBADF, have %v", e)
	}
}
