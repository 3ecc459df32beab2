package lifecycle

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// handledLate has a request that waited long in a worker's queue handled
// late rather than dropped (max_queue_wait): a loaded machine that stops
// a worker for two seconds has it drop a datagram its client would
// retransmit, and these clients never do. Nor is a new session refused
// because a worker waited for the CPU (queue-delay admission): these
// tests are about what a transition loses, and a shared 2-core machine
// running them beside other packages reads as overload. The RTT throttle
// stays: one test switches direct reads with it.
const handledLate = "max_queue_wait = 0\nqueue_delay_admission = 0\n"

// loneTrace is what happened to lone INVITEs, each sent once and never
// retransmitted, by Call-ID: when it was sent and what came back.
type loneTrace struct {
	mu    sync.Mutex
	start time.Time
	sent  map[string]time.Duration
	order []string
	reply map[string][]string // what the caller got, "+offset status"
	seen  map[string]time.Duration
}

func newLoneTrace() *loneTrace {
	return &loneTrace{start: time.Now(), sent: map[string]time.Duration{}, reply: map[string][]string{}, seen: map[string]time.Duration{}}
}

func (tr *loneTrace) since() time.Duration { return time.Since(tr.start).Round(time.Millisecond) }

// lost is the Call-IDs of which neither the caller had an answer nor the
// callee the INVITE.
func (tr *loneTrace) lost() []string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var l []string
	for _, id := range tr.order {
		if _, ok := tr.seen[id]; !ok && len(tr.reply[id]) == 0 {
			l = append(l, id)
		}
	}
	return l
}

func (tr *loneTrace) String() string {
	tr.mu.Lock()
	defer tr.mu.Unlock()
	var b strings.Builder
	for _, id := range tr.order {
		at := "-"
		if d, ok := tr.seen[id]; ok {
			at = "+" + d.String()
		}
		fmt.Fprintf(&b, "  %s sent +%v; at the callee %s; at the caller %v\n", id, tr.sent[id], at, tr.reply[id])
	}
	return b.String()
}

// callIDOf is the Call-ID's value in a message.
func callIDOf(m harness.Msg) string {
	id := m.Header("Call-ID")
	if id == "" {
		id = m.Header("i")
	}
	return strings.TrimSpace(id)
}

// loneInvites sends one INVITE every gap for span, each once, from caller
// to callee through proxy, with the callee answering each 486 and the
// caller acknowledging every final answer, and waits until each has been
// answered or seen at the callee (or settle has passed since the last).
func loneInvites(t *testing.T, tag string, caller, callee *harness.Peer, proxy *net.UDPAddr, gap, span, settle time.Duration) *loneTrace {
	tr := newLoneTrace()
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			m, ok := callee.Recv(50 * time.Millisecond)
			if !ok || m.Method() != "INVITE" {
				continue
			}
			id := callIDOf(m)
			tr.mu.Lock()
			if _, dup := tr.seen[id]; !dup {
				tr.seen[id] = tr.since()
			}
			tr.mu.Unlock()
			callee.Send(m.From, harness.ReplyTo(m, 486, "Busy Here", "callee"))
		}
	}()
	go func() {
		defer wg.Done()
		for {
			select {
			case <-done:
				return
			default:
			}
			m, ok := caller.Recv(50 * time.Millisecond)
			if !ok || m.Status() == 0 {
				continue
			}
			id := callIDOf(m)
			tr.mu.Lock()
			tr.reply[id] = append(tr.reply[id], fmt.Sprintf("+%v %d", tr.since(), m.Status()))
			tr.mu.Unlock()
			if m.Status() >= 300 {
				caller.Send(proxy, ackFor(m))
			}
		}
	}()
	for k := 0; time.Duration(k)*gap < span; k++ {
		id := fmt.Sprintf("%s-%d", tag, k)
		tr.mu.Lock()
		tr.sent[id+"@127.0.0.1"] = tr.since()
		tr.order = append(tr.order, id+"@127.0.0.1")
		tr.mu.Unlock()
		caller.Send(proxy, harness.Invite(caller, callee, id, "", 70))
		time.Sleep(gap) // pacing the trickle, not waiting for an outcome
	}
	deadline := time.Now().Add(settle)
	for len(tr.lost()) > 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond) // polling the trace, bounded by the deadline
	}
	close(done)
	wg.Wait()
	return tr
}

// ackFor is the caller's ACK of a final answer that is not a 2xx: the
// INVITE's Via and branch, the answer's To.
func ackFor(resp harness.Msg) string {
	var b strings.Builder
	ruri := strings.Trim(resp.Header("To"), " ")
	if i := strings.Index(ruri, "<"); i >= 0 {
		ruri = ruri[i+1:]
		if j := strings.Index(ruri, ">"); j >= 0 {
			ruri = ruri[:j]
		}
	}
	fmt.Fprintf(&b, "ACK %s SIP/2.0\r\n", ruri)
	for _, line := range resp.Lines()[1:] {
		name, _, _ := strings.Cut(line, ":")
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "via", "v", "from", "f", "to", "t", "call-id", "i":
			b.WriteString(line + "\r\n")
		}
	}
	b.WriteString("Max-Forwards: 70\r\nCSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n")
	return b.String()
}

// neighbors are SO_REUSEPORT UDP sockets of this user on 127.0.0.1, each
// on a port the kernel chose, as other nodes started on port 0 on the same
// host hold theirs (the e2e packages run beside each other, each test's
// node on port 0).
type neighbors map[int]*net.UDPConn

func holdNeighbors(t *testing.T, n int) neighbors {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, rc syscall.RawConn) error {
		var serr error
		rc.Control(func(fd uintptr) { serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_REUSEPORT, 1) })
		return serr
	}}
	ns := neighbors{}
	for range n {
		pc, err := lc.ListenPacket(context.Background(), "udp4", "127.0.0.1:0")
		if err != nil {
			t.Fatalf("neighbor %d: %v", len(ns), err)
		}
		c := pc.(*net.UDPConn)
		t.Cleanup(func() { c.Close() })
		if _, dup := ns[c.LocalAddr().(*net.UDPAddr).Port]; !dup {
			ns[c.LocalAddr().(*net.UDPAddr).Port] = c
		}
	}
	return ns
}

// took is what a neighbor holding port read: the datagrams sent to the
// node that reached it instead, by first line and Call-ID.
func (ns neighbors) took(port int) string {
	c := ns[port]
	if c == nil {
		return ""
	}
	var out []string
	buf := make([]byte, 65536)
	for {
		c.SetReadDeadline(time.Now().Add(10 * time.Millisecond))
		n, _, err := c.ReadFromUDP(buf)
		if errors.Is(err, os.ErrDeadlineExceeded) || err != nil {
			break
		}
		m := harness.Msg{Raw: string(buf[:n])}
		m.First, _, _ = strings.Cut(m.Raw, "\r\n")
		out = append(out, fmt.Sprintf("  %s (Call-ID %s)", m.First, callIDOf(m)))
	}
	return fmt.Sprintf("a neighbor's reuse-port socket holds the node's port %d and read %d of the datagrams sent to the node:\n%s",
		port, len(out), strings.Join(out, "\n"))
}

// A node loses no new session in its first moments: an INVITE sent once,
// never retransmitted, from the instant the SIP port takes datagrams,
// through the worker's start, the door placing every datagram, and the
// switch to direct reads a second after, is answered (100, or 503 while no
// worker is ready) or reaches the callee. Each round starts a node and
// sends such INVITEs every 20 ms for 2.5 s, beside other nodes' sockets
// on the host (neighbors): a node started on port 0 must get a port of its
// own, not join another's SO_REUSEPORT group, which took its datagrams.
func TestStartLosesNoLoneInvite(t *testing.T) {
	rounds := harness.StressRounds(t, 2)
	ns := holdNeighbors(t, 3000)
	for r := range rounds {
		caller, callee := harness.NewPeer(t), harness.NewPeer(t)
		s := harness.StartServing(t, harness.ProxyCfg(callee.Port(), "udp_workers = 1\ntcp_workers = 1\nlog_level = debug\n"+handledLate))
		proxy := harness.Local(s.SIPPort("udp"))
		tr := loneInvites(t, fmt.Sprintf("lone%d-%d", r, time.Now().UnixNano()), caller, callee, proxy, 20*time.Millisecond, 2500*time.Millisecond, 5*time.Second)
		if lost := tr.lost(); len(lost) > 0 {
			t.Errorf("round %d of %d: %d INVITEs lost, sent once each: %v\n%s\ntrace (from the start):\n%s\ncounters:\n%s\nsipvisor's log:\n%s",
				r+1, rounds, len(lost), lost, ns.took(proxy.Port), tr, s.MetricLines("frontdoor", "direct", "stale"), harness.Tail(s.Log.String(), 60))
			return
		}
		s.Stop()
	}
}

// Datagrams switch between the supervisor's door and the workers' own
// sockets and back, and a trickle of lone INVITEs, each sent once, loses
// none: each is answered (100, or 503 while the throttle refuses its
// share) or reaches the callee. The switch is made by the RTT throttle: a
// threshold of 1 ms closes it (every datagram to the door), 10 s opens it
// again (direct reads a second later).
func TestDoorDirectSwitchLosesNoLoneInvite(t *testing.T) {
	rounds := harness.StressRounds(t, 1)
	for r := range rounds {
		caller, callee := harness.NewPeer(t), harness.NewPeer(t)
		s := harness.Start(t, harness.ProxyCfg(callee.Port(), "udp_direct_reads = yes\nudp_workers = 2\ntcp_workers = 1\necho_interval = 100ms\nthrottle_count = 2\n"+handledLate))
		const on, off = `msg="direct reads"`, "on=false reason=throttle"
		s.WaitLog(on, 30*time.Second)
		proxy := harness.Local(s.SIPPort("udp"))
		var tr *loneTrace
		done := make(chan struct{})
		go func() {
			defer close(done)
			tr = loneInvites(t, fmt.Sprintf("switch%d-%d", r, time.Now().UnixNano()), caller, callee, proxy, 20*time.Millisecond, 8*time.Second, 5*time.Second)
		}()
		switches := 0
		set := func(v string) {
			if out, err := s.Ctl("set", "throttle/rtt_threshold", v); err != nil {
				t.Errorf("ctl set throttle/rtt_threshold %s: %v: %s", v, err, out)
			}
		}
		for range 3 {
			offs, ons := strings.Count(s.Log.String(), off), strings.Count(s.Log.String(), "on=true")
			set("1ms")
			harness.WaitFor(t, "direct reads off by the throttle", 10*time.Second, func() bool { return strings.Count(s.Log.String(), off) > offs })
			set("10s")
			harness.WaitFor(t, "direct reads on again", 10*time.Second, func() bool { return strings.Count(s.Log.String(), "on=true") > ons })
			switches += 2
		}
		<-done
		if lost := tr.lost(); len(lost) > 0 {
			t.Errorf("round %d of %d, %d switches: %d INVITEs lost, sent once each: %v\ntrace:\n%s\ncounters:\n%s\nsipvisor's log:\n%s",
				r+1, rounds, switches, len(lost), lost, tr, s.MetricLines("frontdoor", "direct", "stale"), harness.Tail(s.Log.String(), 60))
			return
		}
		t.Logf("round %d of %d: %d switches, %d lone INVITEs, none lost", r+1, rounds, switches, len(tr.order))
		s.Stop()
	}
}
