package supervisor

import (
	"net"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// sdNotify speaks systemd's notification protocol: one datagram to
// $NOTIFY_SOCKET, a path or, with a leading @, an abstract name; without
// the variable, nothing.
func TestSdNotify(t *testing.T) {
	for _, abstract := range []bool{false, true} {
		name := filepath.Join(t.TempDir(), "notify")
		env := name
		if abstract {
			name = "\x00sipvisor-test-" + strings.ReplaceAll(t.Name(), "/", "-") + time.Now().Format("150405.000000000")
			env = "@" + name[1:]
		}
		c, err := net.ListenUnixgram("unixgram", &net.UnixAddr{Name: name, Net: "unixgram"})
		if err != nil {
			t.Fatal(err)
		}
		t.Setenv("NOTIFY_SOCKET", env)
		if err := sdNotify("MAINPID=42\nREADY=1"); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(5 * time.Second))
		buf := make([]byte, 256)
		n, err := c.Read(buf)
		c.Close()
		if err != nil {
			t.Fatal(err)
		}
		if got := string(buf[:n]); got != "MAINPID=42\nREADY=1" {
			t.Errorf("abstract %v: want the state as sent, have %q", abstract, got)
		}
	}
	t.Setenv("NOTIFY_SOCKET", "")
	if err := sdNotify("READY=1"); err != nil {
		t.Errorf("without NOTIFY_SOCKET: want nothing done, have %v", err)
	}
}

// The link carries a datagram with the socket it came in on and its
// source; a cut message is refused, not misread.
func TestLinkedDatagram(t *testing.T) {
	a, b, err := seqpacketPair()
	if err != nil {
		t.Fatal(err)
	}
	fds := [2]*upLink{{c: a}, {c: b}}
	defer fds[0].close()
	defer fds[1].close()
	from := mustAddrPort(t, "[::1]:5071")
	if err := fds[0].sendDatagram(linkForward, "udp:127.0.0.1:5060", from, []byte("OPTIONS sip:x SIP/2.0\r\n\r\n")); err != nil {
		t.Fatal(err)
	}
	m, err := fds[1].recv()
	if err != nil {
		t.Fatal(err)
	}
	if m[0] != linkForward {
		t.Fatalf("want a forward, have %q", m[0])
	}
	sock, got, dgram, ok := parseLinked(m[1:])
	if !ok || sock != "udp:127.0.0.1:5060" || got != from || string(dgram) != "OPTIONS sip:x SIP/2.0\r\n\r\n" {
		t.Fatalf("have %q %v %q %v", sock, got, dgram, ok)
	}
	// A message cut inside its header is refused (the link keeps message
	// boundaries, so this is a damaged one).
	for i := range 1 + len(sock) + 1 + len(from.String()) {
		if _, _, _, ok := parseLinked(m[1 : 1+i]); ok {
			t.Errorf("a message cut at %d of its header read as whole", i)
		}
	}
	fds[0].close()
	if err := fds[0].send([]byte{linkGo}); err != errLinkDown {
		t.Errorf("send on a closed link: want errLinkDown, have %v", err)
	}
}

func mustAddrPort(t *testing.T, s string) netip.AddrPort {
	t.Helper()
	ap, err := netip.ParseAddrPort(s)
	if err != nil {
		t.Fatal(err)
	}
	return ap
}
