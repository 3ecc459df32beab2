package rawio

import (
	"fmt"
	"net"
	"testing"
	"time"

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
