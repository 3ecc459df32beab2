package pike

import (
	"net/netip"
	"testing"
	"time"
)

const s = int64(time.Second)

var (
	a = netip.MustParseAddr("192.0.2.1")
	b = netip.MustParseAddr("192.0.2.2")
	c = netip.MustParseAddr("198.51.100.7")
)

func policy() Policy {
	return Policy{Requests: 10, Window: 2 * time.Second, AuthPerSource: 3, AuthPerUser: 5,
		AuthWindow: time.Minute, BanTime: 300 * time.Second, Exempt: []netip.Prefix{netip.MustParsePrefix("198.51.100.0/24")}}
}

// step is one call on a table: requests (n > 0) or a failed authentication
// (user set), from src at t seconds, and whether it bans.
type step struct {
	t    int64
	src  netip.Addr
	n    int
	user string
	ban  bool
}

func TestTable(t *testing.T) {
	for _, tc := range []struct {
		name  string
		steps []step
	}{
		{"requests up to the threshold pass", []step{{0, a, 5, "", false}, {1, a, 5, "", false}}},
		{"one past the threshold bans", []step{{0, a, 10, "", false}, {1, a, 1, "", true}}},
		{"a new window starts afresh", []step{{0, a, 10, "", false}, {2, a, 10, "", false}, {3, a, 1, "", true}}},
		{"sources count apart", []step{{0, a, 10, "", false}, {0, b, 10, "", false}}},
		{"an exempt source is never banned", []step{{0, c, 100, "", false}, {0, c, 1, "bob", false}, {0, c, 1, "bob", false}, {0, c, 1, "bob", false}}},
		{"failures per source ban at the threshold", []step{{0, a, 0, "bob", false}, {10, a, 0, "bob", false}, {20, a, 0, "alice", true}}},
		{"failures age out with their window", []step{{0, a, 0, "bob", false}, {10, a, 0, "bob", false}, {70, a, 0, "bob", false}, {80, a, 0, "bob", false}, {90, a, 0, "bob", true}}},
		{"a user under attack bans each further failing source", []step{
			{0, netip.MustParseAddr("203.0.113.1"), 0, "bob", false}, {0, netip.MustParseAddr("203.0.113.2"), 0, "bob", false},
			{0, netip.MustParseAddr("203.0.113.3"), 0, "bob", false}, {0, netip.MustParseAddr("203.0.113.4"), 0, "bob", false},
			{0, netip.MustParseAddr("203.0.113.5"), 0, "bob", false}, {0, netip.MustParseAddr("203.0.113.6"), 0, "bob", true},
			{1, netip.MustParseAddr("203.0.113.7"), 0, "bob", true}, {1, a, 0, "alice", false}}},
		{"a banned source is not counted again", []step{{0, a, 11, "", true}, {1, a, 100, "", false}, {1, a, 0, "bob", false}}},
		{"a ban ends after ban_time", []step{{0, a, 11, "", true}, {299, a, 11, "", false}, {300, a, 11, "", true}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tb := NewTable(policy())
			for i, st := range tc.steps {
				now := st.t * s
				var ban Ban
				var got bool
				if st.user != "" {
					ban, got = tb.AuthFailed(st.src, st.user, now)
				} else {
					ban, got = tb.Requests(st.src, st.n, now)
				}
				if got != st.ban {
					t.Fatalf("step %d (%+v): banned %v, want %v", i, st, got, st.ban)
				}
				if got && (ban.Source != st.src || ban.Until != now+300*s || !tb.Banned(st.src, now)) {
					t.Fatalf("step %d: ban %+v", i, ban)
				}
				tb.Expire(now)
			}
		})
	}
}

func TestTableReasonsAndLift(t *testing.T) {
	tb := NewTable(policy())
	if _, ok := tb.Requests(a, 11, 0); !ok {
		t.Fatal("want a pike ban")
	}
	tb.AuthFailed(b, "bob", s)
	tb.AuthFailed(b, "bob", s)
	ban, ok := tb.AuthFailed(b, "bob", s)
	if !ok || ban.Reason != ReasonAuth || ban.Count != 3 || ban.User != "bob" {
		t.Fatalf("want an auth ban of 3 failures for bob, have %+v %v", ban, ok)
	}
	list := tb.Bans(2 * s)
	if len(list) != 2 || list[0].Source != a || list[0].Reason != ReasonPike || list[0].Count != 11 || list[1].Source != b {
		t.Fatalf("bans: %+v", list)
	}
	if tb.Imposed != [NumReasons]uint64{1, 1} {
		t.Fatalf("imposed %v", tb.Imposed)
	}
	if !tb.Lift(a) || tb.Lift(a) || tb.Banned(a, 2*s) {
		t.Fatal("lift")
	}
	// Lifted, a starts afresh: its counts went with the ban.
	if _, ok := tb.Requests(a, 10, 2*s); ok {
		t.Fatal("a lifted source was banned again at once")
	}
	if tb.Expire(300*s) != false || tb.Expire(301*s) != true || len(tb.Bans(301*s)) != 0 {
		t.Fatal("expire")
	}
}

func TestSetPolicyLiftsNewlyExempt(t *testing.T) {
	tb := NewTable(policy())
	tb.Requests(a, 11, 0)
	p := policy()
	p.Exempt = append(p.Exempt, netip.MustParsePrefix("192.0.2.0/28"))
	if !tb.SetPolicy(p) || tb.Banned(a, 1) {
		t.Fatal("a newly exempt source stays banned")
	}
}

func TestMaxBansReplacesSoonestToEnd(t *testing.T) {
	p := policy()
	p.Requests = 1
	tb := NewTable(p)
	for i := range MaxBans + 1 {
		src := netip.AddrFrom4([4]byte{10, byte(i >> 16), byte(i >> 8), byte(i)})
		if _, ok := tb.Requests(src, 2, int64(i)); !ok {
			t.Fatalf("source %d not banned", i)
		}
	}
	if n := len(tb.Bans(0)); n != MaxBans {
		t.Fatalf("%d bans, want %d", n, MaxBans)
	}
	if tb.Banned(netip.AddrFrom4([4]byte{10, 0, 0, 0}), 1) {
		t.Fatal("the first ban, the soonest to end, stayed")
	}
}

func TestList(t *testing.T) {
	var l List
	if l.Banned(a, 0) {
		t.Fatal("empty list bans")
	}
	l.Set(map[netip.Addr]int64{a: 10})
	mapped := netip.AddrFrom16(a.As16())
	for _, tc := range []struct {
		src  netip.Addr
		now  int64
		want bool
	}{{a, 0, true}, {mapped, 9, true}, {a, 10, false}, {b, 0, false}} {
		if got := l.Banned(tc.src, tc.now); got != tc.want {
			t.Errorf("Banned(%v, %d) = %v, want %v", tc.src, tc.now, got, tc.want)
		}
	}
}

func TestCounter(t *testing.T) {
	var c Counter
	p := policy()
	p.Requests = 64
	c.Set(p) // step 8
	reported := 0
	for i := range 20 {
		reported += int(c.Hit(a, int64(i)))
	}
	if reported != 16 {
		t.Fatalf("reported %d of 20 requests, want 16 (two steps of 8)", reported)
	}
	// A new window starts the count over.
	if n := c.Hit(a, 2*s); n != 0 {
		t.Fatal("a new window reported at its first request")
	}
	for range 100 {
		if c.Hit(netip.MustParseAddr("198.51.100.9"), 2*s) != 0 {
			t.Fatal("an exempt source was reported")
		}
	}
	var off Counter
	off.Set(Policy{})
	if off.Hit(a, 0) != 0 {
		t.Fatal("a counter with the check off counts")
	}
}

func TestCounterAllocatesNothing(t *testing.T) {
	var c Counter
	p := policy()
	p.Requests = 1000
	c.Set(p)
	c.Hit(a, 0)
	now := int64(0)
	if n := testing.AllocsPerRun(1000, func() {
		now += 1000
		c.Hit(a, now)
		c.Hit(b, now)
	}); n != 0 {
		t.Fatalf("%v allocations per hit", n)
	}
	var l List
	l.Set(map[netip.Addr]int64{b: 1 << 62})
	if n := testing.AllocsPerRun(1000, func() { l.Banned(a, 0) }); n != 0 {
		t.Fatalf("%v allocations per lookup", n)
	}
}
