package rawio

import (
	"fmt"
	"net"
	"net/netip"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sipvisor/sipvisor/internal/testkit"
)

// A batch takes what the socket holds, each datagram with its sender and
// control messages, says so by a short count when the socket is empty, and
// reads nothing from an empty socket.
func TestRecvmmsg(t *testing.T) {
	t.Parallel()
	_, fd := udpFD(t, "udp4", "127.0.0.1:0")
	recv, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	to := recv.LocalAddr().(*net.UDPAddr)
	rc, _ := recv.SyscallConn()
	var rfd int
	rc.Control(func(f uintptr) { rfd = int(f) })
	t.Cleanup(func() { recv.Close() })

	b := NewBatch(4, 3, 100, 64)
	if n, e := Recvmmsg(rfd, b); n != 0 || e != EAGAIN {
		t.Fatalf("an empty socket: want EAGAIN, have %d, %v", n, e)
	}
	sa := MakeSockaddr(to.AddrPort(), false)
	for i := range 6 {
		if _, e := Sendto(fd, []byte(fmt.Sprintf("datagram %d", i)), &sa); e != 0 {
			t.Fatal(e)
		}
	}
	var got []string
	short := false
	testkit.WaitFor(t, 5*time.Second, "six datagrams", func() bool {
		n, e := Recvmmsg(rfd, b)
		if e == EAGAIN {
			return false
		}
		if e != 0 {
			t.Fatalf("recvmmsg: %v", e)
		}
		for i := range n {
			f, oob, from := b.Msg(i)
			if len(f) < 3 || from.Port() == 0 || len(oob) != 0 {
				t.Fatalf("datagram %d: frame %q from %v, %d control bytes", i, f, from, len(oob))
			}
			got = append(got, string(f[3:]))
		}
		short = short || n < b.Len()
		return len(got) >= 6
	})
	if fmt.Sprint(got) != "[datagram 0 datagram 1 datagram 2 datagram 3 datagram 4 datagram 5]" || !short {
		t.Errorf("read %q (a short batch: %v), want six in order and the last batch short", got, short)
	}
}

func TestRecvmmsgAllocates0(t *testing.T) {
	_, fd := udpFD(t, "udp4", "127.0.0.1:0")
	b := NewBatch(4, 0, 100, 64)
	if a := testing.AllocsPerRun(100, func() { Recvmmsg(fd, b) }); a != 0 {
		t.Errorf("%v allocations per read, want 0", a)
	}
}

// A send batch leaves in order in one call, each datagram to its own
// destination; a datagram the kernel refuses stops the call there, with
// its error when it is the first, and the rest go on from after it.
func TestSendmmsg(t *testing.T) {
	_, fd := udpFD(t, "udp4", "127.0.0.1:0")
	a, afd := udpFD(t, "udp4", "127.0.0.1:0")
	bc, bfd := udpFD(t, "udp4", "127.0.0.1:0")
	toA := MakeSockaddr(a.LocalAddr().(*net.UDPAddr).AddrPort(), false)
	toB := MakeSockaddr(bc.LocalAddr().(*net.UDPAddr).AddrPort(), false)
	// Port 0 is no destination: the kernel refuses it (EINVAL).
	bad := MakeSockaddr(netip.MustParseAddrPort("127.0.0.1:0"), false)

	b := NewSendBatch(4, 64)
	for i, to := range []*Sockaddr{&toA, &toB, &bad, &toA} {
		if !b.Add(fmt.Appendf(nil, "datagram %d", i), to) {
			t.Fatalf("datagram %d: no room", i)
		}
	}
	if b.Add([]byte("one more"), &toB) {
		t.Fatal("a fifth datagram found room in a batch of 4")
	}
	if got := b.To(1); got != bc.LocalAddr().(*net.UDPAddr).AddrPort() {
		t.Errorf("To(1) = %v", got)
	}
	n, e := Sendmmsg(fd, b, 0)
	if n != 2 || e != 0 {
		t.Fatalf("first call: %d sent, %v; want 2 and no error", n, e)
	}
	if n, e = Sendmmsg(fd, b, 2); n != 0 || e == 0 {
		t.Fatalf("from the refused datagram: %d sent, %v; want its error", n, e)
	}
	if n, e = Sendmmsg(fd, b, 3); n != 1 || e != 0 {
		t.Fatalf("after it: %d sent, %v; want 1", n, e)
	}
	buf := make([]byte, 64)
	for _, want := range []struct {
		fd   int
		text string
	}{{afd, "datagram 0"}, {bfd, "datagram 1"}, {afd, "datagram 3"}} {
		if n, _ := recvWait(t, want.fd, buf); string(buf[:n]) != want.text {
			t.Errorf("read %q, want %q", buf[:n], want.text)
		}
	}

	b.Reset()
	if b.Len() != 0 || !b.Add(make([]byte, 64), &toA) || b.Add([]byte("x"), &toA) {
		t.Error("a reset batch does not take exactly its size in bytes")
	}
	if a := testing.AllocsPerRun(100, func() { b.Reset(); b.Add([]byte("datagram"), &toA); Sendmmsg(fd, b, 0) }); a != 0 {
		t.Errorf("%v allocations per batch sent, want 0", a)
	}
}

// On a blocking socket RecvmmsgWait waits for the first datagram, up to
// the socket's SO_RCVTIMEO, and takes those queued with it; Recvmmsg does
// not wait.
func TestRecvmmsgWait(t *testing.T) {
	t.Parallel()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.Bind(fd, &unix.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		t.Fatal(err)
	}
	sa, _ := unix.Getsockname(fd)
	to := MakeSockaddr(netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), uint16(sa.(*unix.SockaddrInet4).Port)), false)
	_, out := udpFD(t, "udp4", "127.0.0.1:0")
	b := NewBatch(4, 0, 100, 64)

	// No timeout set: a Recvmmsg that waited would never return.
	done := make(chan syscall.Errno, 1)
	go func() { _, e := Recvmmsg(fd, b); done <- e }()
	select {
	case e := <-done:
		if e != EAGAIN {
			t.Fatalf("Recvmmsg of an empty blocking socket: want EAGAIN, have %v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Recvmmsg waited on a blocking socket")
	}

	tv := unix.NsecToTimeval(int64(20 * time.Millisecond))
	if err := unix.SetsockoptTimeval(fd, unix.SOL_SOCKET, unix.SO_RCVTIMEO, &tv); err != nil {
		t.Fatal(err)
	}
	// The runtime's preemption signal may end the wait early (EINTR).
	n, e := RecvmmsgWait(fd, b)
	for e == EINTR {
		n, e = RecvmmsgWait(fd, b)
	}
	if n != 0 || e != EAGAIN {
		t.Fatalf("an empty socket: want EAGAIN after the timeout, have %d, %v", n, e)
	}
	for i := range 3 {
		if _, e := Sendto(out, []byte(fmt.Sprintf("datagram %d", i)), &to); e != 0 {
			t.Fatal(e)
		}
	}
	// Sent on 127.0.0.1, all three are queued: taken together.
	if n, e := RecvmmsgWait(fd, b); n != 3 || e != 0 {
		t.Fatalf("three queued: want 3, have %d, %v", n, e)
	}
	if f, _, _ := b.Msg(2); string(f) != "datagram 2" {
		t.Errorf("third datagram %q", f)
	}
}
