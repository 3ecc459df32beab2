package worker

import (
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/wire"
	"golang.org/x/sys/unix"
)

// A burst that all came before the loop's read is read whole before the
// loop waits: the network poller waits edge-triggered, so a datagram left
// in the socket after a full batch would wait for the next one to come,
// however long that takes (once, the answers to 20 calls a TCP worker
// relayed waited 500 ms, until its retransmissions drew more).
func TestSourceReaderReadsBurstBeforeWaiting(t *testing.T) {
	for _, wait := range []time.Duration{0, 20 * time.Millisecond} {
		t.Run(fmt.Sprintf("wait=%v", wait), func(t *testing.T) {
			r, set, fds, sock := newTestSources(t)
			c := dialTo(t, sock)
			const burst = 3*directBatch + 2
			for i := range burst {
				if _, err := fmt.Fprintf(c, "datagram %d", i); err != nil {
					t.Fatal(err)
				}
			}
			// A frame of the data channel too, which is read in its turn.
			if _, err := unix.Write(fds[1], []byte("frame")); err != nil {
				t.Fatal(err)
			}
			var got, frames int
			for r.wait = int64(wait); r.recv(set); r.wait = int64(wait) {
				if r.rerr != nil {
					t.Fatalf("read %d: %v", got, r.rerr)
				}
				switch r.src {
				case -1:
					frames++
				default:
					if want := fmt.Sprintf("datagram %d", got); string(r.dframe[len(r.dframe)-len(want):]) != want {
						t.Fatalf("read %q, want %q", r.dframe, want)
					}
					got++
				}
			}
			if got != burst || frames != 1 {
				t.Errorf("read %d datagrams of %d and %d frames of 1 before waiting", got, burst, frames)
			}
		})
	}
}

// dialTo is a UDP client of sock.
func dialTo(t *testing.T, sock *net.UDPConn) *net.UDPConn {
	t.Helper()
	c, err := net.DialUDP("udp4", nil, sock.LocalAddr().(*net.UDPAddr))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// quiet marks every source of r as known to have nothing.
func quiet(r *sourceReader) {
	for j := range r.maybe {
		r.maybe[j] = false
	}
}

// pollerEpoll is an epoll set that watches the reader's set as Go's
// network poller does (edge-triggered); closed at the test's end.
func pollerEpoll(t *testing.T, set uintptr) int {
	t.Helper()
	outer, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(outer) })
	if err := unix.EpollCtl(outer, unix.EPOLL_CTL_ADD, int(set), &unix.EpollEvent{Events: unix.EPOLLIN | unix.EPOLLET, Fd: int32(set)}); err != nil {
		t.Fatal(err)
	}
	return outer
}

// pollerWait waits, as the network poller would, until the set signals.
func pollerWait(t *testing.T, outer int) {
	t.Helper()
	ev := make([]unix.EpollEvent, 1)
	for {
		n, err := unix.EpollWait(outer, ev, 10_000)
		if err == unix.EINTR {
			continue
		}
		if err != nil || n != 1 {
			t.Fatalf("the set did not signal the datagram: %d events, %v", n, err)
		}
		return
	}
}

// quietWait marks r's sources empty and waits in its set until a wait
// ends quiet (a signal of the runtime's may end one early, not quiet then).
func quietWait(t *testing.T, r *sourceReader, set uintptr) {
	t.Helper()
	quiet(r)
	for i := 0; !r.setQuiet; i++ {
		if i == 100 {
			t.Fatal("no wait in the set ended quiet in 100")
		}
		r.wait = int64(2 * time.Millisecond)
		if r.recv(set) {
			t.Fatalf("recv read src %d (error %v) from sources with nothing", r.src, r.rerr)
		}
	}
}

// newTestSources is a reader of a data channel (fds[0]; the supervisor's
// end is fds[1]) and a direct socket, and their poll set.
func newTestSources(t *testing.T) (r *sourceReader, set uintptr, fds [2]int, sock *net.UDPConn) {
	t.Helper()
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_NONBLOCK|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fds[0]); unix.Close(fds[1]) })
	sock, err = net.ListenUDP("udp4", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { sock.Close() })
	f, err := sock.File()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	fd := int(f.Fd())
	if _, err := openDirect(fd); err != nil {
		t.Fatal(err)
	}
	ep, err := unix.EpollCreate1(unix.EPOLL_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(ep) })
	for _, fd := range []int{fds[0], fd} {
		if err := unix.EpollCtl(ep, unix.EPOLL_CTL_ADD, fd, &unix.EpollEvent{Events: unix.EPOLLIN, Fd: int32(fd)}); err != nil {
			t.Fatal(err)
		}
	}
	return newSourceReader(fds[0], nil, &direct{fd: fd, oob: make([]byte, 64)}), uintptr(ep), [2]int{fds[0], fds[1]}, sock
}

// A read asked to wait waits on the direct socket, then in the set, or in
// the set alone (with reply sockets): it returns with what comes from
// either source, or with nothing once its time is up, and counts the time
// it waited.
func TestSourceReaderWaitsInSet(t *testing.T) {
	for _, on := range []bool{true, false} {
		t.Run(fmt.Sprintf("socket first %v", on), func(t *testing.T) { testSourceReaderWaits(t, on) })
	}
}

func testSourceReaderWaits(t *testing.T, blockOn bool) {
	r, set, fds, sock := newTestSources(t)
	r.blockOn = blockOn
	c := dialTo(t, sock)

	// Nothing is known to be readable: the read goes to its wait at once.
	quiet(r)
	const long = int64(time.Minute)
	// A datagram there as the wait begins.
	if _, err := c.Write([]byte("datagram")); err != nil {
		t.Fatal(err)
	}
	for r.wait = long; !r.recv(set); r.wait = long {
	}
	if r.rerr != nil || r.src != 0 || string(r.dframe[len(r.dframe)-8:]) != "datagram" {
		t.Fatalf("recv = src %d, error %v, %q (bn %d bi %d); want the datagram", r.src, r.rerr, r.dframe, r.bn, r.bi)
	}
	// One that comes while it waits.
	r.maybe[len(r.maybe)-1] = false
	sent := make(chan error, 1)
	go func() {
		// Most likely after the reader began to wait; if not, the set
		// says the socket is readable as it begins.
		time.Sleep(10 * time.Millisecond)
		_, err := c.Write([]byte("datagram"))
		sent <- err
	}()
	// A signal of the runtime's may end the wait early, with nothing.
	for r.wait = long; !r.recv(set); r.wait = long {
	}
	if r.rerr != nil || r.src != 0 || string(r.dframe[len(r.dframe)-8:]) != "datagram" {
		t.Fatalf("recv = src %d, error %v, %q (bn %d bi %d); want the datagram", r.src, r.rerr, r.dframe, r.bn, r.bi)
	}
	if err := <-sent; err != nil {
		t.Fatal(err)
	}

	// A frame, which the wait on the socket alone leaves to the set's
	// after blockFor (the wait before lasted longer: the next would go to
	// the set at once).
	r.maybe[len(r.maybe)-1] = false
	r.waits = waitHistory{}
	if _, err := unix.Write(fds[1], []byte("frame")); err != nil {
		t.Fatal(err)
	}
	for r.wait = long; !r.recv(set); r.wait = long {
	}
	if r.rerr != nil || r.src != -1 || string(r.buf[:r.n]) != "frame" {
		t.Fatalf("recv = src %d, error %v; want the data channel's frame", r.src, r.rerr)
	}
	// A frame other than the echo sends the next waits to the set; an
	// echo leaves them as they were.
	if r.waits.slow != slowWaits {
		t.Fatalf("after a frame slow = %d, want %d", r.waits.slow, slowWaits)
	}
	r.waits = waitHistory{}
	echo := wire.PutEcho(nil, wire.FrameEcho, 1, 0)
	if _, err := unix.Write(fds[1], echo); err != nil {
		t.Fatal(err)
	}
	for r.wait = long; !r.recv(set); r.wait = long {
	}
	if r.rerr != nil || r.src != -1 || !r.echo() {
		t.Fatalf("recv = src %d, error %v, %q; want the echo", r.src, r.rerr, r.buf[:r.n])
	}
	if r.waits.slow != 0 {
		t.Fatalf("after an echo slow = %d, want 0", r.waits.slow)
	}

	// With nothing sent, the read returns nothing, and counts the time it
	// waited. A signal of the runtime's may end a wait early: the read is
	// asked again for what is left, as the worker's loop does.
	before := r.blocked
	for r.blocked-before < 20*time.Millisecond {
		r.wait = int64(20*time.Millisecond - (r.blocked - before))
		if r.recv(set) {
			t.Fatalf("recv read from source %d with nothing sent", r.src)
		}
	}
}

func TestAfterWait(t *testing.T) {
	ms := time.Millisecond
	for _, tc := range []struct {
		name string
		slow int
		took time.Duration
		want int
	}{
		{"a long wait", 0, blockFor, slowWaits},
		{"a long wait while slow", 1, 20 * ms, slowWaits},
		{"a short wait after a long one", slowWaits, blockFor - 1, slowWaits - 1},
		{"the last short wait", 1, ms, 0},
		{"short waits in a row", 0, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := afterWait(tc.slow, tc.took); got != tc.want {
				t.Errorf("afterWait(%d, %v) = %d, want %d", tc.slow, tc.took, got, tc.want)
			}
		})
	}
	// A refused INVITE and its ACK: short and long waits in turn never
	// send a wait to the socket first.
	slow := 0
	for i := range 10 {
		took := 10 * ms
		if i%2 == 1 {
			took = 100 * time.Microsecond
		}
		if slow = afterWait(slow, took); i > 0 && slow == 0 {
			t.Fatalf("wait %d: the next goes to the socket first", i)
		}
	}
}

func TestRawWaitFor(t *testing.T) {
	t0 := time.Unix(1000, 0)
	ms := time.Millisecond
	for _, tc := range []struct {
		name      string
		now, wake time.Time
		since     time.Time
		started   int
		want      time.Duration
		ok        bool
	}{
		{"until the wake-up", t0, t0.Add(5 * ms), t0, 0, 5 * ms, true},
		{"no longer than rawSpan after the last read", t0.Add(rawSpan / 2), t0.Add(time.Second), t0, 0, rawSpan - rawSpan/2, true},
		{"quiet for rawSpan: through the poller", t0.Add(rawSpan), t0.Add(time.Second), t0, 0, 0, false},
		{"quiet for longer", t0.Add(time.Second), t0.Add(2 * time.Second), t0, 0, 0, false},
		{"the wake-up has come", t0.Add(5 * ms), t0.Add(5 * ms), t0, 0, 0, false},
		{"a goroutine started since may wait for the poller", t0, t0.Add(5 * ms), t0, 1, 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, ok := rawWaitFor(tc.now, tc.wake, tc.since, tc.started)
			if ok != tc.ok || (ok && d != tc.want) {
				t.Errorf("rawWaitFor = %v, %v; want %v, %v", d, ok, tc.want, tc.ok)
			}
		})
	}
}

// Datagrams that never pause for blockFor do not keep the data channel's
// frame unread: a reader that waited on its socket alone each time would
// never ask the set, and the supervisor's echo would go unanswered.
func TestSourceReaderReadsFramesBetweenDatagrams(t *testing.T) {
	r, set, fds, sock := newTestSources(t)
	c := dialTo(t, sock)
	quiet(r)
	if _, err := unix.Write(fds[1], []byte("frame")); err != nil {
		t.Fatal(err)
	}
	r.setAt = time.Now()
	// Each read finds a datagram already there.
	deadline := time.Now().Add(10 * time.Second)
	for n := 0; time.Now().Before(deadline); n++ {
		if _, err := c.Write([]byte("datagram")); err != nil {
			t.Fatal(err)
		}
		for r.wait = int64(time.Minute); !r.recv(set); r.wait = int64(time.Minute) {
		}
		if r.rerr != nil {
			t.Fatal(r.rerr)
		}
		if r.src == -1 {
			if string(r.buf[:r.n]) != "frame" {
				t.Fatalf("read %q from the data channel", r.buf[:r.n])
			}
			t.Logf("the frame read after %d datagrams", n)
			return
		}
	}
	t.Fatal("the frame was never read while datagrams kept coming")
}

// A wait in the set that ends with nothing leaves it as a poll does: the
// read that goes to the network poller next does not poll it again, and
// the set, as the poller watches it (edge-triggered), still signals the
// datagram that comes after.
func TestSourceReaderSparesPollAfterQuietWait(t *testing.T) {
	r, set, _, sock := newTestSources(t)
	c := dialTo(t, sock)
	outer := pollerEpoll(t, set)
	quietWait(t, r, set)
	polls := r.polls
	if r.wait = 0; r.recv(set) {
		t.Fatalf("recv read src %d (error %v) from sources with nothing", r.src, r.rerr)
	}
	if r.polls != polls {
		t.Fatalf("the set was polled %d times after a quiet wait, want 0", r.polls-polls)
	}
	if !r.maybe[len(r.maybe)-1] {
		t.Fatal("the direct socket is not read first after the network poller's wait")
	}
	// The network poller's wait: the datagram wakes it.
	if _, err := c.Write([]byte("datagram")); err != nil {
		t.Fatal(err)
	}
	pollerWait(t, outer)
	if !r.recv(set) || r.rerr != nil || r.src != 0 || string(r.dframe[len(r.dframe)-8:]) != "datagram" {
		t.Fatalf("recv = src %d, error %v, %q; want the datagram", r.src, r.rerr, r.dframe)
	}
	// A wait that ends with something is not quiet; nor one cut short.
	if r.setQuiet {
		t.Fatal("quiet after a read")
	}
	// The next read that goes to the poller polls the set.
	quiet(r)
	polls = r.polls
	if r.wait = 0; r.recv(set) {
		t.Fatalf("recv read src %d (error %v) from sources with nothing", r.src, r.rerr)
	}
	if r.polls != polls+1 {
		t.Fatalf("the set was polled %d times, want 1", r.polls-polls)
	}
}

// The network poller's wait is a wait on the set: the reader's call after
// its wake-up counts as the set's answer, and the wait after it may go to
// the socket first (a refused INVITE's ACK, after the INVITE woke the
// poller); the poller's first call, before it waited, is no answer.
func TestRecvPolledCountsThePollersWake(t *testing.T) {
	r, set, _, sock := newTestSources(t)
	c := dialTo(t, sock)
	outer := pollerEpoll(t, set)
	// A quiet wait in the set, as before the loop goes to the poller: the
	// poller's first call does not poll the set again.
	quietWait(t, r, set)
	// The set's answer is made old, as after a long wait.
	before := time.Now().Add(-time.Second)
	r.setAt = before
	r.polled = false
	if r.recvPolled(set) {
		t.Fatalf("recv read src %d (error %v) from sources with nothing", r.src, r.rerr)
	}
	if !r.setAt.Equal(before) {
		t.Fatal("the poller's first call, before its wait, counted as the set's answer")
	}
	send := func(what string) {
		t.Helper()
		if _, err := c.Write([]byte(what)); err != nil {
			t.Fatal(err)
		}
	}
	send("invite")
	pollerWait(t, outer)
	woke := time.Now()
	if !r.recvPolled(set) || r.rerr != nil || string(r.dframe[len(r.dframe)-6:]) != "invite" {
		t.Fatalf("recvPolled = src %d, error %v, %q; want the datagram", r.src, r.rerr, r.dframe)
	}
	if r.setAt.Before(woke) {
		t.Fatalf("the call after the poller's wake-up left the set's answer at %v, before the wake-up", r.setAt)
	}
	// The next wait, with a history that foretells a datagram, goes to the
	// socket first, and the datagram comes with it.
	quiet(r)
	r.waits = waitHistory{}
	send("ack")
	waits := r.socketWaits
	if r.wait = int64(time.Second); !r.recv(set) || r.rerr != nil || string(r.dframe[len(r.dframe)-3:]) != "ack" {
		t.Fatalf("recv = src %d, error %v, %q; want the datagram", r.src, r.rerr, r.dframe)
	}
	if r.socketWaits != waits+1 {
		t.Fatal("the wait after the poller's wake-up did not go to the socket first")
	}
	// Without the wake-up's answer, the set's last is too old: the same
	// wait goes to the set, which has waited on the data channel too.
	quiet(r)
	r.waits = waitHistory{}
	r.setAt = time.Now().Add(-blockFor)
	send("bye")
	waits = r.socketWaits
	if r.wait = int64(time.Second); !r.recv(set) || r.rerr != nil || string(r.dframe[len(r.dframe)-3:]) != "bye" {
		t.Fatalf("recv = src %d, error %v, %q; want the datagram", r.src, r.rerr, r.dframe)
	}
	if r.socketWaits != waits {
		t.Fatal("a wait blockFor after the set's last answer went to the socket first")
	}
}

// TestWaitHistory plays sequences of waits through waitHistory and checks
// which go to the socket first.
func TestWaitHistory(t *testing.T) {
	long, short := 10*time.Millisecond, 100*time.Microsecond
	for _, tc := range []struct {
		name  string
		waits []time.Duration
		// want says, for each wait, whether it went to the socket first:
		// the first, with no history, does.
		want []bool
	}{
		{
			name:  "a refused INVITE and its ACK, in turn: every ACK after the first waits on the socket",
			waits: []time.Duration{long, short, long, short, long, short},
			want:  []bool{true, false, false, true, false, true},
		},
		{
			name:  "INVITEs alone: no wait on the socket after the first",
			waits: []time.Duration{long, long, long, long, long},
			want:  []bool{true, false, false, false, false},
		},
		{
			name:  "a burst trusted, then an INVITE alone: one wait on the socket that times out, then none",
			waits: []time.Duration{long, short, long, long, long, long},
			want:  []bool{true, false, false, true, false, false},
		},
		{
			name:  "a stream: after three short waits in a row",
			waits: []time.Duration{long, short, short, short, short},
			want:  []bool{true, false, false, false, true},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var h waitHistory
			for i, took := range tc.waits {
				if got := h.socketFirst(); got != tc.want[i] {
					t.Fatalf("wait %d: socket first %v, want %v (history %+v)", i, got, tc.want[i], h)
				}
				h = h.waited(took)
			}
		})
	}
	// A frame other than the echo ends the trust in bursts as in streams.
	h := waitHistory{}.waited(10 * time.Millisecond).waited(time.Microsecond).waited(10 * time.Millisecond)
	if !h.socketFirst() {
		t.Fatalf("a burst trusted: want the socket first, have %+v", h)
	}
	if h = h.framed(); h.socketFirst() {
		t.Fatalf("after a frame: want the set first, have %+v", h)
	}
	if h = h.waited(time.Microsecond).waited(time.Microsecond).waited(time.Microsecond); !h.socketFirst() {
		t.Fatalf("three short waits after the frame: want the socket first, have %+v", h)
	}
}
