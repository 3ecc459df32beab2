package worker

import (
	"fmt"
	"net"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// A burst that all came before the loop's read is read whole before the
// loop waits: the network poller waits edge-triggered, so a datagram left
// in the socket after a full batch would wait for the next one to come,
// however long that takes (once, the answers to 20 calls a TCP worker
// relayed waited 500 ms, until its retransmissions drew more).
func TestSourceReaderReadsBurstBeforeWaiting(t *testing.T) {
	for _, withSet := range []bool{false, true} {
		t.Run(fmt.Sprintf("set=%v", withSet), func(t *testing.T) {
			fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
			sock, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { sock.Close() })
			f, err := sock.File()
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { f.Close() })
			fd := int(f.Fd())
			if err := unix.SetNonblock(fd, true); err != nil {
				t.Fatal(err)
			}
			var set uintptr
			if withSet {
				ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
				if err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { unix.Close(ep) })
				for _, fd := range []int{fds[0], fd} {
					if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
						t.Fatal(err)
					}
				}
				set = uintptr(ep)
			}
			var dataReady atomic.Bool
			r := newSourceReader(fds[0], nil, &direct{fd: fd, oob: make([]byte, 64)}, !withSet, &dataReady)

			c, err := net.DialUDP("udp4", nil, sock.LocalAddr().(*net.UDPAddr))
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { c.Close() })
			const burst = 3*directBatch + 2
			for i := range burst {
				if _, err := fmt.Fprintf(c, "datagram %d", i); err != nil {
					t.Fatal(err)
				}
			}
			// A frame of the data channel too, which is read in its turn.
			if _, err := unix.Write(fds[1], []byte("frame")); err != nil {
				t.Fatal(err)
			}
			dataReady.Store(true)
			var got, frames int
			for r.recv(set) {
				if r.rerr != nil {
					t.Fatalf("read %d: %v", got, r.rerr)
				}
				switch r.src {
				case -1:
					frames++
				default:
					if want := fmt.Sprintf("datagram %d", got); string(r.dframe[len(r.dframe)-len(want):]) != want {
						t.Fatalf("read %q, want %q", r.dframe, want)
					}
					got++
				}
			}
			if got != burst || frames != 1 {
				t.Errorf("read %d datagrams of %d and %d frames of 1 before waiting", got, burst, frames)
			}
		})
	}
}
