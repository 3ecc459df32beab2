package rawio

import (
	"errors"
	"io"
	"net"
	"net/netip"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// acceptOne listens on the loopback, dials it, and accepts the connection
// with Accept4: the dialer's end, the accepted descriptor and its peer.
func acceptOne(t *testing.T) (net.Conn, int, netip.AddrPort) {
	t.Helper()
	// A listener of its own: net's gives no RawConn to wait on.
	lfd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := syscall.Bind(lfd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Listen(lfd, 8); err != nil {
		t.Fatal(err)
	}
	lf := os.NewFile(uintptr(lfd), "listener")
	t.Cleanup(func() { lf.Close() })
	sa, _ := syscall.Getsockname(lfd)
	c, err := net.Dial("tcp4", net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	rc, err := lf.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var (
		fd   int
		peer netip.AddrPort
		e    syscall.Errno
	)
	if err := rc.Read(func(lfd uintptr) bool {
		fd, peer, e = Accept4(int(lfd))
		return e != EAGAIN
	}); err != nil || e != 0 {
		t.Fatalf("accept4: %v %v", err, e)
	}
	return c, fd, peer
}

func TestAccept4(t *testing.T) {
	t.Parallel()
	c, fd, peer := acceptOne(t)
	defer Close(fd)
	if want := c.LocalAddr().(*net.TCPAddr).AddrPort(); peer != want {
		t.Errorf("peer: want %v, have %v", want, peer)
	}
	for _, q := range []struct {
		cmd  int
		bit  uintptr
		what string
	}{{syscall.F_GETFL, syscall.O_NONBLOCK, "non-blocking"}, {syscall.F_GETFD, syscall.FD_CLOEXEC, "close-on-exec"}} {
		flags, _, e := syscall.RawSyscall(syscall.SYS_FCNTL, uintptr(fd), uintptr(q.cmd), 0)
		if e != 0 || flags&q.bit == 0 {
			t.Errorf("want the accepted descriptor %s, have flags %#x (%v)", q.what, flags, e)
		}
	}
	local, e := Sockname(fd)
	if want := c.RemoteAddr().(*net.TCPAddr).AddrPort(); e != 0 || local != want {
		t.Errorf("sockname: want %v, have %v (%v)", want, local, e)
	}
	remote, e := Peername(fd)
	if e != 0 || remote != peer {
		t.Errorf("peername: want %v, have %v (%v)", peer, remote, e)
	}
	if _, _, e := Accept4(fd); e != syscall.EINVAL {
		t.Errorf("accept4 on a connected socket: want EINVAL, have %v", e)
	}
}

func TestSendFD(t *testing.T) {
	t.Parallel()
	a, b := seqpacket(t)
	f, err := os.CreateTemp(t.TempDir(), "passed")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	f.WriteString("through the descriptor")
	if e := SendFD(a, []byte{'c'}, int(f.Fd())); e != 0 {
		t.Fatal(e)
	}
	frame, passed := recvPassed(t, b)
	if string(frame) != "c" {
		t.Errorf("want the frame c, have %q", frame)
	}
	got := os.NewFile(uintptr(passed), "got")
	defer got.Close()
	b2 := make([]byte, 64)
	k, _ := got.ReadAt(b2, 0)
	if string(b2[:k]) != "through the descriptor" {
		t.Errorf("the passed descriptor reads %q", b2[:k])
	}
	if e := SendFD(a, []byte{'c'}, 1<<20); e != syscall.EBADF {
		t.Errorf("a descriptor not open: want EBADF, have %v", e)
	}
}

// streamOf is fd read and written as a Stream whose base is a file.
func streamOf(t *testing.T, fd int) (*Stream, *os.File) {
	t.Helper()
	f := os.NewFile(uintptr(fd), "stream")
	rc, err := f.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return NewStream(fileBase{f}, rc), f
}

type fileBase struct{ *os.File }

func (fileBase) LocalAddr() net.Addr  { return nil }
func (fileBase) RemoteAddr() net.Addr { return nil }

func TestStream(t *testing.T) {
	t.Parallel()
	c, fd, _ := acceptOne(t)
	s, _ := streamOf(t, fd)
	if _, err := c.Write([]byte("INVITE")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 16)
	n, err := s.Read(buf)
	if err != nil || string(buf[:n]) != "INVITE" {
		t.Fatalf("read: want INVITE, have %q (%v)", buf[:n], err)
	}
	if _, err := s.Write([]byte("SIP/2.0 100")); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err = io.ReadFull(c, buf[:11])
	if err != nil || string(buf[:n]) != "SIP/2.0 100" {
		t.Fatalf("peer read: want the answer, have %q (%v)", buf[:n], err)
	}
	// A read deadline passes as net.Conn's does.
	s.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
	if _, err := s.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Errorf("want a timeout, have %v", err)
	}
	s.SetReadDeadline(time.Time{})
	// The peer's close is EOF.
	c.Close()
	if _, err := s.Read(buf); err != io.EOF {
		t.Errorf("want EOF after the peer's close, have %v", err)
	}
}

// Close ends the connection for the peer even while another descriptor of
// it stays open (the supervisor's copy), and ends a read that waits.
func TestStreamCloseShutsDown(t *testing.T) {
	t.Parallel()
	c, fd, _ := acceptOne(t)
	copyFD, err := syscall.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	defer Close(copyFD)
	s, f := streamOf(t, fd)
	read := make(chan error, 1)
	go func() {
		_, err := s.Read(make([]byte, 8))
		read <- err
	}()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	// The base is woken as a handed connection's is, by a deadline in the
	// past; the read, whether it waited yet or not, ends closed.
	f.SetDeadline(time.Unix(1, 0))
	select {
	case err := <-read:
		if !errors.Is(err, net.ErrClosed) {
			t.Errorf("want net.ErrClosed for the waiting read, have %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting read did not end")
	}
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := c.Read(make([]byte, 8)); err != io.EOF {
		t.Errorf("the peer: want EOF, have %v", err)
	}
	if _, err := s.Write([]byte("x")); !errors.Is(err, net.ErrClosed) {
		t.Errorf("write after close: want net.ErrClosed, have %v", err)
	}
}

// Release closes this descriptor only: the connection goes on through
// another.
func TestStreamReleaseKeepsTheConnection(t *testing.T) {
	t.Parallel()
	c, fd, _ := acceptOne(t)
	copyFD, err := syscall.Dup(fd)
	if err != nil {
		t.Fatal(err)
	}
	s, _ := streamOf(t, fd)
	if err := s.Release(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Write([]byte("BYE")); err != nil {
		t.Fatal(err)
	}
	other, _ := streamOf(t, copyFD)
	other.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 8)
	n, err := other.Read(buf)
	if err != nil || string(buf[:n]) != "BYE" {
		t.Errorf("the other descriptor: want BYE, have %q (%v)", buf[:n], err)
	}
}
