package supervisor

import (
	"net"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/frontdoor"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/pool"
)

// BenchmarkDoorHandle is the front door's cost per datagram: scan, affinity
// lookup, pick and the write to a real worker process. Half the datagrams
// start calls, half continue them, as INVITE and BYE do. The worker runs in
// its own process; a full queue counts as handled by the door (it is what
// the door does under overload).
func BenchmarkDoorHandle(b *testing.B) {
	// The workers send each datagram back to where it came from: a socket
	// of the benchmark's that nobody reads, the kernel dropping what does
	// not fit. They send from a socket of their group's, as from the
	// supervisor's.
	serve, sink := udpSocket(b), udpSocket(b)
	f, err := serve.File()
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	g := pool.NewGroup(pool.GroupOptions{Name: "udp0", Initial: 2, Command: costWorker(0),
		Sockets: []*os.File{f}, SocketNames: []string{"udp:" + serve.LocalAddr().String()}})
	if err := g.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { g.Stop(time.Now().Add(5 * time.Second)) })
	testkit.WaitFor(b, time.Minute, "2 ready workers", func() bool { return len(g.Routable()) == 2 })
	d := frontdoor.New(0, func(*sipscan.Msg, bool, int64) frontdoor.Target {
		if w := g.Pick(); w != nil {
			return w
		}
		return nil
	}, func(*sipscan.Msg, int64) (overload.Refusal, int) { return overload.RefuseNone, 0 }, nil)
	const calls = 1024
	frames := make([][]byte, 0, 2*calls)
	for i := 0; i < calls; i++ {
		id := "bench-" + strconv.Itoa(i) + "@127.0.0.1"
		frames = append(frames, benchFrame(id, ""), benchFrame(id, "4fa3"))
	}
	sinkAddr := sink.LocalAddr().(*net.UDPAddr).AddrPort()
	src := netip.AddrPortFrom(sinkAddr.Addr().Unmap(), sinkAddr.Port())
	now := time.Now().UnixNano()
	b.ReportAllocs()
	b.ResetTimer()
	cpu0 := cpuTime()
	var paused time.Duration
	for i := 0; i < b.N; i++ {
		d.Handle(frames[i%len(frames)], src, now)
		// Let the workers catch up when their queues fill, off the clock:
		// the door's own cost is what is measured, not the workers'.
		if i%512 == 511 && d.Stats.DroppedQueueFull.Load() > 0 {
			b.StopTimer()
			c := cpuTime()
			waitQueues(b, g)
			paused += cpuTime() - c
			b.StartTimer()
		}
	}
	b.StopTimer()
	// CPU time of this process only, the door's: the workers run in their
	// own processes on the other core, so wall time understates one core.
	cpu := cpuTime() - cpu0 - paused
	b.ReportMetric(float64(cpu.Nanoseconds())/float64(b.N), "cpu-ns/op")
	b.ReportMetric(float64(b.N)/cpu.Seconds(), "datagrams/cpu-s")
	fwd := d.Stats.Forwarded.Load()
	if fwd == 0 {
		b.Fatal("nothing forwarded")
	}
	b.ReportMetric(float64(fwd)/b.Elapsed().Seconds(), "forwarded/s")
	b.ReportMetric(float64(d.Stats.DroppedQueueFull.Load())/float64(b.N), "dropped/op")
	runtime.KeepAlive(g)
}

// benchFrame is a frame holding an INVITE, or with a To tag its BYE.
func benchFrame(callID, toTag string) []byte {
	to := "<sip:bob@example.com>"
	method := "INVITE"
	if toTag != "" {
		to += ";tag=" + toTag
		method = "BYE"
	}
	dgram := method + " sip:bob@example.com SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK" + branchToken(callID) + method + "\r\n" +
		"Max-Forwards: 70\r\n" +
		"From: <sip:alice@example.com>;tag=1928301774\r\n" +
		"To: " + to + "\r\n" +
		"Call-ID: " + callID + "\r\n" +
		"CSeq: 1 " + method + "\r\n" +
		"Contact: <sip:alice@127.0.0.1:5070>\r\n" +
		"Content-Length: 0\r\n\r\n"
	return append(make([]byte, wire.MsgHeaderLen), dgram...)
}

// branchToken keeps the letters and digits of a Call-ID: a valid Via
// branch of the call's own.
func branchToken(s string) string {
	return strings.Map(func(r rune) rune {
		if 'a' <= r && r <= 'z' || 'A' <= r && r <= 'Z' || '0' <= r && r <= '9' {
			return r
		}
		return -1
	}, s)
}

// waitQueues waits until the workers have taken every frame queued.
func waitQueues(b *testing.B, g *pool.Group) {
	testkit.WaitFor(b, time.Minute, "the workers' queues empty", func() bool {
		for _, w := range g.Workers() {
			if w.Queue() > 0 {
				return false
			}
		}
		return true
	})
}

// udpSocket is a UDP socket on a port of 127.0.0.1 the kernel picks.
func udpSocket(b *testing.B) *net.UDPConn {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { c.Close() })
	return c
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
