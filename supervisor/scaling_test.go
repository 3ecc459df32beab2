package supervisor

import (
	"bytes"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/testkit"
)

// A group driven by real traffic to real worker processes grows from 2 to its
// ceiling under load and shrinks back to 2 when the load goes, and every
// message sent — including those handed to workers that were draining — is
// answered.
//
// Both ways a group's datagrams reach its workers: read by the workers
// themselves, where a drained worker's buckets move to others while their
// calls' messages still find it, and each through the supervisor's door.
//
// Not parallel: the group scales on its workers' measured load, which
// other tests' load would blur.
func TestGroupScalesUpAndDownLosingNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("drives real processes for several seconds")
	}
	t.Run("direct reads", func(t *testing.T) { scaleLosingNothing(t, "yes") })
	t.Run("through the door", func(t *testing.T) { scaleLosingNothing(t, "no") })
}

func scaleLosingNothing(t *testing.T, direct string) {
	logs := &testkit.SyncBuffer{}
	udpBefore := udpCounters(t)
	st := startSupervisor(t, cfgf(`
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_direct_reads = %s
auto_scaling_cycle = 0.2
auto_scaling_cooldown = 5
auto_scaling_profile = P scale up to 4 on 60%% for 2 cycles within 3 scale down to 2 on 20%% for 3 cycles
udp_workers = 2 use_auto_scaling_profile P
route { exit; }
`, direct), costWorker(2*time.Millisecond), logs)
	g := st.s.Groups()[0]
	testkit.WaitFor(t, patience, "2 ready workers", func() bool { return len(g.Routable()) == 2 })

	target := st.s.SIPAddrs()[0]
	client, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer client.Close()
	client.SetReadBuffer(8 << 20)
	dst := &net.UDPAddr{IP: net.ParseIP(target.Host), Port: target.Port}

	var mu sync.Mutex
	got := map[int]bool{}
	go func() {
		buf := make([]byte, 2048)
		for {
			n, _, err := client.ReadFrom(buf)
			if err != nil {
				return
			}
			if v, ok := seqOf(buf[:n]); ok {
				mu.Lock()
				got[v] = true
				mu.Unlock()
			}
		}
	}()
	seq, sendErrs := 0, 0
	var sentAt []time.Time
	// send paces datagrams at rate per second until stop says so.
	send := func(rate int, stop func() bool, limit time.Duration) {
		sentHere := 0
		tick := time.NewTicker(10 * time.Millisecond)
		defer tick.Stop()
		start := time.Now()
		end := start.Add(limit)
		for !stop() && time.Now().Before(end) {
			<-tick.C
			due := int(time.Since(start).Seconds() * float64(rate))
			for ; sentHere < due; sentHere++ {
				if _, err := client.WriteTo(numbered("OPTIONS", seq), dst); err != nil {
					sendErrs++
				}
				sentAt = append(sentAt, time.Now())
				seq++
			}
		}
	}
	maxLive := 0
	// 1,400 messages/s of 2 ms each is 2.8 workers' worth: over 60 % on 2 or
	// 3 workers, so the group must grow to its ceiling of 4.
	send(1400, func() bool { maxLive = max(maxLive, g.Live()); return g.Live() == 4 }, 30*time.Second)
	if g.Live() != 4 {
		t.Fatalf("want the group at its ceiling of 4 under load, have %d", g.Live())
	}
	// 100 messages/s is 20 % of one worker, 5-10 % of the group: the group must shrink back to 2,
	// each drain after the cooldown, with traffic still flowing.
	send(100, func() bool { return g.Live() == 2 && len(g.Workers()) == 2 }, 40*time.Second)
	if g.Live() != 2 {
		t.Fatalf("want the group back at 2 when idle, have %d", g.Live())
	}
	sent := seq
	defer func() {
		if !t.Failed() {
			return
		}
		// When each lost message was sent, to set beside the log's events;
		// the kernel's UDP counters tell a datagram dropped by a full
		// socket buffer (anyone's, on this machine) from one a worker lost.
		mu.Lock()
		defer mu.Unlock()
		first, last, lost := -1, -1, 0
		for i := 0; i < sent; i++ {
			if !got[i] {
				if first < 0 {
					first = i
				}
				last, lost = i, lost+1
			}
		}
		if lost > 0 {
			t.Logf("%d of %d messages not answered, the first (%d) sent at %s, the last (%d) at %s; %d sends failed; kernel UDP counters before and after: %v, %v\nsupervisor's log:\n%s",
				lost, sent, first, sentAt[first].UTC().Format("15:04:05.000"), last, sentAt[last].UTC().Format("15:04:05.000"),
				sendErrs, udpBefore, udpCounters(t), logs.String())
		}
	}()
	testkit.WaitFor(t, patience, "every message answered", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got) == sent
	})
	if v := st.metric(t, "sipvisor_pool_worker_exits_total", `reason="clean"`); v != 2 {
		t.Errorf("want 2 clean exits (the drained workers), have %v", v)
	}
	if v := st.metric(t, "sipvisor_frontdoor_datagrams_dropped_total"); v != 0 {
		t.Errorf("want no message dropped by the front door, have %v", v)
	}
	t.Logf("sent and answered %d messages; the group peaked at %d workers", sent, maxLive)
}

// numbered is a request of method whose Call-ID carries seq: each is a
// transaction of its own for the front door. An OPTIONS is no new session;
// an INVITE (no To tag) is one.
func numbered(method string, seq int) []byte {
	n := strconv.Itoa(seq)
	return []byte(method + " sip:bob@127.0.0.1 SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK" + n + "\r\n" +
		"Max-Forwards: 70\r\n" +
		"From: <sip:alice@127.0.0.1>;tag=1\r\n" +
		"To: <sip:bob@127.0.0.1>\r\n" +
		"Call-ID: seq-" + n + "\r\n" +
		"CSeq: 1 " + method + "\r\n" +
		"Content-Length: 0\r\n\r\n")
}

func seqOf(b []byte) (int, bool) {
	_, rest, ok := bytes.Cut(b, []byte("Call-ID: seq-"))
	if !ok {
		return 0, false
	}
	end := bytes.IndexByte(rest, '\r')
	if end < 0 {
		return 0, false
	}
	v, err := strconv.Atoi(string(rest[:end]))
	return v, err == nil
}

// udpCounters is the kernel's UDP error counters (/proc/net/snmp), by name.
func udpCounters(t *testing.T) map[string]string {
	b, err := os.ReadFile("/proc/net/snmp")
	if err != nil {
		return nil
	}
	var names []string
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) == 0 || f[0] != "Udp:" {
			continue
		}
		if names == nil {
			names = f[1:]
			continue
		}
		out := map[string]string{}
		for i, v := range f[1:] {
			if i < len(names) && strings.Contains(names[i], "Err") {
				out[names[i]] = v
			}
		}
		return out
	}
	return nil
}
