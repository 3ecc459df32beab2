package testkit

import (
	"net"
	"strconv"
	"testing"
)

// FreePort is a port on 127.0.0.1 free for both UDP and TCP at the time of
// the call, for a process that must be told its port up front (SIPp, a
// config file). Another process may take it before it is used; a test
// that can bind port 0 itself should.
func FreePort(t testing.TB) int {
	t.Helper()
	for range 50 {
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		port := u.LocalAddr().(*net.UDPAddr).Port
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		u.Close()
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatal("no port free for both UDP and TCP on 127.0.0.1")
	return 0
}
