package engine

import (
	"net"
	"net/netip"
	"testing"
)

// A connection the peer reset before a worker took its descriptor has no
// remote address; taking it must not fail the worker.
func TestAddrPortOfAResetConnection(t *testing.T) {
	t.Parallel()
	if ap := addrPortOf(nil); ap != (netip.AddrPort{}) {
		t.Fatalf("addrPortOf(nil): want the zero AddrPort, have %v", ap)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	client, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer server.Close()
	// SO_LINGER 0: the close sends a reset, and the accepted socket is no
	// longer connected.
	client.(*net.TCPConn).SetLinger(0)
	client.Close()
	f, err := server.(*net.TCPConn).File()
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	// The reset may take a moment to reach the accepted socket; either way
	// the descriptor is taken without a panic.
	c, err := net.FileConn(f)
	if err != nil {
		return
	}
	defer c.Close()
	_ = addrPortOf(c.RemoteAddr())
}
