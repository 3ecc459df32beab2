package sipscan

import (
	"testing"
	"time"
)

// reportRate adds datagrams per second on one core, the unit the front
// door's target (200k/s with dispatch) is stated in.
func reportRate(b *testing.B, start time.Time) {
	if d := time.Since(start); d > 0 {
		b.ReportMetric(float64(b.N)/d.Seconds(), "datagrams/s")
	}
}

func BenchmarkScan(b *testing.B) {
	for _, name := range []string{"bench_invite", "bench_200"} {
		msg := readMsg(b, "msgs/"+name+".sip")
		b.Run(name, func(b *testing.B) {
			var m Msg
			b.SetBytes(int64(len(msg)))
			b.ReportAllocs()
			start := time.Now()
			for b.Loop() {
				if err := Scan(msg, &m); err != nil {
					b.Fatal(err)
				}
			}
			reportRate(b, start)
		})
	}
}

func BenchmarkAppendReply(b *testing.B) {
	msg := readMsg(b, "msgs/bench_invite.sip")
	var m Msg
	if err := Scan(msg, &m); err != nil {
		b.Fatal(err)
	}
	dst := make([]byte, 0, 2048)
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		dst = AppendReply(dst[:0], msg, &m, 503, "", 5)
	}
	reportRate(b, start)
}

// BenchmarkRefuse is the whole cost of turning away a new call at the front
// door: scan, decide, build the 503.
func BenchmarkRefuse(b *testing.B) {
	msg := readMsg(b, "msgs/bench_invite.sip")
	dst := make([]byte, 0, 2048)
	var m Msg
	b.ReportAllocs()
	start := time.Now()
	for b.Loop() {
		if Scan(msg, &m) == nil && m.IsRequest && !m.HasToTag && m.Method == Invite {
			dst = AppendReply(dst[:0], msg, &m, 503, "", 5)
		}
	}
	reportRate(b, start)
}

func BenchmarkCallIDHash(b *testing.B) {
	id := []byte("8b4e1f0a2c3d4e5f6a7b8c9d0e1f2a3b@198.51.100.23")
	b.SetBytes(int64(len(id)))
	for b.Loop() {
		CallIDHash(id)
	}
}
