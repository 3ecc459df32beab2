package steering

import (
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/listeners/steer"
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
		limited     bool
		direct      bool
		sinceChange time.Duration
		want        time.Duration
	}{
		{"open, unlimited, direct, settled: quiet", "", false, true, settled, quiet},
		{"a session limit or queue admission set", "", true, true, settled, Every},
		{"throttled: the door decides", "throttle", false, false, settled, Every},
		{"suspended, workers refusing", "suspended", false, true, settled, Every},
		{"datagrams through the door", "", false, false, settled, Every},
		{"a change just now", "", false, true, 0, Every},
		{"a change just within the settling time", "", false, true, settle - time.Nanosecond, Every},
		{"settled at the settling time", "", false, true, settle, quiet},
	} {
		if got := pace(c.closed, c.limited, c.direct, c.sinceChange); got != c.want {
			t.Errorf("%s: want %v, have %v", c.name, c.want, got)
		}
	}
}
