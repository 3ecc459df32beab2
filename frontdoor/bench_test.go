package frontdoor

import (
	"net/netip"
	"runtime"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/pool"
)

// BenchmarkHandle is the front door's cost per datagram: scan, affinity
// lookup, pick and the write to a real worker process. Half the datagrams
// start calls, half continue them, as INVITE and BYE do. The worker runs in
// its own process; a full queue counts as handled by the door (it is what
// the door does under overload).
func BenchmarkHandle(b *testing.B) {
	g := startGroup(b, 2)
	d := New(0, func(*sipscan.Msg, bool) *pool.Worker { return g.Pick() }, func(*sipscan.Msg, int64) (Refusal, int) { return RefuseNone, 0 }, nil)
	const calls = 1024
	frames := make([][]byte, 0, 2*calls)
	for i := 0; i < calls; i++ {
		id := "bench-" + strconv.Itoa(i) + "@127.0.0.1"
		frames = append(frames, frame(invite(id, "")), frame(invite(id, "4fa3")))
	}
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
			waitQueues(g)
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

// BenchmarkRefuse is the cost of refusing a new session: scan and a 503
// built from the raw bytes, no worker involved.
func BenchmarkRefuse(b *testing.B) {
	var sent int
	d := New(0, func(*sipscan.Msg, bool) *pool.Worker { return nil },
		func(*sipscan.Msg, int64) (Refusal, int) { return RefuseSuspended, 30 },
		func(p []byte, _ netip.AddrPort) { sent += len(p) })
	f := frame(invite("refused@127.0.0.1", ""))
	now := time.Now().UnixNano()
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		d.Handle(f, src, now)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "refusals/s")
	if sent == 0 {
		b.Fatal("no reply sent")
	}
}

func waitQueues(g *pool.Group) {
	for {
		busy := false
		for _, w := range g.Workers() {
			if w.Queue() > 0 {
				busy = true
			}
		}
		if !busy {
			return
		}
		time.Sleep(time.Millisecond)
	}
}

// cpuTime is the user and system CPU time this process has used.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
