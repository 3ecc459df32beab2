package worker

import (
	"bytes"
	"syscall"
	"testing"

	"github.com/sipvisor/sipvisor/internal/rawio"
	"github.com/sipvisor/sipvisor/internal/wire"
)

// forward writes a peer message frame on the linked channel, leaves what
// it cannot write (no link, a full channel, an ended peer) to the
// supervisor, and drops the link of a peer that ended.
func TestForward(t *testing.T) {
	t.Parallel()
	fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_SEQPACKET|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	ours, theirs := fds[0], fds[1]
	w := &workerLoop{}
	msg := []byte("SIP/2.0 200 OK\r\n\r\n")
	if w.forward(42, "127.0.0.1:5060", msg) {
		t.Fatal("no link: want false")
	}
	w.setPeer(42, ours)
	if w.forward(42, "not an address", msg) {
		t.Error("a bad source: want false")
	}
	if !w.forward(42, "127.0.0.1:5060", msg) {
		t.Fatal("linked: want the response written")
	}
	buf := make([]byte, 256)
	n, _, e := rawio.Recvmsg(theirs, buf, nil)
	if e != 0 || n != wire.MsgHeaderLen+len(msg) {
		t.Fatalf("want one frame of %d bytes, have %d (%v)", wire.MsgHeaderLen+len(msg), n, e)
	}
	if buf[0] != wire.FramePeerMessage || !bytes.Equal(buf[wire.MsgHeaderLen:n], msg) {
		t.Errorf("want a peer message frame with the response, have %q", buf[:n])
	}
	if _, from, _ := wire.ParseMsgHeader(buf[:n]); from.String() != "127.0.0.1:5060" {
		t.Errorf("source: want 127.0.0.1:5060, have %v", from)
	}
	// Full: left to the supervisor, the link kept.
	for w.forward(42, "127.0.0.1:5060", msg) {
	}
	if _, ok := w.peers[42]; !ok {
		t.Fatal("a full channel: want the link kept")
	}
	// Ended: the link dropped. Shut down first, as the kernel does when the
	// peer's last descriptor closes: a close alone ends the socket only if
	// no child another test forks at that moment still holds a copy until it
	// execs, and until then the full channel answers EAGAIN.
	if err := syscall.Shutdown(theirs, syscall.SHUT_RDWR); err != nil {
		t.Fatal(err)
	}
	rawio.Close(theirs)
	if w.forward(42, "127.0.0.1:5060", msg) {
		t.Error("an ended peer: want false")
	}
	if _, ok := w.peers[42]; ok {
		t.Error("an ended peer: want the link dropped")
	}
}
