package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync/atomic"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sipvisor/sipvisor/internal/rawio"
	"github.com/sipvisor/sipvisor/internal/sipscan"
)

// The descriptors a receiver finds, in the order run passes them.
const (
	fdSock   = 3 // the UDP socket, or for a child of design A its data channel
	fdShared = 4 // the shared map of who received what
	fdPairs  = 5 // the reader's ends of the data channels, one per child
)

// frameHeader stands for the supervisor's frame header (the peer's address
// and the socket's index), so that a frame is as long as a real one.
const frameHeader = 24

// counters are what a receiver counts; the control goroutine reads them
// while the receive loop writes them.
type counters struct {
	recv  atomic.Uint64 // datagrams (or frames) handled
	wakes atomic.Uint64 // returns from waiting: poller callbacks, epoll_wait, blocking recvfrom
	empty atomic.Uint64 // wake-ups that found nothing to read
	drops atomic.Uint64 // the reader's frames its child's channel had no room for
	dups  atomic.Uint64 // a datagram received twice (never on loopback)
	bad   atomic.Uint64 // not parsed, or not one of the sender's
}

// result is one receiver's report of the measured window.
type result struct {
	ID     int     `json:"id"` // -1: the reader of design A
	UserUS float64 `json:"user_us"`
	SysUS  float64 `json:"sys_us"`
	NVCSW  int64   `json:"nvcsw"`
	NIVCSW int64   `json:"nivcsw"`
	Recv   uint64  `json:"recv"`
	Wakes  uint64  `json:"wakes"`
	Empty  uint64  `json:"empty"`
	Drops  uint64  `json:"drops"`
	Dups   uint64  `json:"dups"`
	Bad    uint64  `json:"bad"`
}

type snapshot struct {
	ru                                   syscall.Rusage
	recv, wakes, empty, drops, dups, bad uint64
}

func (c *counters) snap() snapshot {
	var s snapshot
	// RUSAGE_SELF sums every thread of the process, the exited ones too:
	// the Go runtime's threads are the process's cost as much as the loop's.
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &s.ru)
	s.recv, s.wakes, s.empty = c.recv.Load(), c.wakes.Load(), c.empty.Load()
	s.drops, s.dups, s.bad = c.drops.Load(), c.dups.Load(), c.bad.Load()
	return s
}

func usec(t syscall.Timeval) float64 { return float64(t.Sec)*1e6 + float64(t.Usec) }

// receiver is one process's state: its role, and the shared map it marks.
type receiver struct {
	id, n  int
	design string
	c      counters
	shared []byte // sharedHeader bytes of per-child totals, then one byte per message
	msg    sipscan.Msg
}

// sharedHeader holds one uint64 per child: the datagrams it has handled
// since it started, which run polls to know when the last ones are in.
const sharedHeader = 8 * 64

func (r *receiver) total() *uint64 {
	return (*uint64)(unsafe.Pointer(&r.shared[8*r.id]))
}

// handle is a child's work per message: what a worker must do at least
// (find the Call-ID and method), and the mark that lets run count losses
// and which messages of a call reached which child.
func (r *receiver) handle(b []byte) {
	if err := sipscan.Scan(b, &r.msg); err != nil {
		r.c.bad.Add(1)
		return
	}
	call, ok := callIndex(r.msg.CallID)
	kind := kindOf(r.msg.Method)
	slot := sharedHeader + 3*call + kind
	if !ok || kind < 0 || slot >= len(r.shared) {
		r.c.bad.Add(1)
		return
	}
	if r.shared[slot] != 0 {
		r.c.dups.Add(1)
	}
	r.shared[slot] = byte(r.id + 1)
	r.c.recv.Add(1)
	atomic.AddUint64(r.total(), 1)
}

// runReceiver is a child's (or the reader's) main: set up, say ready, then
// receive until run says stop on the control pipe (stdin).
func runReceiver(role string) error {
	r := &receiver{design: os.Getenv(envDesign)}
	var err error
	if r.id, err = strconv.Atoi(os.Getenv(envID)); err != nil {
		return fmt.Errorf("%s: %w", envID, err)
	}
	if r.n, err = strconv.Atoi(os.Getenv(envN)); err != nil {
		return fmt.Errorf("%s: %w", envN, err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fdShared, &st); err != nil {
		return fmt.Errorf("shared map: %w", err)
	}
	if r.shared, err = unix.Mmap(fdShared, 0, int(st.Size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
		return fmt.Errorf("shared map: %w", err)
	}
	// The control pipe goes through the network poller (a non-blocking
	// descriptor), so that waiting on it costs no thread and no wake-up.
	if err := unix.SetNonblock(0, true); err != nil {
		return err
	}
	ctl := os.NewFile(0, "control")
	go control(ctl, r, role)
	if _, err := os.Stdout.WriteString("ready\n"); err != nil {
		return err
	}
	if role == roleReader {
		return r.readAndPass()
	}
	switch r.design {
	case designA:
		return r.pollLoop(fdSock, r.readFrames)
	case designBPoll, designCRand, designCHash:
		return r.pollLoop(fdSock, r.readDatagrams)
	case designD:
		mm := newMmsg(64)
		return r.pollLoop(fdSock, func(fd int) (int, syscall.Errno) { return r.readMmsg(fd, mm) })
	case designBExcl:
		return r.epollExclusive(fdSock)
	case designBBlock:
		return r.blockingRecv(fdSock)
	}
	return fmt.Errorf("unknown design %q", r.design)
}

// control snapshots the counters and the process's rusage at "start" and
// at "stop", reports the difference on stdout and exits.
func control(ctl *os.File, r *receiver, role string) {
	sc := bufio.NewScanner(ctl)
	var t0 snapshot
	for sc.Scan() {
		switch sc.Text() {
		case "start":
			t0 = r.c.snap()
		case "stop":
			t1 := r.c.snap()
			id := r.id
			if role == roleReader {
				id = -1
			}
			res := result{
				ID:     id,
				UserUS: usec(t1.ru.Utime) - usec(t0.ru.Utime),
				SysUS:  usec(t1.ru.Stime) - usec(t0.ru.Stime),
				NVCSW:  t1.ru.Nvcsw - t0.ru.Nvcsw,
				NIVCSW: t1.ru.Nivcsw - t0.ru.Nivcsw,
				Recv:   t1.recv - t0.recv,
				Wakes:  t1.wakes - t0.wakes,
				Empty:  t1.empty - t0.empty,
				Drops:  t1.drops - t0.drops,
				Dups:   t1.dups - t0.dups,
				Bad:    t1.bad - t0.bad,
			}
			b, _ := json.Marshal(res)
			os.Stdout.Write(append(b, '\n'))
			os.Exit(0)
		}
	}
	// The pipe closed without a stop: run is gone.
	os.Exit(1)
}

// pollLoop waits on fd through Go's network poller, as the worker waits on
// its data channel and the front door on its socket, and calls read, which
// reads until the socket is empty, at each wake-up.
func (r *receiver) pollLoop(fd int, read func(fd int) (int, syscall.Errno)) error {
	if err := unix.SetNonblock(fd, true); err != nil {
		return err
	}
	f := os.NewFile(uintptr(fd), "sock")
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	var rerr error
	err = rc.Read(func(fd uintptr) bool {
		r.c.wakes.Add(1)
		got, e := read(int(fd))
		if got == 0 {
			r.c.empty.Add(1)
		}
		if e != rawio.EAGAIN {
			rerr = e
			return true
		}
		return false
	})
	if err != nil {
		return err
	}
	return rerr
}

// readDatagrams reads datagrams until the socket is empty.
func (r *receiver) readDatagrams(fd int) (int, syscall.Errno) {
	var buf [2048]byte
	got := 0
	for {
		n, _, e := rawio.Recvfrom(fd, buf[:])
		switch e {
		case 0:
			got++
			r.handle(buf[:n])
		case rawio.EINTR:
		default:
			return got, e
		}
	}
}

// readFrames reads a data channel's frames until it is empty.
func (r *receiver) readFrames(fd int) (int, syscall.Errno) {
	var buf [2048]byte
	got := 0
	for {
		n, _, e := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)))
		switch e {
		case 0:
			got++
			if int(n) > frameHeader {
				r.handle(buf[frameHeader:n])
			}
		case rawio.EINTR:
		default:
			return got, e
		}
	}
}

// readAndPass is design A's reader, the front door's work: read each
// datagram, find its Call-ID, and write it to the child the Call-ID's hash
// names (the affinity that keeps a call's messages in one worker).
func (r *receiver) readAndPass() error {
	pairs := make([]int, r.n)
	for i := range pairs {
		pairs[i] = fdPairs + i
		_ = unix.SetsockoptInt(pairs[i], unix.SOL_SOCKET, unix.SO_SNDBUF, 4<<20)
		if err := unix.SetNonblock(pairs[i], true); err != nil {
			return err
		}
	}
	var buf [2048]byte
	return r.pollLoop(fdSock, func(fd int) (int, syscall.Errno) {
		got := 0
		for {
			n, _, e := rawio.Recvfrom(fd, buf[frameHeader:])
			switch e {
			case 0:
				got++
				r.c.recv.Add(1)
				if err := sipscan.Scan(buf[frameHeader:frameHeader+n], &r.msg); err != nil {
					r.c.bad.Add(1)
					continue
				}
				to := pairs[sipscan.CallIDHash(r.msg.CallID)%uint64(r.n)]
				if _, e := rawio.Write(to, buf[:frameHeader+n]); e != 0 {
					r.c.drops.Add(1)
				}
			case rawio.EINTR:
			default:
				return got, e
			}
		}
	})
}

// epollExclusive waits in epoll_wait itself, on a set of its own holding the
// shared socket with EPOLLEXCLUSIVE, so that the kernel wakes one waiting
// process per datagram. The exclusivity only holds for a thread blocked in
// epoll_wait on that set: a set inside Go's poller (itself an epoll set)
// is woken through its poll wait queue, which EPOLLEXCLUSIVE does not
// limit, and every child would wake again.
func (r *receiver) epollExclusive(fd int) error {
	set, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		return err
	}
	ev := unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLEXCLUSIVE, Fd: int32(fd)}
	if err := unix.EpollCtl(set, unix.EPOLL_CTL_ADD, fd, &ev); err != nil {
		return fmt.Errorf("EPOLLEXCLUSIVE: %w", err)
	}
	evs := make([]unix.EpollEvent, 1)
	for {
		_, err := unix.EpollWait(set, evs, -1)
		if errors.Is(err, unix.EINTR) {
			continue
		}
		if err != nil {
			return err
		}
		r.c.wakes.Add(1)
		got, e := r.drain(fd)
		if got == 0 {
			r.c.empty.Add(1)
		}
		if e != rawio.EAGAIN {
			return e
		}
	}
}

// blockingRecv is Kamailio's receiver in Go: a recvfrom that blocks (the
// kernel queues blocked readers of a socket as exclusive waiters and wakes
// one per datagram), through syscall.Syscall so that the runtime can hand
// the thread's P on while it sleeps; then whatever else is queued without
// blocking.
func (r *receiver) blockingRecv(fd int) error {
	var buf [2048]byte
	for {
		n, _, e := syscall.Syscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), 0, 0, 0)
		if e == syscall.EINTR {
			continue
		}
		if e != 0 {
			return e
		}
		r.c.wakes.Add(1)
		r.handle(buf[:n])
		if _, e := r.drain(fd); e != rawio.EAGAIN {
			return e
		}
	}
}

// drain reads without blocking until the socket is empty; the shared
// socket of the B designs may be in blocking mode.
func (r *receiver) drain(fd int) (int, syscall.Errno) {
	var buf [2048]byte
	got := 0
	for {
		n, _, e := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&buf[0])), uintptr(len(buf)), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			got++
			r.handle(buf[:n])
		case syscall.EINTR:
		default:
			return got, e
		}
	}
}

// mmsghdr is the kernel's struct mmsghdr, which x/sys/unix does not declare.
type mmsghdr struct {
	hdr unix.Msghdr
	len uint32
	_   [4]byte
}

type mmsg struct {
	hdrs []mmsghdr
	iovs []unix.Iovec
	bufs []byte
}

const mmsgBuf = 2048

func newMmsg(n int) *mmsg {
	m := &mmsg{hdrs: make([]mmsghdr, n), iovs: make([]unix.Iovec, n), bufs: make([]byte, n*mmsgBuf)}
	for i := range m.hdrs {
		m.iovs[i].Base = &m.bufs[i*mmsgBuf]
		m.iovs[i].SetLen(mmsgBuf)
		m.hdrs[i].hdr.Iov = &m.iovs[i]
		m.hdrs[i].hdr.Iovlen = 1
	}
	return m
}

// readMmsg reads up to len(hdrs) datagrams per system call with recvmmsg,
// until the socket is empty.
func (r *receiver) readMmsg(fd int, m *mmsg) (int, syscall.Errno) {
	got := 0
	for {
		k, _, e := syscall.RawSyscall6(unix.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&m.hdrs[0])), uintptr(len(m.hdrs)), unix.MSG_DONTWAIT, 0, 0)
		switch e {
		case 0:
			for i := 0; i < int(k); i++ {
				got++
				r.handle(m.bufs[i*mmsgBuf : i*mmsgBuf+int(m.hdrs[i].len)])
			}
			if int(k) < len(m.hdrs) {
				// A short batch: the queue is empty now, and a further call
				// would only say so.
				return got, rawio.EAGAIN
			}
		case syscall.EINTR:
		default:
			return got, e
		}
	}
}
