package worker

import (
	"github.com/sipvisor/sipvisor/listeners/steer"

	"math"
	"strings"
	"testing"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/overload/sessions"
)

// The worker places a Call-ID in a bucket with the kernel program's own
// hash; this vector was computed by a separate implementation of it.
func TestSteerHash(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		callID string
		want   uint32
	}{
		{"a84b4c76e66710@pc33.atlanta.com", 3954873255},
		// Past 24 bytes nothing counts.
		{"a84b4c76e66710@pc33.atlanta.org", 3954873255},
		{"abc", 96354}, // Java's "abc".hashCode(), the same recurrence
		{"", 0},
	} {
		if have := steer.Hash([]byte(c.callID)); have != c.want {
			t.Errorf("steer.Hash(%q): want %d, have %d", c.callID, c.want, have)
		}
	}
}

func TestToDoor(t *testing.T) {
	t.Parallel()
	const slot = 2
	now := int64(1e18)
	long := now - int64(sessions.PendingInvite) - 1 // the bucket has been ours long enough
	recent := now - int64(time.Second)
	callID := []byte("call-1@test")
	bucket := steer.Bucket(callID)
	table := func(owner uint8, since int64) *steerTable {
		t := &steerTable{slots: make([]uint8, steer.Buckets), since: make([]int64, steer.Buckets), fresh: make([]int64, steer.Buckets)}
		for b := range t.slots {
			t.slots[b], t.since[b] = 7, long
		}
		t.slots[bucket], t.since[bucket] = owner, since
		return t
	}
	fresh := func(t *steerTable, at int64) *steerTable {
		t.fresh[bucket] = at
		return t
	}
	for _, c := range []struct {
		name                         string
		handed, draining, newSession bool
		owned                        bool
		table                        *steerTable
		want                         bool
	}{
		{"a new session in a bucket long ours is ours", false, false, true, false, table(slot, long), false},
		{"a new session in a bucket newly ours, none taken elsewhere: ours", false, false, true, false, table(slot, recent), false},
		{"a new session another took one of lately: the supervisor's door, it may be a retransmission", false, false, true, false, fresh(table(slot, long), recent), true},
		{"a new session another took one of a transaction's lifetime ago: ours", false, false, true, false, fresh(table(slot, long), now-int64(sessions.TransactionLifetime)), false},
		{"a new session of a bucket another slot has: the supervisor's door", false, false, true, false, table(5, long), true},
		{"a draining worker takes no new session", false, true, true, false, table(slot, long), true},
		{"handed over: ours, even draining", true, true, true, false, table(slot, recent), false},
		{"handed over: ours, in a new bucket", true, false, false, false, table(slot, recent), false},
		{"unknown call in a bucket long ours: ours", false, false, false, false, table(slot, long), false},
		{"unknown call in a bucket newly ours: the supervisor's door", false, false, false, false, table(slot, recent), true},
		{"unknown call in a bucket just under the pending time", false, false, false, false, table(slot, long+2), true},
		{"unknown call in a bucket another slot has", false, false, false, false, table(5, long), true},
		{"unknown call before any table", false, false, false, false, &steerTable{}, true},
		{"unknown call while draining, bucket long ours", false, true, false, false, table(slot, long), false},
		{"a response of a branch a worker made, in a bucket newly ours: ours, found by its branch", false, false, false, true, table(slot, recent), false},
		{"a response of a branch a worker made, in a bucket another slot has: ours", false, false, false, true, table(5, long), false},
		{"a response of a branch a worker made, before any table: ours", false, false, false, true, &steerTable{}, false},
	} {
		if have := toDoor(c.handed, c.draining, c.newSession, c.owned, c.table, slot, callID, now); have != c.want {
			t.Errorf("%s: want %v, have %v", c.name, c.want, have)
		}
	}
}

func TestAdmitLocal(t *testing.T) {
	t.Parallel()
	ms := int64(time.Millisecond)
	const unlimited = math.MaxUint64
	invite, register := overload.ClassNew, overload.ClassRegister
	call, reg := sipscan.KindCall, sipscan.KindRegistration
	for _, c := range []struct {
		name            string
		class           overload.Class
		kind            sipscan.Kind
		gate            uint64
		quota, admitted uint64
		limit, wait     int64
		want            overload.Refusal
		retry           int
		ask             bool
	}{
		{"open gate admits", invite, call, wire.Gate(true, false, 5), unlimited, 0, 0, 9 * ms, overload.RefuseNone, 5, false},
		{"closed gate asks", invite, call, wire.Gate(false, false, 5), unlimited, 0, 0, 0, overload.RefuseNone, 5, true},
		{"waited past the limit: refused with the gate's Retry-After", invite, call, wire.Gate(true, false, 7), unlimited, 0, 10 * ms, 11 * ms, overload.RefuseQueue, 7, false},
		{"waited past the limit at a closed gate: refused without asking", invite, call, wire.Gate(false, true, 3), unlimited, 0, 10 * ms, 11 * ms, overload.RefuseQueue, 3, false},
		{"waited as long as the limit: admitted", invite, call, wire.Gate(true, false, 7), unlimited, 0, 10 * ms, 10 * ms, overload.RefuseNone, 7, false},
		{"no limit: any wait", invite, call, wire.Gate(true, false, 7), unlimited, 0, 0, int64(time.Hour), overload.RefuseNone, 7, false},
		{"probes refused does not close the gate", invite, call, wire.Gate(true, true, 7), unlimited, 0, 0, 0, overload.RefuseNone, 7, false},
		{"refusing all: refused with the gate's Retry-After, without asking", invite, call, wire.Gate(false, true, 9) | wire.GateRefuseAll, unlimited, 0, 0, 0, overload.RefuseSuspended, 9, false},
		{"refusing all, waited past the limit: suspended first, as the supervisor decides", invite, call, wire.Gate(false, true, 9) | wire.GateRefuseAll, unlimited, 0, 10 * ms, 11 * ms, overload.RefuseSuspended, 9, false},
		{"refusing all, a REGISTER: asks, it may refresh a known registration", register, reg, wire.Gate(false, true, 9) | wire.GateRefuseAll, unlimited, 0, 0, 0, overload.RefuseNone, 9, true},
		{"a REGISTER that waited past the limit: asks, it may be a refresh", register, reg, wire.Gate(true, false, 7), unlimited, 0, 10 * ms, 11 * ms, overload.RefuseNone, 7, true},
		{"refusing all, a removal: admitted", overload.ClassRemoval, reg, wire.Gate(false, true, 9) | wire.GateRefuseAll, 0, 0, 0, 0, overload.RefuseNone, 9, false},
		{"within the quota", invite, call, wire.Gate(true, false, 5), 3, 2, 0, 0, overload.RefuseNone, 5, false},
		{"past the quota an open gate asks", invite, call, wire.Gate(true, false, 5), 3, 3, 0, 0, overload.RefuseNone, 5, true},
		{"past the quota, waited past the limit: refused", invite, call, wire.Gate(true, false, 5), 3, 3, 10 * ms, 11 * ms, overload.RefuseQueue, 5, false},
		{"a probe while refusing all", overload.ClassProbe, sipscan.KindOther, wire.Gate(false, true, 9) | wire.GateRefuseAll, 0, 0, 0, 0, overload.RefuseSuspended, 9, false},
		{"a probe at a closed gate", overload.ClassProbe, sipscan.KindOther, wire.Gate(false, false, 9), 0, 0, 0, 0, overload.RefuseNone, 9, false},
		{"in a dialog", overload.ClassExisting, sipscan.KindOther, wire.Gate(false, true, 9) | wire.GateRefuseAll, 0, 0, 10 * ms, 11 * ms, overload.RefuseNone, 9, false},
	} {
		a := admitLocal(c.class, c.kind, c.gate, c.quota, c.admitted, c.limit, c.wait)
		if a.Refusal != c.want || a.RetryAfter != c.retry || a.Ask != c.ask {
			t.Errorf("%s: want %v %d ask %v, have %v %d ask %v", c.name, c.want, c.retry, c.ask, a.Refusal, a.RetryAfter, a.Ask)
		}
	}
}

func TestParseDirect(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		in      string
		sockets int
		socket  int
		slot    uint8
		err     string
	}{
		{"0:3", 1, 0, 3, ""},
		{"1:255", 2, 1, 255, ""},
		{"3", 2, 0, 0, "want SOCKET:SLOT"},
		{"2:0", 2, 0, 0, `socket "2"`},
		{"-1:0", 2, 0, 0, `socket "-1"`},
		{"0:0", 0, 0, 0, `socket "0"`},
		{"x:0", 1, 0, 0, `socket "x"`},
		{"0:256", 1, 0, 0, `slot "256"`},
		{"0:", 1, 0, 0, `slot ""`},
	} {
		socket, slot, err := parseDirect(c.in, c.sockets)
		switch {
		case c.err == "" && err != nil:
			t.Errorf("%q: %v", c.in, err)
		case c.err != "" && (err == nil || !strings.Contains(err.Error(), c.err)):
			t.Errorf("%q: want an error with %q, have %v", c.in, c.err, err)
		case c.err == "" && (socket != c.socket || slot != c.slot):
			t.Errorf("%q: want %d:%d, have %d:%d", c.in, c.socket, c.slot, socket, slot)
		}
	}
}

// cmsg appends a control message of level and typ carrying data.
func cmsg(b []byte, level, typ int32, data []byte) []byte {
	m := make([]byte, unix.CmsgSpace(len(data)))
	h := (*unix.Cmsghdr)(unsafe.Pointer(&m[0]))
	h.Level, h.Type = level, typ
	h.SetLen(unix.CmsgLen(len(data)))
	copy(m[unix.CmsgLen(0):], data)
	return append(b, m...)
}

func TestTimestamp(t *testing.T) {
	t.Parallel()
	ts := unix.NsecToTimespec(1_700_000_000_123_456_789)
	tsb := unsafe.Slice((*byte)(unsafe.Pointer(&ts)), unsafe.Sizeof(ts))
	stamp := cmsg(nil, unix.SOL_SOCKET, unix.SCM_TIMESTAMPNS, tsb)
	other := cmsg(nil, unix.SOL_IP, unix.IP_TTL, []byte{64, 0, 0, 0})
	for _, c := range []struct {
		name string
		oob  []byte
		want int64
	}{
		{"the timestamp", stamp, 1_700_000_000_123_456_789},
		{"after another message", append(append([]byte(nil), other...), stamp...), 1_700_000_000_123_456_789},
		{"none", other, 0},
		{"empty", nil, 0},
		{"truncated", stamp[:len(stamp)-8], 0},
	} {
		// Copied into a fresh buffer, aligned as the loop's is.
		oob := append(make([]byte, 0, len(c.oob)+8), c.oob...)
		if have := timestamp(oob); have != c.want {
			t.Errorf("%s: want %d, have %d", c.name, c.want, have)
		}
	}
}

func TestWaitPeak(t *testing.T) {
	t.Parallel()
	w := wire.WaitWindow
	var p waitPeak
	t0 := int64(1e18)
	steps := []struct {
		at, wait int64 // wait < 0: a roll only (the loop's tick)
		want     int64
	}{
		{t0, 5, 5},
		{t0 + 1, 3, 5},
		{t0 + w/2, 9, 9},
		// A new window: the last one's peak stays in view.
		{t0 + w, 2, 9},
		{t0 + w + 1, -1, 9},
		// The window after: the peak before has gone, this one's shows.
		{t0 + 2*w, -1, 2},
		// Two windows with nothing: nothing shows.
		{t0 + 5*w, -1, 0},
		{t0 + 5*w + 1, 4, 4},
	}
	for i, s := range steps {
		if s.wait >= 0 {
			p.add(s.at, s.wait)
		} else {
			p.roll(s.at)
		}
		if have := p.value(); have != s.want {
			t.Errorf("step %d: want %d, have %d", i, s.want, have)
		}
	}
}

func TestDrainQuiet(t *testing.T) {
	t.Parallel()
	q := int64(drainQuiet)
	d := &direct{drainAt: 1000, lastRead: 500}
	for _, c := range []struct {
		lastRead, now int64
		want          bool
	}{
		{500, 1000 + q - 1, false},
		{500, 1000 + q, true},
		// A datagram read after the drain began starts the wait again.
		{2000, 1000 + q, false},
		{2000, 2000 + q, true},
	} {
		d.lastRead = c.lastRead
		if have := d.quiet(c.now); have != c.want {
			t.Errorf("last read %d, now %d: want %v, have %v", c.lastRead, c.now, c.want, have)
		}
	}
}
