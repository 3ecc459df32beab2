package frontdoor

import (
	"net/netip"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/overload"
)

// BenchmarkRefuse is the cost of refusing a new session: scan and a 503
// built from the raw bytes, no worker involved. (The cost of handing a
// datagram to a worker process is supervisor's BenchmarkDoorHandle.)
func BenchmarkRefuse(b *testing.B) {
	var sent int
	d := New(0, func(*sipscan.Msg, bool, int64) Target { return nil },
		func(*sipscan.Msg, int64) (overload.Refusal, int) { return overload.RefuseSuspended, 30 },
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
