package engine

import (
	"strconv"
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
	type call struct{ inv, ringing, ok, ack, bye, byeOK []byte }
	calls := make([]call, b.N)
	// Each call takes three branches of the worker's: the INVITE's, the
	// ACK's (relayed statelessly) and the BYE's.
	seq := d.w.branchSeq
	branch := func(n uint64) string { return d.w.branchPrefix + strconv.FormatUint(n, 36) }
	for i := range calls {
		callID := "handled-" + strconv.Itoa(i)
		inv := branch(seq + 1)
		bye := branch(seq + 3)
		seq += 3
		calls[i] = call{
			inv:     d.invite(callID),
			ringing: d.reply(180, "Ringing", inv, callID, 1, "INVITE"),
			ok:      d.reply(200, "OK", inv, callID, 1, "INVITE"),
			ack:     crlf(inDialog("ACK", d.ruri, d.uac, "z9hG4bK-a"+callID, callID, 1, "bob-tag", []string{d.rr})),
			bye:     crlf(inDialog("BYE", d.ruri, d.uac, "z9hG4bK-"+callID, callID, 2, "bob-tag", []string{d.rr})),
			byeOK:   d.reply(200, "OK", bye, callID, 2, "BYE"),
		}
	}
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
