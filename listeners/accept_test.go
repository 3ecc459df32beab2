package listeners

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/testkit"
	"golang.org/x/sys/unix"
)

// A connection accepted by the system call gets its options from the
// listener: Nagle off and net's keep-alive, as net's Accept set them on
// each connection; the peer's address as net reads it; and closing the
// socket ends a wait for the next.
func TestAcceptedConnectionsInheritTheListenersOptions(t *testing.T) {
	t.Parallel()
	l, sk := listenStream(t)
	if err := sk.SetAcceptOptions(); err != nil {
		t.Fatal(err)
	}
	d, err := net.Dial("tcp", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	fd, peer, err := sk.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if want := netip.MustParseAddrPort(d.LocalAddr().String()); peer != want {
		t.Errorf("peer: want %v, have %v", want, peer)
	}
	for _, o := range []struct {
		name       string
		level, opt int
		want       int
	}{
		{"TCP_NODELAY", unix.IPPROTO_TCP, unix.TCP_NODELAY, 1},
		{"SO_KEEPALIVE", unix.SOL_SOCKET, unix.SO_KEEPALIVE, 1},
		{"TCP_KEEPIDLE", unix.IPPROTO_TCP, unix.TCP_KEEPIDLE, 15},
		{"TCP_KEEPINTVL", unix.IPPROTO_TCP, unix.TCP_KEEPINTVL, 15},
		{"TCP_KEEPCNT", unix.IPPROTO_TCP, unix.TCP_KEEPCNT, KeepAliveProbes},
	} {
		v, err := unix.GetsockoptInt(fd, o.level, o.opt)
		if err != nil {
			t.Fatalf("%s: %v", o.name, err)
		}
		if v != o.want {
			t.Errorf("%s of the accepted connection: want %d, have %d", o.name, o.want, v)
		}
	}
	if fl, err := unix.FcntlInt(uintptr(fd), unix.F_GETFL, 0); err != nil || fl&unix.O_NONBLOCK == 0 {
		t.Errorf("the accepted descriptor: want non-blocking, have flags %#x (%v)", fl, err)
	}
	// A wait under way ends when the socket closes.
	done := make(chan error, 1)
	go func() {
		_, _, err := sk.Accept()
		done <- err
	}()
	sk.CloseStream()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Errorf("accept on a closed socket: want net.ErrClosed, have %v", err)
	}
	if _, err := net.Dial("tcp", l.Addr().String()); err == nil {
		t.Error("a connection to a closed socket was accepted by the kernel: its copy still listens")
	}
}

// A close that comes after Accept took its copy of the socket, in the wait
// or before it, ends Accept with net.ErrClosed too (the poller says "use
// of closed file" then).
func TestAcceptEndsWhenClosedAfterItTookItsCopy(t *testing.T) {
	t.Parallel()
	_, sk := listenStream(t)
	done := make(chan error, 1)
	go func() {
		_, _, err := sk.Accept()
		done <- err
	}()
	// The copy is made by the first Accept: once it is there, Accept is
	// past the check of a closed socket.
	testkit.WaitFor(t, 5*time.Second, "Accept to take its copy of the socket", func() bool {
		sk.acceptMu.Lock()
		defer sk.acceptMu.Unlock()
		return sk.accept != nil
	})
	sk.CloseStream()
	if err := <-done; !errors.Is(err, net.ErrClosed) {
		t.Errorf("accept on a closed socket: want net.ErrClosed, have %v", err)
	}
}

// listenStream is a TCP listener on the loopback and its Socket, closed
// at the test's end.
func listenStream(t *testing.T) (*net.TCPListener, *Socket) {
	t.Helper()
	l, err := net.ListenTCP("tcp", &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	sk := &Socket{TCP: l}
	t.Cleanup(sk.CloseStream)
	return l, sk
}
