package listeners

import (
	"net"
	"testing"
	"time"
)

func TestParseAddr(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in   string
		want Addr
		err  bool
	}{
		{in: "udp:127.0.0.1:5060", want: Addr{"udp", "127.0.0.1", 5060}},
		{in: "TCP:[::1]:5061", want: Addr{"tcp", "::1", 5061}},
		{in: "udp:127.0.0.1:0", want: Addr{"udp", "127.0.0.1", 0}},
		{in: "sctp:127.0.0.1:5060", err: true},
		{in: "udp:127.0.0.1:70000", err: true},
		{in: "udp:127.0.0.1", err: true},
		{in: "127.0.0.1:5060", err: true},
	} {
		have, err := ParseAddr(tc.in)
		if (err != nil) != tc.err {
			t.Errorf("%s: want error %v, have %v", tc.in, tc.err, err)
			continue
		}
		if err == nil && have != tc.want {
			t.Errorf("%s: want %v, have %v", tc.in, tc.want, have)
		}
	}
}

// A socket exported with Files and rebuilt with FromFiles sends from the very
// address the supervisor bound: what a worker relies on to reply from the
// listening address.
func TestExportImportSendsFromBoundAddress(t *testing.T) {
	t.Parallel()
	ss, err := Bind([]Addr{{"udp", "127.0.0.1", 0}, {"tcp", "127.0.0.1", 0}})
	if err != nil {
		t.Fatal(err)
	}
	defer Close(ss)
	if ss[0].Bound.Port == 0 || ss[1].Bound.Port == 0 {
		t.Fatalf("want bound ports, have %v %v", ss[0].Bound, ss[1].Bound)
	}
	files, names, err := Files(ss)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || names[0] != ss[0].Name() {
		t.Fatalf("want one udp file named %s, have %v", ss[0].Name(), names)
	}
	conns, err := FromFiles(names, files)
	if err != nil {
		t.Fatal(err)
	}
	defer conns[0].Close()

	peer, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	if _, err := conns[0].WriteTo([]byte("hello"), peer.LocalAddr()); err != nil {
		t.Fatal(err)
	}
	peer.SetReadDeadline(time.Now().Add(5 * time.Second))
	buf := make([]byte, 64)
	n, from, err := peer.ReadFrom(buf)
	if err != nil {
		t.Fatal(err)
	}
	if string(buf[:n]) != "hello" || from.(*net.UDPAddr).Port != ss[0].Bound.Port {
		t.Fatalf("want hello from port %d, have %q from %v", ss[0].Bound.Port, buf[:n], from)
	}
}

func TestBindFailureClosesEverything(t *testing.T) {
	t.Parallel()
	ss, err := Bind([]Addr{{"udp", "127.0.0.1", 0}})
	if err != nil {
		t.Fatal(err)
	}
	defer Close(ss)
	// The same port again must fail, and the first socket of the second call
	// must have been released.
	_, err = Bind([]Addr{{"udp", "127.0.0.1", 0}, ss[0].Bound})
	if err == nil {
		t.Fatal("want bind error for a port in use")
	}
}

// A group's first socket still refuses a port in use, and the sockets that
// join it share its port.
func TestUDPGroups(t *testing.T) {
	addrs := []Addr{{Proto: "udp", Host: "127.0.0.1", Port: 0}}
	ss, err := BindUDPGroups(addrs, true)
	if err != nil {
		t.Fatal(err)
	}
	defer Close(ss)
	f, err := JoinGroup(ss[0])
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	c, err := net.FilePacketConn(f)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if got, want := c.LocalAddr().String(), ss[0].UDP.LocalAddr().String(); got != want {
		t.Fatalf("member bound to %s, the group's first socket to %s", got, want)
	}
	// The same port again: in use, with or without groups.
	taken := []Addr{{Proto: "udp", Host: "127.0.0.1", Port: ss[0].Bound.Port}}
	for _, groups := range []bool{false, true} {
		if again, err := BindUDPGroups(taken, groups); err == nil {
			Close(again)
			t.Fatalf("groups=%v: a second bind of %s succeeded", groups, ss[0].Bound)
		}
	}
	// A wildcard's group: the first socket is a dual-stack IPv6 one, and so
	// is its member, or the two would be no group.
	wild, err := BindUDPGroups([]Addr{{Proto: "udp", Host: "0.0.0.0", Port: 0}}, true)
	if err != nil {
		t.Fatal(err)
	}
	defer Close(wild)
	wf, err := JoinGroup(wild[0])
	if err != nil {
		t.Fatal(err)
	}
	defer wf.Close()
	wc, err := net.FilePacketConn(wf)
	if err != nil {
		t.Fatal(err)
	}
	defer wc.Close()
	if got, want := wc.LocalAddr().String(), wild[0].UDP.LocalAddr().String(); got != want {
		t.Fatalf("wildcard member bound to %s, the group's first socket to %s", got, want)
	}
	if _, err := JoinGroup(&Socket{Addr: taken[0], Bound: taken[0]}); err == nil {
		t.Fatal("JoinGroup of a socket with no UDP connection succeeded")
	}
}

// A group bound on port 0 gets a port of its own even when other
// SO_REUSEPORT sockets of the same user hold many ports (other nodes on
// the host, started on port 0 too): the kernel's choice of a port for a
// reuse-port socket counts a port another such socket holds as free, and
// joining that socket's group would send the node's datagrams to the
// other's socket, whose program places them on its own index 0.
func TestUDPGroupOnPortZeroSharesNoPort(t *testing.T) {
	const neighbors, binds = 2000, 100
	held := map[int]bool{}
	for range neighbors {
		n, err := listenReusePort(&net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		held[n.LocalAddr().(*net.UDPAddr).Port] = true
	}
	for i := range binds {
		ss, err := BindUDPGroups([]Addr{{Proto: "udp", Host: "127.0.0.1", Port: 0}}, true)
		if err != nil {
			t.Fatal(err)
		}
		p := ss[0].Bound.Port
		Close(ss)
		if held[p] {
			t.Fatalf("bind %d of %d: port %d, which a neighbor's reuse-port socket holds: the node joined its group", i+1, binds, p)
		}
	}
}
