package rawio

import (
	"net"
	"os"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A socket of the network poller, once read-only there, is registered
// without EPOLLOUT and its reads through the poller still wait for and
// take what comes; a descriptor the poller does not hold is an error.
func TestPollReadsOnly(t *testing.T) {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var fd int
	rc.Control(func(f uintptr) { fd = int(f) })
	if ev := pollerEvents(t, fd); ev&unix.EPOLLOUT == 0 {
		t.Fatalf("before: want the runtime's registration with EPOLLOUT, have %#x", ev)
	}
	if err := PollReadsOnly(fd); err != nil {
		t.Fatal(err)
	}
	if ev := pollerEvents(t, fd); ev&unix.EPOLLOUT != 0 || ev&unix.EPOLLIN == 0 {
		t.Fatalf("after: want EPOLLIN without EPOLLOUT, have %#x", ev)
	}
	if err := PollReadsOnly(fd); err == nil {
		t.Error("a second time: want an error, the registration no longer being the runtime's")
	}

	got := make(chan string, 1)
	go func() {
		buf := make([]byte, 100)
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, _, err := c.ReadFromUDP(buf)
		if err != nil {
			got <- err.Error()
			return
		}
		got <- string(buf[:n])
	}()
	// Writes stay raw and go out as before.
	peer, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	sa := MakeSockaddr(peer.LocalAddr().(*net.UDPAddr).AddrPort(), false)
	if _, e := Sendto(fd, []byte("out"), &sa); e != 0 {
		t.Fatal(e)
	}
	buf := make([]byte, 100)
	peer.SetReadDeadline(time.Now().Add(10 * time.Second))
	if n, _, err := peer.ReadFromUDP(buf); err != nil || string(buf[:n]) != "out" {
		t.Fatalf("the raw send: %q, %v", buf[:n], err)
	}
	if _, err := peer.WriteToUDP([]byte("in"), c.LocalAddr().(*net.UDPAddr)); err != nil {
		t.Fatal(err)
	}
	if s := <-got; s != "in" {
		t.Fatalf("a read through the poller: want %q, have %q", "in", s)
	}

	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	defer w.Close()
	raw, err := unix.Dup(int(r.Fd()))
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(raw)
	if err := PollReadsOnly(raw); err == nil {
		t.Error("a descriptor outside the poller: want an error")
	}
}

// pollerEvents is fd's events in the epoll set of this process that holds
// it, 0 if none does.
func pollerEvents(t *testing.T, fd int) uint32 {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		if l, _ := os.Readlink("/proc/self/fd/" + e.Name()); l != "anon_inode:[eventpoll]" {
			continue
		}
		n, _ := strconv.Atoi(e.Name())
		if ev, _, ok, err := epollEntry(n, fd); err == nil && ok {
			return ev
		}
	}
	return 0
}
