package testkit

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"
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

// Listening reports whether a socket of this host listens on port: a TCP
// socket in the LISTEN state, or a bound UDP socket, per network ("tcp" or
// "udp", IPv4 or IPv6). It reads /proc/net rather than trying to bind the
// port, which would race with the process about to bind it.
func Listening(network string, port int) bool {
	for _, f := range []string{network, network + "6"} {
		b, err := os.ReadFile("/proc/net/" + f)
		if err != nil {
			continue
		}
		for i, line := range strings.Split(string(b), "\n") {
			fs := strings.Fields(line)
			if i == 0 || len(fs) < 4 {
				continue
			}
			_, hexPort, ok := strings.Cut(fs[1], ":")
			p, err := strconv.ParseUint(hexPort, 16, 16)
			if !ok || err != nil || int(p) != port {
				continue
			}
			if network == "udp" || fs[3] == "0A" {
				return true
			}
		}
	}
	return false
}

// WaitListening waits until something listens on port (see Listening), for
// a process the test started and told its port, such as SIPp.
func WaitListening(t testing.TB, network string, port int, timeout time.Duration) {
	t.Helper()
	WaitFor(t, timeout, fmt.Sprintf("something listening on %s port %d", network, port), func() bool { return Listening(network, port) })
}
