package steering

import (
	"maps"
	"math"
	"reflect"
	"slices"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/listeners/steer"
	"github.com/sipvisor/sipvisor/overload"
)

func counts(t steer.Table) map[uint8]int {
	c := map[uint8]int{}
	for _, m := range t {
		c[m]++
	}
	return c
}

func moved(a, b steer.Table) int {
	n := 0
	for i := range a {
		if a[i] != b[i] {
			n++
		}
	}
	return n
}

// Buckets are spread evenly, and a change of members moves only the
// buckets it must: calls in progress keep their worker as far as they can.
func TestAssignBuckets(t *testing.T) {
	t.Parallel()
	var none steer.Table
	if got := assignBuckets(none, nil); got != none {
		t.Fatalf("no members: every bucket is the door's, have %v", got)
	}
	one := assignBuckets(none, []uint8{3})
	if c := counts(one); c[3] != steer.Buckets {
		t.Fatalf("one member: %v", c)
	}
	two := assignBuckets(one, []uint8{3, 5})
	if c := counts(two); c[3] != steer.Buckets/2 || c[5] != steer.Buckets/2 {
		t.Fatalf("two members: %v", c)
	}
	if m := moved(one, two); m != steer.Buckets/2 {
		t.Fatalf("a second member moved %d buckets, want %d", m, steer.Buckets/2)
	}
	three := assignBuckets(two, []uint8{3, 5, 1})
	c := counts(three)
	if c[1]+c[3]+c[5] != steer.Buckets || c[1] < 21 || c[3] < 21 || c[5] < 21 || c[1] > 22 || c[3] > 22 || c[5] > 22 {
		t.Fatalf("three members: %v", c)
	}
	if m := moved(two, three); m != c[1] {
		t.Fatalf("a third member moved %d buckets, want only its own %d", m, c[1])
	}
	// The member 5 goes (drained, exited): only its buckets move.
	back := assignBuckets(three, []uint8{3, 1})
	if m := moved(three, back); m != c[5] {
		t.Fatalf("a member leaving moved %d buckets, want its %d", m, c[5])
	}
	for b := range back {
		if three[b] != 5 && back[b] != three[b] {
			t.Fatalf("bucket %d moved from %d to %d though its member stayed", b, three[b], back[b])
		}
	}
	if got := assignBuckets(back, nil); got != none {
		t.Fatal("members gone: every bucket is the door's again")
	}
	// Stable: the same members leave the table as it is.
	if again := assignBuckets(three, []uint8{1, 3, 5}); again != three {
		t.Fatal("the same members moved buckets")
	}
}

// Datagrams go straight to the workers unless admission is closed for a
// reason the door must weigh per session, no worker is ready, one ramps, or
// admission has just become so; a suspension keeps them with the workers,
// which refuse every new session themselves.
func TestDirectBlocked(t *testing.T) {
	long := 2 * directAfter
	for _, c := range []struct {
		name           string
		closed         string
		members, ramps int
		readableFor    time.Duration
		want           string
	}{
		{"open a while", "", 2, 0, long, ""},
		{"suspended a while: the workers refuse", "suspended", 2, 0, long, ""},
		{"throttle: the door's share", "throttle", 2, 0, long, "throttle"},
		{"queue admission", "queue_admission", 2, 0, long, "queue_admission"},
		{"stopping", "stopping", 2, 0, long, "stopping"},
		{"no ready worker", "", 0, 0, long, "no ready worker"},
		{"suspended, no ready worker", "suspended", 0, 0, long, "no ready worker"},
		{"a worker in slow start", "", 2, 1, long, "slow start"},
		{"just opened", "", 2, 0, directAfter / 2, "admission just opened"},
		{"just suspended from a throttle", "suspended", 2, 0, 0, "admission just opened"},
	} {
		if got := directBlocked(c.closed, c.members, c.ramps, c.readableFor); got != c.want {
			t.Errorf("%s: want %q, have %q", c.name, c.want, got)
		}
	}
}

func TestPace(t *testing.T) {
	settled := 2 * settle
	for _, c := range []struct {
		name        string
		closed      string
		drawn       bool
		limited     bool
		direct      bool
		sinceChange time.Duration
		want        time.Duration
	}{
		{"open, unlimited, direct, settled: quiet", "", false, false, true, settled, quiet},
		{"open, a Retry-After drawn from a range: quiet", "", true, false, true, settled, quiet},
		{"a session limit or queue admission set", "", false, true, true, settled, Every},
		{"throttled: the door decides", "throttle", false, false, false, settled, Every},
		{"suspended, workers refusing, one Retry-After: quiet", overload.ClosedSuspended, false, false, true, settled, quiet},
		{"suspended, a Retry-After drawn from a range", overload.ClosedSuspended, true, false, true, settled, Every},
		{"suspended just now", overload.ClosedSuspended, false, false, true, 0, Every},
		{"stopping", "stopping", false, false, true, settled, Every},
		{"datagrams through the door", "", false, false, false, settled, Every},
		{"a change just now", "", false, false, true, 0, Every},
		{"a change just within the settling time", "", false, false, true, settle - time.Nanosecond, Every},
		{"settled at the settling time", "", false, false, true, settle, quiet},
	} {
		if got := pace(c.closed, c.drawn, c.limited, c.direct, c.sinceChange); got != c.want {
			t.Errorf("%s: want %v, have %v", c.name, c.want, got)
		}
	}
}

var t0 = time.Unix(1_000_000, 0)

func unlimited() (r [Kinds]int64) {
	for k := range r {
		r[k] = overload.Unlimited
	}
	return r
}

// group is the inputs of a group whose slot i is held by worker ids[i],
// every one ready, none sent a table yet, admission open.
func group(now time.Time, ids ...int) Inputs {
	in := Inputs{Now: now, RetryAfter: 5, Room: unlimited()}
	for _, id := range ids {
		in.Workers = append(in.Workers, Worker{ID: id})
		in.Slots = append(in.Slots, Slot{Worker: id, Ready: true})
	}
	return in
}

// next is the inputs of the refresh after the one that planned a, at now,
// with everything a said done: the view published, the table sent.
func next(in Inputs, a Actions, now time.Time) Inputs {
	in.Now, in.Last, in.ViewGen = now, a.Next, a.Next.Gen
	in.Workers = slices.Clone(in.Workers)
	for i := range in.Workers {
		if slices.Contains(a.SendTo, in.Workers[i].ID) {
			in.Workers[i].Sent = a.Next.Gen
		}
	}
	return in
}

// settled is the inputs of a group of ready workers ids whose admission
// has been open long enough and nothing changed since: datagrams go to
// the workers, and every worker has the table.
func settled(t *testing.T, ids ...int) Inputs {
	t.Helper()
	in := group(t0, ids...)
	in = next(in, Plan(in), t0.Add(2*directAfter))
	in = next(in, Plan(in), t0.Add(2*directAfter+2*settle))
	if a := Plan(in); !a.Next.Direct || a.Attach || a.Publish || len(a.SendTo) > 0 {
		t.Fatalf("not settled: direct %v, attach %v, publish %v, sent to %v", a.Next.Direct, a.Attach, a.Publish, a.SendTo)
	}
	return in
}

// Plan, one refresh at a time: given the group's workers and admission's
// state, which words every page gets, where the buckets go, which program
// the kernel runs and who is sent the table.
func TestPlan(t *testing.T) {
	t.Parallel()
	open, refuseAll := wire.Gate(true, false, 5), wire.Gate(false, true, 7)|wire.GateRefuseAll
	half := steer.Buckets / 2
	for _, c := range []struct {
		name string
		in   func(t *testing.T) Inputs
		// attach: a program is installed, why says whose (""
		// the workers', else why the door's); direct: datagrams go to the
		// workers afterwards; gen: how far the table's generation moves.
		attach  bool
		why     string
		direct  bool
		publish bool
		members int
		sendTo  []int
		gen     int
		fresh   int
		owners  map[uint8]int
		gate    uint64
		quotas  [][Kinds]uint64
		pace    time.Duration
	}{
		{
			name: "first refresh: the buckets placed, the table sent, datagrams still the door's until admission has been open a while",
			in:   func(*testing.T) Inputs { return group(t0, 7, 8) },
			why:  "", attach: false, direct: false, publish: true, members: 0,
			sendTo: []int{7, 8}, gen: 1, owners: map[uint8]int{1: half, 2: half}, gate: open, pace: Every,
		},
		{
			name: "every worker ready, admission open a while: the program spreads datagrams over them",
			in: func(*testing.T) Inputs {
				in := group(t0, 7, 8)
				return next(in, Plan(in), t0.Add(2*directAfter))
			},
			attach: true, direct: true, publish: true, members: 2,
			owners: map[uint8]int{1: half, 2: half}, gate: open, pace: Every,
		},
		{
			name:   "no change: nothing installed, published or sent, and the pace slows",
			in:     func(t *testing.T) Inputs { return settled(t, 7, 8) },
			direct: true, owners: map[uint8]int{1: half, 2: half}, gate: open, pace: quiet,
		},
		{
			name: "a worker draining: its buckets move to the other, which is sent the table; the door remembers whose they were",
			in: func(t *testing.T) Inputs {
				in := settled(t, 7, 8)
				in.Slots = []Slot{{Worker: 7, Ready: true}, {Worker: 8}}
				return in
			},
			attach: true, direct: true, publish: true, members: 1,
			sendTo: []int{7, 8}, gen: 2, fresh: half, owners: map[uint8]int{1: steer.Buckets}, gate: open, pace: Every,
		},
		{
			name: "a worker starting: sent the table before it is ready, given no bucket",
			in: func(t *testing.T) Inputs {
				in := settled(t, 7, 8)
				in.Workers = append(slices.Clone(in.Workers), Worker{ID: 9})
				in.Slots = append(slices.Clone(in.Slots), Slot{Worker: 9})
				return in
			},
			direct: true, sendTo: []int{9}, owners: map[uint8]int{1: half, 2: half}, gate: open, pace: quiet,
		},
		{
			name: "the group grows: the new worker ready, a third of the buckets move to it and the program is replaced",
			in: func(t *testing.T) Inputs {
				in := settled(t, 7, 8)
				in.Workers = append(slices.Clone(in.Workers), Worker{ID: 9})
				in.Slots = append(slices.Clone(in.Slots), Slot{Worker: 9, Ready: true})
				return in
			},
			attach: true, direct: true, publish: true, members: 3,
			sendTo: []int{7, 8, 9}, gen: 2, fresh: 21, owners: map[uint8]int{1: 22, 2: 21, 3: 21}, gate: open, pace: Every,
		},
		{
			name: "admission closed by the throttle: the door's program, the buckets kept for the door's own placing",
			in: func(t *testing.T) Inputs {
				in := settled(t, 7, 8)
				in.Closed = "throttle"
				return in
			},
			attach: true, why: "throttle", publish: true,
			owners: map[uint8]int{1: half, 2: half}, gate: wire.Gate(false, false, 5), pace: Every,
		},
		{
			name: "admission open again: the door keeps every datagram until it has been open a while",
			in: func(t *testing.T) Inputs {
				in := settled(t, 7, 8)
				in.Closed = "throttle"
				in = next(in, Plan(in), in.Now.Add(Every))
				in.Closed = ""
				return in
			},
			owners: map[uint8]int{1: half, 2: half}, gate: open, pace: Every,
		},
		{
			name: "a worker in slow start: every datagram through the door, which weighs the ramp",
			in: func(t *testing.T) Inputs {
				in := settled(t, 7, 8)
				in.Ramps = 1
				return in
			},
			attach: true, why: "slow start", publish: true,
			owners: map[uint8]int{1: half, 2: half}, gate: open, pace: Every,
		},
		{
			name: "suspended: the workers keep reading and refuse every new session themselves",
			in: func(t *testing.T) Inputs {
				in := settled(t, 7, 8)
				in.Closed, in.ProbesRefused, in.RetryAfter = overload.ClosedSuspended, true, 7
				return in
			},
			direct: true, owners: map[uint8]int{1: half, 2: half}, gate: refuseAll, pace: Every,
		},
		{
			name: "a session limit near full: each worker may admit alone a share of half the room",
			in: func(t *testing.T) Inputs {
				in := settled(t, 7, 8)
				in.Room[sipscan.KindCall] = 10
				in.Room[sipscan.KindSubscription] = 0
				in.Workers = []Worker{{ID: 7, Admitted: [Kinds]uint64{sipscan.KindCall: 3, sipscan.KindSubscription: 4}, Sent: in.Last.Gen},
					{ID: 8, Admitted: [Kinds]uint64{sipscan.KindCall: 5}, Sent: in.Last.Gen}}
				return in
			},
			direct: true, owners: map[uint8]int{1: half, 2: half}, gate: open, pace: Every,
			quotas: [][Kinds]uint64{
				{sipscan.KindOther: math.MaxUint64, sipscan.KindCall: 3 + 10/4, sipscan.KindSubscription: 4, sipscan.KindRegistration: math.MaxUint64},
				{sipscan.KindOther: math.MaxUint64, sipscan.KindCall: 5 + 10/4, sipscan.KindSubscription: 0, sipscan.KindRegistration: math.MaxUint64},
			},
		},
		{
			name: "no ready worker: every bucket the door's",
			in: func(t *testing.T) Inputs {
				in := settled(t, 7)
				in.Slots = []Slot{{Worker: 7}}
				return in
			},
			attach: true, why: "no ready worker", publish: true, sendTo: []int{7}, gen: 1, fresh: steer.Buckets,
			owners: map[uint8]int{0: steer.Buckets}, gate: open, pace: Every,
		},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := c.in(t)
			a := Plan(in)
			if a.Attach != c.attach || a.Why != c.why || a.Next.Direct != c.direct {
				t.Errorf("program: want attach %v why %q direct %v, have %v %q %v", c.attach, c.why, c.direct, a.Attach, a.Why, a.Next.Direct)
			}
			if a.Attach && a.Table != map[bool]steer.Table{true: a.Next.Shadow, false: {}}[c.why == ""] {
				t.Errorf("program's table: want the buckets' while direct, the door's otherwise, have %v", a.Table)
			}
			if a.Publish != c.publish || a.Members != c.members {
				t.Errorf("door's view: want publish %v members %d, have %v %d", c.publish, c.members, a.Publish, a.Members)
			}
			if !slices.Equal(a.SendTo, c.sendTo) || (a.Frame == nil) != (len(c.sendTo) == 0) {
				t.Errorf("table sent: want to %v, have to %v (frame %d bytes)", c.sendTo, a.SendTo, len(a.Frame))
			}
			if gen := a.Next.Gen - in.Last.Gen; gen != c.gen {
				t.Errorf("generation: want +%d, have +%d", c.gen, gen)
			}
			if len(a.Fresh) != c.fresh {
				t.Errorf("buckets moved from a worker holding calls: want %d, have %d", c.fresh, len(a.Fresh))
			}
			for _, b := range a.Fresh {
				if p := a.Next.Prev[b]; p.Worker != in.Slots[in.Last.Shadow[b]-1].Worker || p.Until <= in.Now.UnixNano() {
					t.Errorf("bucket %d: want its previous worker noted, have %+v", b, p)
				}
			}
			if have := counts(a.Next.Shadow); !maps.Equal(have, c.owners) {
				t.Errorf("buckets by member: want %v, have %v", c.owners, have)
			}
			if a.Gate != c.gate {
				t.Errorf("gate: want %#x, have %#x", c.gate, a.Gate)
			}
			if len(a.Quotas) != len(in.Workers) {
				t.Fatalf("quotas: want one per worker, have %d", len(a.Quotas))
			}
			for i, q := range a.Quotas {
				if c.quotas != nil && q != c.quotas[i] || c.quotas == nil && q != [Kinds]uint64{math.MaxUint64, math.MaxUint64, math.MaxUint64, math.MaxUint64} {
					t.Errorf("quota of worker %d: want %v, have %v", in.Workers[i].ID, c.quotas, q)
				}
			}
			if a.Pace != c.pace {
				t.Errorf("pace: want %v, have %v", c.pace, a.Pace)
			}
		})
	}
}

// Once the supervisor has handed the node over at an upgrade, its
// admission stops (or stays suspended, its monitors stopped with it), but
// the gate it writes never has the workers refuse what their sockets still
// held for that: they ask, and queue delay weighs nothing, whatever
// admission's state; every datagram is the door's from then on.
func TestPlanHandedOverRefusesNothing(t *testing.T) {
	t.Parallel()
	for _, closed := range []string{"stopping", overload.ClosedSuspended, ""} {
		t.Run(closed, func(t *testing.T) {
			in := settled(t, 7, 8)
			in.Closed, in.ProbesRefused, in.RetryAfter, in.QueueDelay = closed, closed != "", 7, uint64(time.Second)
			in.HandedOver = true
			a := Plan(in)
			if a.Gate&(wire.GateRefuseAll|wire.GateProbesRefused|wire.GateOpen) != 0 || wire.GateRetryAfter(a.Gate) != 7 {
				t.Errorf("gate: want the workers to ask, refusing nothing alone, have %#x", a.Gate)
			}
			if a.QueueDelay != 0 {
				t.Errorf("queue delay: want 0, have %d", a.QueueDelay)
			}
			if !a.Attach || a.Why != "handed over" || a.Next.Direct || a.Table != (steer.Table{}) {
				t.Errorf("program: want the door's, for the hand-over, have attach %v why %q direct %v", a.Attach, a.Why, a.Next.Direct)
			}
			// The words of a page decide as the worker's door does.
			for _, c := range []overload.Class{overload.ClassNew, overload.ClassRegister, overload.ClassProbe} {
				st := overload.State{RefuseAll: a.Gate&wire.GateRefuseAll != 0, LoadUnknown: a.Gate&wire.GateOpen == 0, RefreshUnknown: true,
					QueueFull: a.QueueDelay > 0, Room: unlimited()}
				if ans := overload.Decide(c, sipscan.KindCall, st); ans.Refused() {
					t.Errorf("%v: want no refusal by the worker alone, have %v", c, ans.Refusal)
				}
			}
		})
	}
}

// A bucket moves with a note of its previous worker only if that worker
// may hold calls of it: datagrams went to it, or the door placed some there.
func TestPlanNotesPreviousWorkerOnlyIfItMayHoldCalls(t *testing.T) {
	t.Parallel()
	// Datagrams never went to the workers (admission just opened): the
	// door placed a message of one bucket on worker 8 only.
	in := group(t0, 7, 8)
	in = next(in, Plan(in), t0.Add(directAfter/4))
	var b int
	for b = range in.Last.Shadow {
		if in.Last.Shadow[b] == 2 {
			break
		}
	}
	in.Placed[b] = in.Now.UnixNano()
	in.Slots = []Slot{{Worker: 7, Ready: true}, {Worker: 8}}
	a := Plan(in)
	if !slices.Equal(a.Fresh, []int{b}) || a.Next.Prev[b].Worker != 8 {
		t.Errorf("want only bucket %d noted as worker 8's, have %v (%+v)", b, a.Fresh, a.Next.Prev[b])
	}
	if a.Next.Direct {
		t.Error("datagrams went to the workers before admission had been open a while")
	}
}

// Plan is pure: the same inputs give the same actions, and the inputs are
// left as they were.
func TestPlanIsPure(t *testing.T) {
	t.Parallel()
	in := settled(t, 7, 8)
	in.Slots = []Slot{{Worker: 7, Ready: true}, {Worker: 8}}
	slots, workers, last := slices.Clone(in.Slots), slices.Clone(in.Workers), in.Last
	a, b := Plan(in), Plan(in)
	if !reflect.DeepEqual(a, b) {
		t.Error("two plans of the same inputs differ")
	}
	if !slices.Equal(in.Slots, slots) || !slices.Equal(in.Workers, workers) || in.Last != last {
		t.Error("Plan changed its inputs")
	}
}
