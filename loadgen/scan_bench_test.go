package loadgen

import (
	"testing"

	"github.com/emiago/sipgo/sip"
)

// The scanner exists because a load generator reads every response: these two
// benchmarks compare it with a full parse by sipgo on the same 200 OK.
func BenchmarkScan(b *testing.B) {
	raw := []byte(resp200)
	var m msg
	b.ReportAllocs()
	for b.Loop() {
		if err := m.scan(raw); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkSipgoParse(b *testing.B) {
	raw := []byte(resp200)
	p := sip.NewParser()
	b.ReportAllocs()
	for b.Loop() {
		if _, err := p.ParseSIP(raw); err != nil {
			b.Fatal(err)
		}
	}
}
