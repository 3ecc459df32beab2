package engine

import (
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"
)

type fakeTimed struct {
	d  deadline
	id int
}

func (f *fakeTimed) fire(*Worker, time.Time) {}
func (f *fakeTimed) deadline() *deadline     { return &f.d }

// checkHeap fails unless every entry knows its place and no parent is due
// after its children.
func checkHeap(t *testing.T, h timerHeap) {
	t.Helper()
	for i, x := range h {
		if x.deadline().pos != i+1 {
			t.Fatalf("entry %d thinks it is at %d", i, x.deadline().pos-1)
		}
		if i > 0 && h.less(i, (i-1)/2) {
			t.Fatalf("entry %d is due before its parent", i)
		}
	}
}

// The heap gives back every live deadline once, earliest first, including
// equal deadlines; a moved deadline counts once, at its new time, and a
// removed one not at all, and nothing stays behind.
func TestTimerHeapOrder(t *testing.T) {
	t.Parallel()
	base := time.Unix(1_000_000, 0)
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{0, 1, 2, 3, 7, 64, 1000} {
		var h timerHeap
		var items []*fakeTimed
		want := map[int]time.Duration{}
		for i := 0; i < n; i++ {
			d := time.Duration(r.IntN(50)) * time.Millisecond
			f := &fakeTimed{id: i}
			items = append(items, f)
			h.set(f, base.Add(d))
			want[i] = d
			if i%5 == 4 { // moved, earlier or later
				d = time.Duration(r.IntN(100)) * time.Millisecond
				h.set(f, base.Add(d))
				want[i] = d
			}
			checkHeap(t, h)
		}
		for i := 0; i < n; i += 7 { // finished before its time
			h.remove(items[i])
			h.remove(items[i]) // twice is harmless
			delete(want, i)
			checkHeap(t, h)
		}
		var wantOrder []time.Duration
		for _, d := range want {
			wantOrder = append(wantOrder, d)
		}
		slices.Sort(wantOrder)
		var have []time.Duration
		for {
			x, ok := h.due(base.Add(time.Hour))
			if !ok {
				break
			}
			f := x.(*fakeTimed)
			if f.d.scheduled() {
				t.Fatalf("%d deadlines: a popped entry still thinks it is scheduled", n)
			}
			have = append(have, f.d.at.Sub(base))
			checkHeap(t, h)
		}
		if !slices.Equal(have, wantOrder) {
			t.Fatalf("%d deadlines: want %v, have %v", n, wantOrder, have)
		}
		if len(h) != 0 || cap(h) > 0 && h[:cap(h)][0] != nil {
			t.Fatalf("%d deadlines: %d entries left", n, len(h))
		}
	}
	// Nothing before its time.
	var h timerHeap
	h.set(&fakeTimed{}, base.Add(time.Second))
	if _, ok := h.due(base); ok {
		t.Fatal("want no deadline due a second early")
	}
}

// The Via line written into relayed requests reads as sipgo writes the same
// header: IPv6 hosts in brackets, a port only when there is one. sipgo
// leaves a v4-mapped address unbracketed, which makes its port part of the
// address; the line keeps RFC 3261's brackets there.
func TestAppendVia(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ proto, local string }{
		{"UDP", "127.0.0.1:5060"},
		{"TCP", "10.1.2.3:40000"},
		{"UDP", "[::1]:5060"},
		{"UDP", "[2001:db8::7]:5080"},
		{"UDP", "192.0.2.9:0"},
	} {
		ap := netip.MustParseAddrPort(tc.local)
		via := &sip.ViaHeader{ProtocolName: "SIP", ProtocolVersion: "2.0", Transport: tc.proto,
			Host: ap.Addr().String(), Port: int(ap.Port()), Params: sip.HeaderParams{{K: "branch", V: "z9hG4bK-x.1"}}}
		var want strings.Builder
		want.WriteString("Via: ")
		want.WriteString(via.Value())
		want.WriteString("\r\n")
		if have := string(appendVia(nil, tc.proto, ap, "z9hG4bK-x.1")); have != want.String() {
			t.Errorf("%s %s: want %q, have %q", tc.proto, tc.local, want.String(), have)
		}
	}
	mapped := "Via: SIP/2.0/UDP [::ffff:192.0.2.1]:5060;branch=b\r\n"
	if have := string(appendVia(nil, "UDP", netip.MustParseAddrPort("[::ffff:192.0.2.1]:5060"), "b")); have != mapped {
		t.Errorf("v4-mapped: want %q, have %q", mapped, have)
	}
}

// The tag of the replies a worker makes is FNV-1a over the Call-ID, the
// From tag and the branch, as it always was, and isLocalTag recognises it
// and nothing else.
func TestLocalTag(t *testing.T) {
	t.Parallel()
	p := sip.NewParser()
	for i, raw := range []string{
		"INVITE sip:b@h SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK-1\r\nFrom: <sip:a@h>;tag=f1\r\nTo: <sip:b@h>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n",
		"ACK sip:b@h SIP/2.0\r\nVia: SIP/2.0/UDP h;BRANCH = z9hG4bK-2\r\nFrom: <sip:a@h>\r\nTo: <sip:b@h>;tag=x\r\nCall-ID: c2@h\r\nCSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n",
	} {
		m, err := p.ParseSIP([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		req := m.(*sip.Request)
		h := fnv.New64a()
		h.Write([]byte(*req.CallID()))
		if tag, ok := param(req.From().Params, "tag"); ok {
			h.Write([]byte(tag))
		}
		h.Write([]byte(branchOf(req.Via())))
		want := strconv.FormatUint(h.Sum64(), 36)
		if have := localTag(req); have != want {
			t.Errorf("%d: want tag %q, have %q", i, want, have)
		}
		if !isLocalTag(req, want) || isLocalTag(req, want+"0") || isLocalTag(req, want[1:]) || isLocalTag(req, "") {
			t.Errorf("%d: isLocalTag does not tell %q from its neighbours", i, want)
		}
	}
}

func TestBranchOwner(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		branch string
		pid    int
		ok     bool
	}{
		{"z9hG4bK0a1b2c3d-2n9c.1", 2*36*36*36 + 23*36*36 + 9*36 + 12, true},
		{"z9hG4bK0a1b2c3d-1.1f", 1, true},
		{"z9hG4bK0a1b2c3d.1", 0, false},          // no pid
		{"z9hG4bK0a1b2c3d-.1", 0, false},         // empty pid
		{"z9hG4bK0a1b2c3d-12", 0, false},         // no dot
		{"z9hG4bK-14844-2-7", 0, false},          // SIPp's
		{"z9hG4bK0a1b2c3d-1A.1", 0, false},       // not base 36 lower case
		{"z9hG4bK0a1b2c3d-zzzzzzzz.1", 0, false}, // too large
	} {
		pid, ok := branchOwner([]byte(c.branch))
		if pid != c.pid || ok != c.ok {
			t.Errorf("%s: want %d %v, have %d %v", c.branch, c.pid, c.ok, pid, ok)
		}
	}
	p := startProxy(t, "route { exit; }", nil)
	var branch string
	p.do(func() { branch = p.w.newBranch() })
	if pid, ok := branchOwner([]byte(branch)); !ok || pid != os.Getpid() {
		t.Errorf("a branch of ours: want our pid %d, have %d %v", os.Getpid(), pid, ok)
	}
}
