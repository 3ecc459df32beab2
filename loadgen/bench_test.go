package loadgen

import (
	"context"
	"net/netip"
	"testing"
	"time"
)

// BenchmarkCallUDP places b.N complete calls (INVITE, 180, 200, ACK, BYE, 200)
// from sipload's uac to its uas in this process, as fast as they go with 200
// in flight. It measures sipload's own cost per call, both sides together;
// loadgen/bench-sipload.sh measures the sustained open-loop rate on one core.
func BenchmarkCallUDP(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addr := make(chan netip.AddrPort, 1)
	go Run(ctx, Options{Scenario: "uas", LocalIP: "127.0.0.1", OnListen: func(a netip.AddrPort) { addr <- a }})
	var target netip.AddrPort
	select {
	case target = <-addr:
	case <-time.After(10 * time.Second):
		b.Fatal("uas did not start")
	}
	b.ResetTimer()
	st, err := Run(ctx, Options{Scenario: "uac", Target: target.String(), LocalIP: "127.0.0.1",
		Schedule: Constant(1e6), Limit: 200, MaxCalls: int64(b.N), Timeout: 5 * time.Minute})
	b.StopTimer()
	if err != nil {
		b.Fatal(err)
	}
	if st.Succeeded != int64(b.N) {
		b.Fatalf("want %d calls succeeded, have %d (failed %d)", b.N, st.Succeeded, st.Failed)
	}
	b.ReportMetric(float64(st.Succeeded)/st.Elapsed.Seconds(), "calls/s")
}
