package engine

import (
	"testing"
	"time"
)

// BenchmarkCallHandled is BenchmarkCall without the driver's own cost: the
// six messages of every call are built before the clock starts, so what
// it counts is the worker's alone (parse, script, transactions, writing
// and sending). BenchmarkCall's figures include about 95 allocations and
// 9 KB per call of formatting the messages.
func BenchmarkCallHandled(b *testing.B) {
	d := newCallDriver(b)
	defer d.close()
	seq := d.w.branchSeq + 3*uint64(b.N)
	calls := d.calls(b.N)
	later := time.Now().Add(time.Hour)
	b.ReportAllocs()
	b.ResetTimer()
	for i := range calls {
		c := &calls[i]
		d.msg(d.uac, c.inv)
		d.msg(d.uas, c.ringing)
		d.msg(d.uas, c.ok)
		d.msg(d.uac, c.ack)
		d.msg(d.uac, c.bye)
		d.msg(d.uas, c.byeOK)
		d.w.Tick(later)
	}
	b.StopTimer()
	if d.w.Held() != 0 {
		b.Fatalf("held after the calls: want %v, have %v", 0, d.w.Held())
	}
	if d.w.Stats.Malformed != 0 || d.w.Stats.Requests != 3*uint64(b.N) {
		b.Fatalf("requests: want %v, have %+v", 3*b.N, d.w.Stats)
	}
	if d.w.branchSeq != seq {
		b.Fatalf("branches: want %v made, have %v", seq, d.w.branchSeq)
	}
}
