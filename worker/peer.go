package worker

import (
	"net/netip"
	"time"

	"github.com/sipvisor/sipvisor/internal/rawio"
	"github.com/sipvisor/sipvisor/internal/wire"
)

// A UDP worker reads the answers to the calls a TCP worker relays over UDP:
// the callee answers to the port, whose kernel program places each datagram
// by its Call-ID, not by the branch that says which worker holds the
// transaction. Passed on through the supervisor, each answer woke it and
// cost it a read, a write and the switches between: over TLS at 300
// calls/s, 5.4 of the 17 context switches a call. With the supervisor's
// end of the TCP worker's data channel in hand (wire.FramePeer), the UDP
// worker writes the answer there itself.

// setPeer keeps fd as the data channel of the worker with pid.
func (w *workerLoop) setPeer(pid, fd int) {
	if w.peers == nil {
		w.peers = make(map[int]int)
	}
	if old, ok := w.peers[pid]; ok {
		rawio.Close(old)
	}
	w.peers[pid] = fd
}

// forward writes msg, a response from from, on the data channel of the
// worker with pid, and reports whether it did; if it did not, the caller
// passes it through the supervisor, which counts what it cannot pass.
func (w *workerLoop) forward(pid int, from string, msg []byte) bool {
	fd, ok := w.peers[pid]
	if !ok || len(msg) > wire.MaxFrame-wire.MsgHeaderLen {
		return false
	}
	ap, err := netip.ParseAddrPort(from)
	if err != nil {
		return false
	}
	n := wire.MsgHeaderLen + len(msg)
	if cap(w.peerBuf) < n {
		w.peerBuf = make([]byte, n, max(n, 2048))
	}
	b := w.peerBuf[:n]
	wire.PutMsgHeader(b, 0, ap, time.Now().UnixNano())
	b[0] = wire.FramePeerMessage
	copy(b[wire.MsgHeaderLen:], msg)
	for {
		_, e := rawio.Write(fd, b)
		switch e {
		case 0:
			return true
		case rawio.EINTR:
			continue
		case rawio.EAGAIN:
			// Its queue is full: the supervisor's pass finds it full
			// too, and counts the loss.
			return false
		}
		// The worker has ended: its channel is closed.
		rawio.Close(fd)
		delete(w.peers, pid)
		return false
	}
}
