package worker

import (
	"net"
	"os"
	"sync"
	"time"

	"github.com/sipvisor/sipvisor/internal/rawio"
)

// handedConn takes a connection the supervisor handed over by descriptor
// without a system call through the scheduler's hooks (package rawio): the
// first such call after the worker was idle wakes the runtime's monitor
// thread, which then sleeps and wakes every 20 µs for as long as the worker
// is busy. net.FileConn made thirteen of them a connection (a copy of the
// descriptor, its flags, three address lookups, five socket options the
// listener already gives its connections, the copy's close) and closing
// made one more: over TCP with one connection a call, the monitor's
// wake-ups were a quarter of the worker's context switches. Here the
// descriptor is registered in the poller as a file (os.NewFile makes one
// call, not hooked), its addresses are read by rawio, and its close waits
// for the closer's next batch.
func handedConn(fd int, closer *fileCloser) (net.Conn, error) {
	if e := rawio.SetNonblock(fd); e != 0 {
		rawio.Close(fd)
		return nil, os.NewSyscallError("fcntl", e)
	}
	f := os.NewFile(uintptr(fd), "tcp")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return nil, err
	}
	h := &handedFile{f: f, closer: closer}
	// A connection whose peer left between the supervisor's accept and
	// now has no remote address: it is taken with none, and its reader,
	// finding it closed, closes it.
	if ap, e := rawio.Sockname(fd); e == 0 {
		h.local = net.TCPAddrFromAddrPort(ap)
	}
	if ap, e := rawio.Peername(fd); e == 0 {
		h.remote = net.TCPAddrFromAddrPort(ap)
	}
	return rawio.NewStream(h, rc), nil
}

// handedFile is the base of a handed connection's rawio.Stream: its file
// gives the deadlines, and closing it is left to a closer.
type handedFile struct {
	f             *os.File
	local, remote *net.TCPAddr
	closer        *fileCloser
}

func (h *handedFile) LocalAddr() net.Addr {
	if h.local == nil {
		return nil
	}
	return h.local
}

func (h *handedFile) RemoteAddr() net.Addr {
	if h.remote == nil {
		return nil
	}
	return h.remote
}

func (h *handedFile) SetDeadline(t time.Time) error      { return h.f.SetDeadline(t) }
func (h *handedFile) SetReadDeadline(t time.Time) error  { return h.f.SetReadDeadline(t) }
func (h *handedFile) SetWriteDeadline(t time.Time) error { return h.f.SetWriteDeadline(t) }

// Close wakes a read or write that waits (the Stream, closed, ends it) and
// leaves the file to the closer. The connection itself has ended already
// (the Stream shut it down), or is another worker's now (a hand-off).
func (h *handedFile) Close() error {
	h.f.SetDeadline(time.Unix(1, 0))
	h.closer.add(h.f)
	return nil
}

// fileCloser closes the files of ended connections in batches: os.File's
// Close is a system call through the scheduler's hooks, which would wake
// the runtime's monitor thread once a connection; a batch wakes it once.
type fileCloser struct {
	mu     sync.Mutex
	files  []*os.File
	oldest time.Time
}

// closeBatchAge is how long an ended connection's file may stay open, and
// closeBatchMax how many may wait, before the batch is closed.
const (
	closeBatchAge = time.Second
	closeBatchMax = 512
)

func (c *fileCloser) add(f *os.File) {
	c.mu.Lock()
	if len(c.files) == 0 {
		c.oldest = time.Now()
	}
	c.files = append(c.files, f)
	full := len(c.files) >= closeBatchMax
	c.mu.Unlock()
	if full {
		c.flush(time.Time{})
	}
}

// flush closes the files waiting if the oldest has waited closeBatchAge
// at now, or whatever their age with now zero.
func (c *fileCloser) flush(now time.Time) {
	c.mu.Lock()
	if len(c.files) == 0 || (!now.IsZero() && now.Sub(c.oldest) < closeBatchAge) {
		c.mu.Unlock()
		return
	}
	files := c.files
	c.files = nil
	c.mu.Unlock()
	for _, f := range files {
		f.Close()
	}
}

// pending is how many files wait to be closed.
func (c *fileCloser) pending() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.files)
}
