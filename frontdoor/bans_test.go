package frontdoor

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/overload/pike"
)

// A banned source's datagrams reach no worker: dropped, or answered 403
// with ban_action = reply; other sources pass, and a ban that ended lets
// the source in again.
func TestBannedSourceCostsNoWorker(t *testing.T) {
	t.Parallel()
	now := time.Now().UnixNano()
	for _, reply := range []bool{false, true} {
		ws := newWorkers(1)
		rec := &recorder{}
		d := New(0, ws.pick, nil, rec.reply)
		var bans pike.List
		bans.Set(map[netip.Addr]int64{src.Addr(): now + int64(time.Second)})
		bans.SetReply(reply)
		d.Bans = &bans
		d.Handle(frame(invite("call-a", "")), src, now)
		d.Handle(frame(invite("call-b", "")), netip.MustParseAddrPort("127.0.0.2:5070"), now)
		if ws.received() != 1 || d.Stats.Banned.Load() != 1 {
			t.Fatalf("reply=%v: want the other source's INVITE alone handed on and 1 banned, have %d and %d", reply, ws.received(), d.Stats.Banned.Load())
		}
		if reply != (len(rec.replies) == 1) || reply && !bytes.HasPrefix(rec.replies[0], []byte("SIP/2.0 403 ")) {
			t.Fatalf("reply=%v: replies %q", reply, rec.replies)
		}
		d.Handle(frame(invite("call-c", "")), src, now+int64(time.Second))
		if ws.received() != 2 {
			t.Fatalf("reply=%v: the ban did not end", reply)
		}
	}
}

// The door counts the requests it reads per source and reports a source at
// each step; what other doors passed or handed over was counted where it
// was read.
func TestPikeCountsRequestsRead(t *testing.T) {
	t.Parallel()
	now := time.Now().UnixNano()
	ws := newWorkers(1)
	d := New(0, ws.pick, nil, nil)
	var c pike.Counter
	c.Set(pike.Policy{Requests: 16, Window: time.Second}) // a step of 2
	var reported uint32
	d.Pike, d.OnHeavy = &c, func(a netip.Addr, n uint32) {
		if a != src.Addr() {
			t.Errorf("reported %v", a)
		}
		reported += n
	}
	for i := range 5 {
		d.Handle(frame(request("OPTIONS", "o", string(rune('a'+i)), "", 1, -1)), src, now)
	}
	d.Passed(frame(request("OPTIONS", "p", "x", "", 1, -1)), src, now)
	d.Handed(frame(request("OPTIONS", "q", "y", "", 1, -1)), src, now)
	if reported != 4 {
		t.Fatalf("reported %d requests of the 5 read in steps of 2, want 4", reported)
	}
}

// Refusing a banned source, and counting one that is not, allocate
// nothing per datagram.
func TestBansAllocateNothing(t *testing.T) {
	now := time.Now().UnixNano()
	ws := newWorkers(1)
	d := New(0, ws.pick, nil, func([]byte, netip.AddrPort) {})
	var bans pike.List
	bans.Set(map[netip.Addr]int64{src.Addr(): now + int64(time.Hour)})
	var c pike.Counter
	c.Set(pike.Policy{Requests: 1 << 20, Window: time.Hour})
	d.Bans, d.Pike = &bans, &c
	f := frame(invite("call-a", ""))
	for _, reply := range []bool{false, true} {
		bans.SetReply(reply)
		if n := testing.AllocsPerRun(200, func() { d.Handle(f, src, now) }); n != 0 {
			t.Errorf("reply=%v: %v allocations per banned datagram", reply, n)
		}
	}
}
