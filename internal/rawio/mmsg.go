package rawio

import (
	"net/netip"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// mmsghdr is the kernel's struct mmsghdr: a msghdr and the length the call
// received into it.
type mmsghdr struct {
	hdr syscall.Msghdr
	n   uint32
	_   [4]byte
}

// Batch is what one Recvmmsg reads: up to len(Bufs) datagrams, each with
// its sender and control messages. Its buffers are made once and reused, so
// a read allocates nothing.
type Batch struct {
	hdrs  []mmsghdr
	iovs  []syscall.Iovec
	names []syscall.RawSockaddrAny
	bufs  [][]byte
	oobs  [][]byte
	room  int
}

// NewBatch makes a batch of n datagrams of up to size bytes each, read after
// room free bytes of its buffer (a frame header to fill in place), with oob
// bytes of control messages each.
func NewBatch(n, room, size, oob int) *Batch {
	b := &Batch{
		hdrs:  make([]mmsghdr, n),
		iovs:  make([]syscall.Iovec, n),
		names: make([]syscall.RawSockaddrAny, n),
		bufs:  make([][]byte, n),
		oobs:  make([][]byte, n),
		room:  room,
	}
	for i := range b.hdrs {
		b.bufs[i] = make([]byte, room+size)
		b.oobs[i] = make([]byte, oob)
		b.iovs[i].Base = &b.bufs[i][room]
		b.iovs[i].SetLen(size)
		h := &b.hdrs[i].hdr
		h.Name = (*byte)(unsafe.Pointer(&b.names[i]))
		h.Iov = &b.iovs[i]
		h.Iovlen = 1
		if oob > 0 {
			h.Control = &b.oobs[i][0]
		}
	}
	return b
}

// Len is how many datagrams the batch holds at most.
func (b *Batch) Len() int { return len(b.hdrs) }

// Recvmmsg reads into b as many datagrams as fd has queued, up to b.Len(),
// in one call, and says how many. Fewer than b.Len() means the socket was
// empty when the call returned, which spares the caller a read that would
// find nothing.
func Recvmmsg(fd int, b *Batch) (int, syscall.Errno) {
	return recvmmsg(fd, b, syscall.MSG_DONTWAIT)
}

// RecvmmsgWait is Recvmmsg on a blocking socket: it waits for the first
// datagram, as long as the socket's SO_RCVTIMEO at most (then EAGAIN),
// and takes the others queued with it.
func RecvmmsgWait(fd int, b *Batch) (int, syscall.Errno) {
	return recvmmsg(fd, b, unix.MSG_WAITFORONE)
}

func recvmmsg(fd int, b *Batch, flags int) (int, syscall.Errno) {
	for i := range b.hdrs {
		h := &b.hdrs[i].hdr
		h.Namelen = uint32(unsafe.Sizeof(b.names[i]))
		h.SetControllen(len(b.oobs[i]))
		h.Flags = 0
	}
	n, _, e := syscall.RawSyscall6(syscall.SYS_RECVMMSG, uintptr(fd), uintptr(unsafe.Pointer(&b.hdrs[0])), uintptr(len(b.hdrs)),
		uintptr(flags), 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}

// Msg is datagram i of the last read: the buffer from its free room to
// the datagram's end, the datagram's control messages, and its sender
// (unmapped, as Recvfrom says it).
func (b *Batch) Msg(i int) (frame, oob []byte, from netip.AddrPort) {
	h := &b.hdrs[i]
	return b.bufs[i][:b.room+int(h.n)], b.oobs[i][:h.hdr.Controllen], addrPort(&b.names[i])
}

// SendBatch is datagrams waiting to leave in one Sendmmsg: each copied into
// the batch's own buffer, with its destination, so that the caller's
// buffers are free again at once. It allocates nothing once made.
type SendBatch struct {
	hdrs  []mmsghdr
	iovs  []syscall.Iovec
	names []Sockaddr
	buf   []byte // the datagrams, one after another; never grown
	n     int
}

// NewSendBatch makes a batch of up to n datagrams of size bytes in all.
func NewSendBatch(n, size int) *SendBatch {
	b := &SendBatch{
		hdrs:  make([]mmsghdr, n),
		iovs:  make([]syscall.Iovec, n),
		names: make([]Sockaddr, n),
		buf:   make([]byte, 0, size),
	}
	for i := range b.hdrs {
		h := &b.hdrs[i].hdr
		h.Name = (*byte)(unsafe.Pointer(&b.names[i].raw))
		h.Iov = &b.iovs[i]
		h.Iovlen = 1
	}
	return b
}

// Len is how many datagrams wait in the batch.
func (b *SendBatch) Len() int { return b.n }

// Add puts p, for to, last in the batch, and reports whether it had room.
func (b *SendBatch) Add(p []byte, to *Sockaddr) bool {
	if b.n == len(b.hdrs) || cap(b.buf)-len(b.buf) < len(p) || len(p) == 0 {
		return false
	}
	start := len(b.buf)
	b.buf = append(b.buf, p...)
	b.names[b.n] = *to
	b.iovs[b.n].Base = &b.buf[start]
	b.iovs[b.n].SetLen(len(p))
	b.hdrs[b.n].hdr.Namelen = uint32(to.size)
	b.n++
	return true
}

// Reset empties the batch.
func (b *SendBatch) Reset() { b.n, b.buf = 0, b.buf[:0] }

// Sendmmsg sends the batch's datagrams from the one at from on fd, in
// order, in one call, and says how many left. An error is the datagram at
// from's, none of which left: the kernel stops at a datagram it cannot
// send, and reports its error only when it is the first of the call.
func Sendmmsg(fd int, b *SendBatch, from int) (int, syscall.Errno) {
	if from >= b.n {
		return 0, 0
	}
	n, _, e := syscall.RawSyscall6(unix.SYS_SENDMMSG, uintptr(fd), uintptr(unsafe.Pointer(&b.hdrs[from])), uintptr(b.n-from),
		syscall.MSG_DONTWAIT, 0, 0)
	if e != 0 {
		return 0, e
	}
	return int(n), 0
}

// To is the destination of datagram i.
func (b *SendBatch) To(i int) netip.AddrPort { return b.names[i].AddrPort() }
