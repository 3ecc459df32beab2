package rawio

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// runtimeEvents is how the Go network poller registers every descriptor
// (EPOLLIN|EPOLLOUT|EPOLLRDHUP|EPOLLET), with EPOLLERR and EPOLLHUP, which
// the kernel adds to any registration.
const runtimeEvents = unix.EPOLLIN | unix.EPOLLOUT | unix.EPOLLRDHUP | unix.EPOLLET | unix.EPOLLERR | unix.EPOLLHUP

// PollReadsOnly takes EPOLLOUT out of the Go network poller's registration
// of fd, which must be a descriptor this process only ever reads through
// the poller: its writes are raw (Sendto, Write), which never wait for the
// poller to say the descriptor is writable.
//
// The poller registers each descriptor for writability, edge-triggered,
// and the kernel signals a UDP socket's or a socket pair's write space each
// time a datagram it sent is freed or its peer reads. A socket that several
// processes share signals them all: every datagram a TCP worker relayed
// from the SIP socket woke the supervisor's poller, which holds the same
// socket for its door, about twice a call over TLS; a worker's own sends
// made its next wait return at once.
//
// The runtime's poller is found as the epoll set of this process that
// holds fd with exactly the runtime's events; its data (the runtime's
// handle of the descriptor) is kept as it is. A descriptor found in no such
// set is an error, and nothing is changed.
func PollReadsOnly(fd int) error {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return err
	}
	for _, e := range ents {
		epfd, err := strconv.Atoi(e.Name())
		if err != nil || epfd == fd {
			continue
		}
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err != nil || l != "anon_inode:[eventpoll]" {
			continue
		}
		events, data, ok, err := epollEntry(epfd, fd)
		if err != nil || !ok || events != runtimeEvents {
			continue
		}
		ev := unix.EpollEvent{Events: uint32(events &^ unix.EPOLLOUT), Fd: int32(uint32(data)), Pad: int32(uint32(data >> 32))}
		if err := unix.EpollCtl(epfd, unix.EPOLL_CTL_MOD, fd, &ev); err != nil {
			return fmt.Errorf("poll reads only: %w", err)
		}
		return nil
	}
	return errNotPolled
}

var errNotPolled = errors.New("poll reads only: the descriptor is in no epoll set of the runtime's")

// epollEntry reads fd's registration in the epoll set epfd from
// /proc/self/fdinfo: its events and data.
func epollEntry(epfd, fd int) (events uint32, data uint64, ok bool, err error) {
	f, err := os.Open("/proc/self/fdinfo/" + strconv.Itoa(epfd))
	if err != nil {
		return 0, 0, false, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		// tfd:        9 events: 8000201d data: 3fc1c3a143000001  pos:0 ...
		fs := strings.Fields(sc.Text())
		if len(fs) < 6 || fs[0] != "tfd:" || fs[2] != "events:" || fs[4] != "data:" {
			continue
		}
		if t, err := strconv.Atoi(fs[1]); err != nil || t != fd {
			continue
		}
		ev, err1 := strconv.ParseUint(fs[3], 16, 32)
		d, err2 := strconv.ParseUint(fs[5], 16, 64)
		if err1 != nil || err2 != nil {
			return 0, 0, false, fmt.Errorf("epoll set %d: %q", epfd, sc.Text())
		}
		return uint32(ev), d, true, nil
	}
	return 0, 0, false, sc.Err()
}
