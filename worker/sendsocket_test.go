package worker

import (
	"fmt"
	"net"
	"net/netip"
	"testing"
	"time"
)

// A socket that batches holds its responses until it is flushed or a
// request leaves: the request then goes last in the same call, with its
// own error, and a held response the kernel refuses is told to lost, not
// to the request's sender.
func TestSendSocketHoldsResponses(t *testing.T) {
	s, err := bindReplySocket(net.IPv4(127, 0, 0, 1))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	type loss struct {
		to  netip.AddrPort
		err error
	}
	var lost []loss
	s.batchSends(func(to netip.AddrPort, err error) { lost = append(lost, loss{to, err}) })

	peer, err := net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { peer.Close() })
	to := peer.LocalAddr().(*net.UDPAddr).AddrPort()
	// Port 0 is no destination: the kernel refuses to send there.
	nowhere := netip.MustParseAddrPort("127.0.0.1:0")
	read := func() string {
		t.Helper()
		buf := make([]byte, 100)
		peer.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, err := peer.Read(buf)
		if err != nil {
			t.Fatal(err)
		}
		return string(buf[:n])
	}

	for i := range 2 {
		if n, err := s.WriteToUDPAddrPort(fmt.Appendf(nil, "SIP/2.0 10%d Trying\r\n\r\n", i), to); err != nil || n == 0 {
			t.Fatalf("response %d: %d, %v", i, n, err)
		}
	}
	if s.batch.Len() != 2 {
		t.Fatalf("%d responses held, want 2", s.batch.Len())
	}
	if _, err := s.WriteToUDPAddrPort([]byte("SIP/2.0 180 Ringing\r\n\r\n"), nowhere); err != nil {
		t.Fatalf("a held response reported %v to its sender", err)
	}
	if _, err := s.WriteToUDPAddrPort([]byte("INVITE sip:b@x SIP/2.0\r\n\r\n"), to); err != nil {
		t.Fatalf("the request: %v", err)
	}
	if s.batch.Len() != 0 {
		t.Errorf("%d datagrams still held after a request", s.batch.Len())
	}
	for _, want := range []string{"SIP/2.0 100 Trying\r\n\r\n", "SIP/2.0 101 Trying\r\n\r\n", "INVITE sip:b@x SIP/2.0\r\n\r\n"} {
		if got := read(); got != want {
			t.Errorf("peer read %q, want %q", got, want)
		}
	}
	if len(lost) != 1 || lost[0].to != nowhere || lost[0].err == nil {
		t.Errorf("lost = %v, want the response to %v", lost, nowhere)
	}

	// A request the kernel refuses gets its error, after the responses
	// held before it have left.
	s.WriteToUDPAddrPort([]byte("SIP/2.0 200 OK\r\n\r\n"), to)
	if _, err := s.WriteToUDPAddrPort([]byte("BYE sip:b@x SIP/2.0\r\n\r\n"), nowhere); err == nil {
		t.Error("a request the kernel refused reported no error")
	}
	if got := read(); got != "SIP/2.0 200 OK\r\n\r\n" {
		t.Errorf("peer read %q, want the 200", got)
	}

	// Flushed, a held response leaves.
	s.WriteToUDPAddrPort([]byte("SIP/2.0 486 Busy Here\r\n\r\n"), to)
	s.flush()
	if got := read(); got != "SIP/2.0 486 Busy Here\r\n\r\n" {
		t.Errorf("peer read %q after a flush, want the 486", got)
	}
	if len(lost) != 1 {
		t.Errorf("lost = %v, want only the first", lost)
	}
}
