package txn

import (
	"bytes"
	"fmt"
	"strings"
	"testing"
	"time"
	"unsafe"
)

// A settled pair is found by its keys for Linger and by none after; its
// transactions are out of the table at once; its bytes are copies, so the
// owner may reuse its own.
func TestSettle(t *testing.T) {
	t.Parallel()
	tb := NewTable[*srv, *cli](timers)
	now := time.Unix(1_000_000, 0)
	keys := []byte("b1|h:1|INVITEcall|tag|1b2|INVITE")
	s := &srv{Server{Key: string(keys[:13]), DialogKey: string(keys[13:23]), Invite: true}}
	c := &cli{Client{Key: string(keys[23:]), Invite: true}}
	tb.AddServer(s)
	tb.AddClient(c)
	tb.Final(s, 200, false, now)
	tb.Linger(c, Accepted, false, now)
	last := []byte("SIP/2.0 200 OK\r\n\r\n")
	tb.Settle(s, c, last, 42, now)
	copy(keys, bytes.Repeat([]byte("x"), len(keys)))
	copy(last, "garbage")
	if s.State != Terminated || c.State != Terminated || s.Deadline().Scheduled() || c.Deadline().Scheduled() ||
		tb.Server([]byte("b1|h:1|INVITE")) != nil || tb.Client([]byte("b2|INVITE")) != nil {
		t.Fatal("want the settled transactions out of the table")
	}
	r := tb.SettledServer([]byte("b1|h:1|INVITE"))
	if r == nil || tb.SettledDialog([]byte("call|tag|1")) != r || tb.SettledClient([]byte("b2|INVITE")) != r {
		t.Fatal("want the settled record found by its three keys")
	}
	if r.ServerKey() != "b1|h:1|INVITE" || r.DialogKey() != "call|tag|1" || r.ClientKey() != "b2|INVITE" ||
		string(r.Last()) != "SIP/2.0 200 OK\r\n\r\n" || r.Up != 42 || !r.Invite {
		t.Fatalf("want the record's own copies, have %+v", r)
	}
	if tb.Len() != 1 || tb.Dialogs() != 1 || tb.Pending() != 1 {
		t.Fatalf("want one settled record held, have %d", tb.Len())
	}
	if at, ok := tb.Next(); !ok || !at.Equal(now.Add(timers.Linger)) {
		t.Fatalf("want the record to end Linger on, have %v", at)
	}
	tb.Expire(now.Add(timers.Linger - 1))
	if tb.Settled() != 1 {
		t.Fatal("want the record kept until Linger is over")
	}
	tb.Expire(now.Add(timers.Linger))
	if tb.Len() != 0 || tb.Dialogs() != 0 || tb.SettledServer([]byte("b1|h:1|INVITE")) != nil ||
		tb.SettledClient([]byte("b2|INVITE")) != nil || tb.SettledDialog([]byte("call|tag|1")) != nil {
		t.Fatal("want nothing found once the record ended")
	}
	if _, ok := tb.Next(); ok {
		t.Fatal("want no deadline left")
	}
}

// Records end in the order they came, their arena's chunks are reused
// once every record in them has ended, a key settled again is found as
// its later record and outlives the earlier one, and a reply too large
// for a chunk has memory of its own.
func TestSettledArena(t *testing.T) {
	t.Parallel()
	tb := NewTable[*srv, *cli](timers)
	now := time.Unix(1_000_000, 0)
	settle := func(i int, last []byte, at time.Time) {
		s := &srv{Server{Key: fmt.Sprintf("s%d|h:1|BYE", i)}}
		c := &cli{Client{Key: fmt.Sprintf("c%d|BYE", i)}}
		tb.AddServer(s)
		tb.AddClient(c)
		tb.Settle(s, c, last, uint64(i), at)
	}
	reply := bytes.Repeat([]byte("r"), 300)
	const n = 1000 // about ten chunks
	for i := range n {
		settle(i, reply, now.Add(time.Duration(i)*time.Millisecond))
	}
	chunks := len(tb.settled.chunks)
	if chunks < 5 {
		t.Fatalf("want the records over several chunks, have %d", chunks)
	}
	tb.Expire(now.Add(timers.Linger + n/2*time.Millisecond))
	if tb.Settled() != n/2-1 || tb.SettledServer([]byte("s500|h:1|BYE")) != nil || tb.SettledServer([]byte("s501|h:1|BYE")) == nil {
		t.Fatalf("want the first half ended, have %d records", tb.Settled())
	}
	if len(tb.settled.chunks) >= chunks || len(tb.settled.spare) == 0 {
		t.Fatalf("want the emptied chunks freed, have %d of %d, %d spare", len(tb.settled.chunks), chunks, len(tb.settled.spare))
	}
	// Settled again: the later record is the one found, and the earlier
	// one's end leaves it.
	settle(900, []byte("again"), now.Add(2*time.Second))
	if r := tb.SettledServer([]byte("s900|h:1|BYE")); r == nil || string(r.Last()) != "again" {
		t.Fatal("want the key found as its later record")
	}
	big := bytes.Repeat([]byte("b"), chunkSize)
	settle(n, big, now.Add(2*time.Second))
	tb.Expire(now.Add(timers.Linger + n*time.Millisecond))
	if r := tb.SettledServer([]byte("s900|h:1|BYE")); r == nil || string(r.Last()) != "again" || tb.Settled() != 2 {
		t.Fatalf("want the later record of a key kept past the earlier one's end, have %d records", tb.Settled())
	}
	if r := tb.SettledServer([]byte(fmt.Sprintf("s%d|h:1|BYE", n))); r == nil || !bytes.Equal(r.Last(), big) {
		t.Fatal("want a reply larger than a chunk kept whole")
	}
	// Many more than the ring held at first, in waves: the ring grows,
	// and every record reads as it was written.
	for wave := range 3 {
		base := now.Add(time.Duration(wave+2) * time.Minute)
		for i := range 3 * n {
			settle(10*n+i, []byte(strings.Repeat("x", i%400)), base)
		}
		for i := range 3 * n {
			r := tb.SettledClient([]byte(fmt.Sprintf("c%d|BYE", 10*n+i)))
			if r == nil || r.Up != uint64(10*n+i) || len(r.Last()) != i%400 {
				t.Fatalf("wave %d: record %d misread", wave, i)
			}
		}
		tb.Expire(base.Add(timers.Linger))
		if tb.Len() != 0 || tb.settled.servers.n+tb.settled.clients.n != 0 {
			t.Fatalf("wave %d: want nothing left, have %d", wave, tb.Len())
		}
	}
	if len(tb.settled.chunks) != 1 || len(tb.settled.chunks[0].b) != 0 || len(tb.settled.spare) > spareChunks {
		t.Fatalf("want one empty chunk and at most %d spare once all ended, have %d and %d", spareChunks, len(tb.settled.chunks), len(tb.settled.spare))
	}
}

// A ring's slot is a settled record: the size each lingering pair costs
// beside its bytes.
func TestSettledSize(t *testing.T) {
	if n := unsafe.Sizeof(Settled{}); n > 48 {
		t.Fatalf("want a settled record in 48 bytes, have %d", n)
	}
}

// BenchmarkLinger is the table's share of a pair's lingering, as a call
// has two: the pair lingers in the heap until its deadlines end it
// ("heap"), or is settled at once and its record expires ("settled"),
// with one lookup of each key while it lingers. 8,000 pairs linger at a
// time, as at 1,600 calls a second a worker.
func BenchmarkLinger(b *testing.B) {
	const live = 8000
	keys := make([][3]string, 2*live)
	lookups := make([][3][]byte, 2*live) // what a lookup has: the key written into bytes
	for i := range keys {
		keys[i] = [3]string{fmt.Sprintf("z9hG4bK-%d|127.0.0.1:5060|INVITE", i), fmt.Sprintf("call-%d@127.0.0.1|tag-%d|1", i, i),
			fmt.Sprintf("z9hG4bKsv-%d|INVITE", i)}
		lookups[i] = [3][]byte{[]byte(keys[i][0]), []byte(keys[i][1]), []byte(keys[i][2])}
	}
	pairs := make([]struct {
		s srv
		c cli
	}, 2*live)
	for _, settled := range []bool{false, true} {
		b.Run(map[bool]string{false: "heap", true: "settled"}[settled], func(b *testing.B) {
			tb := NewTable[*srv, *cli](timers)
			now := time.Unix(1_000_000, 0)
			i := 0
			for b.Loop() {
				p, k, l := &pairs[i%len(pairs)], &keys[i%len(keys)], &lookups[i%len(keys)]
				p.s = srv{Server{Key: k[0], DialogKey: k[1], Invite: true}}
				p.c = cli{Client{Key: k[2], Invite: true}}
				tb.AddServer(&p.s)
				tb.AddClient(&p.c)
				tb.Linger(&p.c, Accepted, false, now)
				tb.Final(&p.s, 200, false, now)
				if settled {
					tb.Settle(&p.s, &p.c, nil, 0, now)
					if tb.SettledServer(l[0]) == nil || tb.SettledDialog(l[1]) == nil || tb.SettledClient(l[2]) == nil {
						b.Fatal("settled pair not found")
					}
				} else if tb.Server(l[0]) == nil || tb.Dialog(l[1]) == nil || tb.Client(l[2]) == nil {
					b.Fatal("lingering pair not found")
				}
				i++
				// Linger is 5 s: a pair every 625 µs keeps 8,000 lingering.
				now = now.Add(timers.Linger / live)
				tb.Expire(now)
				for {
					x, ok := tb.Due(now)
					if !ok {
						break
					}
					switch x := x.(type) {
					case *srv:
						tb.FireServer(x, now)
					case *cli:
						tb.FireClient(x, true, now)
					}
				}
			}
		})
	}
}
