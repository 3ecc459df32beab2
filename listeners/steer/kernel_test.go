package steer

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// workers is the number of worker sockets in a test group (indexes 1..4).
const workers = 4

// arrival bounds the wait for one datagram on loopback; it only matters
// when a datagram is lost, which the test then reports.
const arrival = time.Minute

// groupAddr is the loopback address the test groups bind. Not 127.0.0.1:
// a socket another package's test binds there to port 0 with SO_REUSEPORT,
// as the same user, may be given a port already in a test group (the
// kernel counts a compatible reuseport socket as no conflict) and join it,
// shifting the indexes the programs select.
var groupAddr = [4]byte{127, 0, 83, 1}

// group is a UDP SO_REUSEPORT group on groupAddr: fds[0] the door, then
// the workers, in bind order (the kernel's socket indexes).
type group struct {
	fds    []int
	client *net.UDPConn
	buf    []byte
}

func reuseportSocket(t testing.TB, port int) (int, int) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
		t.Fatal(err)
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: groupAddr}); err != nil {
		t.Fatal(err)
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		t.Fatal(err)
	}
	return fd, sa.(*unix.SockaddrInet4).Port
}

func newGroup(t testing.TB, prog []unix.SockFilter) *group {
	t.Helper()
	door, port := reuseportSocket(t, 0)
	g := &group{fds: []int{door}, buf: make([]byte, 65536)}
	for range workers {
		fd, _ := reuseportSocket(t, port)
		g.fds = append(g.fds, fd)
	}
	if err := Attach(g.fds[len(g.fds)-1], prog); err != nil {
		t.Fatal(err)
	}
	c, err := net.DialUDP("udp4", nil, &net.UDPAddr{IP: groupAddr[:], Port: port})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	g.client = c
	return g
}

// deliver sends payload and returns the index of the socket that received
// it, waiting for its arrival.
func (g *group) deliver(t testing.TB, payload []byte) int {
	t.Helper()
	if _, err := g.client.Write(payload); err != nil {
		t.Fatal(err)
	}
	pfds := make([]unix.PollFd, len(g.fds))
	deadline := time.Now().Add(arrival)
	for {
		for i, fd := range g.fds {
			pfds[i] = unix.PollFd{Fd: int32(fd), Events: unix.POLLIN}
		}
		left := time.Until(deadline)
		if left <= 0 {
			t.Fatalf("datagram %.40q did not arrive in %v", payload, arrival)
		}
		if _, err := unix.Poll(pfds, int(left/time.Millisecond)+1); err != nil && !errors.Is(err, unix.EINTR) {
			t.Fatal(err)
		}
		for i, p := range pfds {
			if p.Revents&unix.POLLIN == 0 {
				continue
			}
			n, _, err := unix.Recvfrom(g.fds[i], g.buf, 0)
			if errors.Is(err, unix.EAGAIN) {
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(g.buf[:n], payload) {
				t.Fatalf("socket %d got %.40q while waiting for %.40q", i, g.buf[:n], payload)
			}
			return i
		}
	}
}

// namedTable spreads the buckets over the workers (door buckets have a
// test of their own).
func namedTable() *Table {
	var t Table
	for i := range t {
		t[i] = uint8(1 + i%workers)
	}
	return &t
}

func TestKernelNamedCases(t *testing.T) {
	tab := namedTable()
	g := newGroup(t, Program(tab))
	got := map[string]int{}
	doorBuckets := 0
	for _, c := range namedCases() {
		want := predict(tab, []byte(c.payload))
		if c.want != "" && want == 0 {
			// A hashed case in a door bucket would pass without showing
			// the hash reached a worker.
			doorBuckets++
		}
		i := g.deliver(t, []byte(c.payload))
		if i != want {
			t.Errorf("%s: socket %d, Locate predicts %d", c.name, i, want)
		}
		if c.sameAs != "" && i != got[c.sameAs] {
			t.Errorf("%s: socket %d, %s went to %d", c.name, i, c.sameAs, got[c.sameAs])
		}
		got[c.name] = i
	}
	if doorBuckets > 0 {
		t.Errorf("%d hashed cases fall in door buckets; change their Call-IDs", doorBuckets)
	}
}

// TestKernelPayloadAtZero: for SO_ATTACH_REUSEPORT_CBPF on UDP, offset 0
// is the first payload byte (the kernel pulls the UDP header first).
func TestKernelPayloadAtZero(t *testing.T) {
	g := newGroup(t, []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_B | unix.BPF_ABS, K: 0},
		{Code: unix.BPF_ALU | unix.BPF_SUB | unix.BPF_K, K: '0'},
		{Code: unix.BPF_RET | unix.BPF_A},
	})
	for _, i := range []int{3, 1, 4, 0, 2} {
		if got := g.deliver(t, fmt.Appendf(nil, "%d payload", i)); got != i {
			t.Fatalf("payload starting %d reached socket %d", i, got)
		}
	}
}

// sippCallIDs and uuids are the shapes of Call-ID the random test sends.
func randomCallID(r *rand.Rand, i int) string {
	if i%2 == 0 {
		return fmt.Sprintf("%d-%d@127.0.0.1", i/2+1, 1000+r.IntN(60000))
	}
	return fmt.Sprintf("%08x-%04x-%04x-%04x-%012x",
		r.Uint32(), r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint32()&0xffff, r.Uint64()&0xffffffffffff)
}

func request(callID string) []byte {
	return []byte(options + "Call-ID: " + callID + "\r\nCSeq: 1 OPTIONS\r\n\r\n")
}

func TestKernelRandomCallIDs(t *testing.T) {
	const n = 2000
	var even Table
	for i := range even {
		even[i] = uint8(1 + i%workers)
	}
	g := newGroup(t, Program(&even))
	r := rand.New(rand.NewPCG(1, 2))
	var per [1 + workers]int
	start := time.Now()
	for i := range n {
		p := request(randomCallID(r, i))
		want := predict(&even, p)
		got := g.deliver(t, p)
		if got != want || want == 0 {
			t.Fatalf("%q: socket %d, Locate predicts %d", p, got, want)
		}
		per[got]++
	}
	t.Logf("%d datagrams in %v: per socket %v", n, time.Since(start), per)
	for i := 1; i <= workers; i++ {
		if per[i] < n*15/100 || per[i] > n*35/100 {
			t.Errorf("socket %d got %d of %d", i, per[i], n)
		}
	}

	// Doors in the table: some datagrams go to 0, the rest still as
	// predicted.
	doors := namedTable()
	for i := range doors {
		if i%8 == 7 {
			doors[i] = 0
		}
	}
	if err := Attach(g.fds[2], Program(doors)); err != nil {
		t.Fatal(err)
	}
	door := 0
	for i := range n / 4 {
		p := request(randomCallID(r, i))
		want := predict(doors, p)
		if got := g.deliver(t, p); got != want {
			t.Fatalf("%q: socket %d, Locate predicts %d", p, got, want)
		}
		if want == 0 {
			door++
		}
	}
	if door == 0 {
		t.Error("no datagram reached a door bucket")
	}
}

// TestKernelReplace: attaching through any member replaces the group's
// program for the next datagram.
func TestKernelReplace(t *testing.T) {
	one, three := Table{}, Table{}
	for i := range one {
		one[i], three[i] = 1, 3
	}
	g := newGroup(t, Program(&one))
	p := []byte(sippInvite)
	steps := []struct {
		via  int
		prog []unix.SockFilter
		want int
	}{
		{-1, nil, 1},
		{2, DoorProgram(), 0},
		{4, Program(&three), 3},
		{0, Program(&one), 1},
		{3, DoorProgram(), 0},
	}
	for _, s := range steps {
		if s.prog != nil {
			if err := Attach(g.fds[s.via], s.prog); err != nil {
				t.Fatal(err)
			}
		}
		for range 3 {
			if got := g.deliver(t, p); got != s.want {
				t.Fatalf("after attaching through %d: socket %d, want %d", s.via, got, s.want)
			}
		}
	}
}

// TestKernelAcceptsLargest: the kernel takes the program at its largest
// table values, and Attach refuses what the kernel would.
func TestKernelAcceptsLargest(t *testing.T) {
	var full Table
	for i := range full {
		full[i] = 255
	}
	g := newGroup(t, DoorProgram())
	if err := Attach(g.fds[1], Program(&full)); err != nil {
		t.Fatal(err)
	}
	if err := Attach(g.fds[1], make([]unix.SockFilter, 4097)); err == nil {
		t.Fatal("Attach took 4097 instructions")
	}
}

// BenchmarkKernelDeliver prices the program in the kernel: one datagram
// sent and received per op, through a group with the door's one-instruction
// program and through Program. The difference is the program's run (JITed
// where the kernel JITs classic BPF), next to a loopback round of syscalls.
func BenchmarkKernelDeliver(b *testing.B) {
	var even Table
	for i := range even {
		even[i] = uint8(1 + i%workers)
	}
	for _, c := range []struct{ name, payload string }{
		{"invite", sippInvite},
		{"no call-id", padTo(Window+40, "x")[:Window+40]},
	} {
		for _, p := range []struct {
			name string
			prog []unix.SockFilter
		}{{"door", DoorProgram()}, {"program", Program(&even)}} {
			b.Run(c.name+"/"+p.name, func(b *testing.B) {
				g := newGroup(b, p.prog)
				payload := []byte(c.payload)
				for b.Loop() {
					g.deliver(b, payload)
				}
			})
		}
	}
}
