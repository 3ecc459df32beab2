package worker

import (
	"io"
	"net"
	"syscall"
	"testing"
	"time"
)

// A handed connection reads, writes and closes as the connection it is:
// closed, its peer gets EOF at once, though the supervisor's copy (here the
// accepted net.Conn) stays open; its descriptor waits for the closer.
func TestHandedConn(t *testing.T) {
	t.Parallel()
	l, err := net.Listen("tcp4", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	peer, err := net.Dial("tcp4", l.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	acc, err := l.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer acc.Close()
	// The supervisor's copy stays in acc; the worker takes another
	// descriptor, in blocking mode as File gives it.
	f, err := acc.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	fd, err := syscall.Dup(int(f.Fd()))
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var closer fileCloser
	c, err := handedConn(fd, &closer)
	if err != nil {
		t.Fatal(err)
	}
	if c.LocalAddr().String() != acc.LocalAddr().String() || c.RemoteAddr().String() != acc.RemoteAddr().String() {
		t.Errorf("addresses: want %v %v, have %v %v", acc.LocalAddr(), acc.RemoteAddr(), c.LocalAddr(), c.RemoteAddr())
	}
	peer.Write([]byte("OPTIONS"))
	buf := make([]byte, 16)
	c.SetReadDeadline(time.Now().Add(5 * time.Second))
	n, err := c.Read(buf)
	if err != nil || string(buf[:n]) != "OPTIONS" {
		t.Fatalf("read: want OPTIONS, have %q (%v)", buf[:n], err)
	}
	// A read that waits is ended by the close.
	read := make(chan error, 1)
	c.SetReadDeadline(time.Time{})
	go func() {
		_, err := c.Read(buf)
		read <- err
	}()
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-read:
		if err == nil {
			t.Error("a read after close: want an error")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting read did not end at close")
	}
	peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	if _, err := peer.Read(buf); err != io.EOF {
		t.Errorf("the peer: want EOF, have %v", err)
	}
	if closer.pending() != 1 {
		t.Fatalf("want the descriptor waiting for the closer, have %d waiting", closer.pending())
	}
	closer.flush(time.Now())
	if closer.pending() != 1 {
		t.Errorf("a batch younger than %v: want it kept, have %d", closeBatchAge, closer.pending())
	}
	closer.flush(time.Now().Add(closeBatchAge))
	if closer.pending() != 0 {
		t.Errorf("an old batch: want it closed, have %d waiting", closer.pending())
	}
}
