package engine

import (
	"bytes"
	"io"
	"net"
	"testing"
	"time"
)

// tcpPair is a plain TCP connection adopted as a worker adopts one, and its
// peer, over 127.0.0.1.
func tcpPair(t *testing.T) (*tcpConn, net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	peer, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	c, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	// Small buffers, so that a few writes fill them: on 127.0.0.1 they
	// grow to megabytes.
	peer.(*net.TCPConn).SetReadBuffer(16 << 10)
	c.(*net.TCPConn).SetWriteBuffer(16 << 10)
	tc := &tcpConn{c: c}
	tc.raw, _ = c.(*net.TCPConn).SyscallConn()
	return tc, peer
}

// A peer that does not read stalls no write: what the kernel does not take
// waits, is written once the peer reads, and arrives whole and in order.
func TestTCPWriteSlowPeerWaits(t *testing.T) {
	tc, peer := tcpPair(t)
	var want bytes.Buffer
	chunk := make([]byte, 64<<10)
	// Many times what the sockets' buffers hold, less than maxPending.
	for i := 0; i < 12; i++ {
		for j := range chunk {
			chunk[j] = byte(i + j)
		}
		if err := tc.writeRaw(chunk); err != nil {
			t.Fatalf("write %d to a peer that does not read yet: %v", i, err)
		}
		want.Write(chunk)
	}
	if !tc.writesPending() {
		t.Fatal("768 KiB to a peer that reads nothing: want some of it waiting")
	}
	peer.SetReadDeadline(time.Now().Add(30 * time.Second))
	got := make([]byte, want.Len())
	if _, err := io.ReadFull(peer, got); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want.Bytes()) {
		t.Fatal("the bytes arrived out of order or changed")
	}
	// Flushed, the connection writes at once again, past the deadline the
	// flush had set.
	for tc.writesPending() {
		time.Sleep(time.Millisecond)
	}
	time.Sleep(writeTimeout + 100*time.Millisecond)
	if err := tc.writeRaw([]byte("OPTIONS")); err != nil {
		t.Fatalf("write after the flush: %v", err)
	}
	b := make([]byte, 7)
	if _, err := io.ReadFull(peer, b); err != nil || string(b) != "OPTIONS" {
		t.Fatalf("read %q, %v; want OPTIONS", b, err)
	}
}

// A peer that takes nothing while more than maxPending piles up is cut off,
// and the writes fail from then on.
func TestTCPWriteStuckPeerCutOff(t *testing.T) {
	tc, peer := tcpPair(t)
	chunk := make([]byte, 64<<10)
	var err error
	for i := 0; i < 2*maxPending/len(chunk) && err == nil; i++ {
		err = tc.writeRaw(chunk)
	}
	if err == nil {
		t.Fatal("want a write to fail once maxPending is exceeded")
	}
	if err := tc.writeRaw(chunk); err == nil {
		t.Fatal("want writes after the cut-off to fail")
	}
	// The peer sees the connection end after what was written.
	peer.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.Copy(io.Discard, peer); err != nil {
		t.Fatalf("want the connection closed, have %v", err)
	}
}
