package dispatcher

import (
	"fmt"
	"hash/fnv"
	"strings"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	src := "# set uri flags priority attrs\n" +
		"1 sip:127.0.0.1:5070 0 10 weight=30;duid=a\n" +
		"\n" +
		"1 sip:127.0.0.2:5070   # flags and the rest default\n" +
		"2 sips:backend.example.com;transport=tls 4\n"
	ds, errs := Parse([]byte(src))
	if len(errs) > 0 {
		t.Fatalf("errors: %v", errs)
	}
	want := []Dest{
		{Set: 1, URI: "sip:127.0.0.1:5070", Priority: 10, Attrs: "weight=30;duid=a", Weight: 30, Line: 2},
		{Set: 1, URI: "sip:127.0.0.2:5070", Weight: 1, Line: 4},
		{Set: 2, URI: "sips:backend.example.com;transport=tls", Flags: FlagDisabled, Weight: 1, Line: 5},
	}
	if fmt.Sprint(ds) != fmt.Sprint(want) {
		t.Fatalf("got %+v\nwant %+v", ds, want)
	}
}

func TestParseErrors(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"1\n", "1:1: want SETID"},
		{"x sip:a\n", "1:1: set id \"x\""},
		{"1 http://a\n", "1:3: destination \"http://a\""},
		{"1 sip:a x\n", "1:9: flags \"x\""},
		{"1 sip:a 0 high\n", "1:11: priority \"high\""},
		{"1 sip:a 0 0 weight=much\n", "1:13: weight \"much\""},
		{"1 sip:a 0 0 weight=1 extra\n", "1:22: unexpected \"extra\""},
		{"1 sip:a\n\n  1 sip:a\n", "3:5: sip:a is in set 1 already, at line 1"},
	} {
		_, errs := Parse([]byte(tc.src))
		if len(errs) != 1 || !strings.HasPrefix(errs[0].Error(), tc.want) {
			t.Errorf("%q: got %v, want %q…", tc.src, errs, tc.want)
		}
	}
}

func table(lines ...string) *Table {
	ds, errs := Parse([]byte(strings.Join(lines, "\n")))
	if len(errs) > 0 {
		panic(errs[0])
	}
	return NewTable(ds)
}

func all(int) bool { return true }

func TestSelect(t *testing.T) {
	tb := table("1 sip:a 0 0 weight=1", "1 sip:b 0 5 weight=3", "1 sip:c 0 0 weight=0", "2 sip:d")
	// Priority orders the set: b (5), then a, c in list order.
	if m := tb.Members(1); fmt.Sprint(m) != "[1 0 2]" {
		t.Fatalf("members %v", m)
	}
	s := NewSelector(tb, func(int) int { return 2 })
	uri := func(order []int) string {
		var out []string
		for _, i := range order {
			out = append(out, strings.TrimPrefix(tb.Dests[i].URI, "sip:"))
		}
		return strings.Join(out, "")
	}
	for _, tc := range []struct {
		alg  Alg
		key  string
		down string
		want []string // successive selections
	}{
		{AlgRoundRobin, "", "", []string{"bac", "acb", "cba", "bac"}},
		{AlgRoundRobin, "", "a", []string{"bc", "cb", "cb", "bc"}},
		{AlgFirst, "", "", []string{"bac", "bac"}},
		{AlgFirst, "", "b", []string{"ac"}},
		{AlgRandom, "", "", []string{"cba"}},
		// weight 3:1:0, smooth: b b a b, never c first.
		{AlgWeight, "", "", []string{"bac", "bac", "acb", "bac", "bac", "bac", "acb"}},
		{AlgWeight, "", "b", []string{"ac", "ac"}},
		{AlgWeight, "", "ab", []string{"c"}},
		{AlgCallID, "k", "", []string{"bac", "bac"}},
		// Its destination down, a key moves to the next one in the set.
		{AlgCallID, "k", "b", []string{"ac"}},
		{AlgCallID, "k", "abc", []string{""}},
	} {
		s := NewSelector(tb, func(int) int { return 2 })
		usable := func(i int) bool { return !strings.Contains(tc.down, strings.TrimPrefix(tb.Dests[i].URI, "sip:")) }
		var got []string
		for range tc.want {
			got = append(got, uri(s.Select(1, tc.alg, tc.key, usable)))
		}
		if fmt.Sprint(got) != fmt.Sprint(tc.want) {
			t.Errorf("%v key %q down %q: got %v, want %v", tc.alg, tc.key, tc.down, got, tc.want)
		}
	}
	if got := s.Select(3, AlgRoundRobin, "", all); got != nil {
		t.Errorf("a set the list lacks: %v", got)
	}
}

func TestHashIsFNV1a(t *testing.T) {
	h := fnv.New32a()
	h.Write([]byte("a84b4c76e66710@pc33.atlanta.example.com"))
	if got, want := Hash("a84b4c76e66710@pc33.atlanta.example.com"), h.Sum32(); got != want {
		t.Fatalf("Hash %x, FNV-1a %x", got, want)
	}
}

func TestHashSpreadsAndSticks(t *testing.T) {
	tb := table("1 sip:a", "1 sip:b")
	s := NewSelector(tb, nil)
	count := [2]int{}
	for i := 0; i < 1000; i++ {
		key := fmt.Sprintf("call-%d@host", i)
		first := s.Select(1, AlgCallID, key, all)[0]
		if again := s.Select(1, AlgCallID, key, all)[0]; again != first {
			t.Fatalf("%s moved from %d to %d", key, first, again)
		}
		count[first]++
	}
	if count[0] < 400 || count[1] < 400 {
		t.Errorf("spread %v of 1000 keys", count)
	}
}

func TestHealth(t *testing.T) {
	t0 := time.Unix(1000, 0)
	p := &Probe{Interval: time.Second, FailThreshold: 2, OKThreshold: 1, Alive: func(c int) bool { return c < 300 || c == 404 }}
	at := func(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }
	type step struct {
		ms   int
		ev   string // tick, answer CODE, fail
		want Status
		due  bool
	}
	for _, tc := range []struct {
		name  string
		flags int
		steps []step
	}{
		{"answered stays active", 0, []step{
			{0, "tick", Active, true}, {0, "sent", Active, false}, {20, "answer 200", Active, false},
			{500, "tick", Active, false}, {1000, "tick", Active, true},
		}},
		{"two timeouts make it inactive, one answer active", 0, []step{
			{0, "sent", Active, false}, {999, "tick", Active, false},
			{1000, "tick", Probing, true}, {1000, "sent", Probing, false},
			{2000, "tick", Inactive, true}, {2000, "sent", Inactive, false},
			{2030, "answer 404", Active, false},
		}},
		{"a refused code is a failure", 0, []step{
			{0, "sent", Active, false}, {10, "answer 503", Probing, false},
			{1000, "sent", Probing, false}, {1010, "answer 500", Inactive, false},
			{1200, "answer 200", Inactive, false}, // late: nothing pending
		}},
		{"inactive in the list until answered", FlagInactive, []step{
			{0, "tick", Inactive, true}, {0, "sent", Inactive, false}, {5, "answer 200", Active, false},
		}},
		{"disabled: never probed", FlagDisabled, []step{{0, "tick", Disabled, false}, {5000, "tick", Disabled, false}}},
		{"held after 503 Retry-After", 0, []step{
			{0, "hold 3000", Inactive, false}, {2999, "none", Inactive, false}, {3000, "none", Active, false},
		}},
		{"drain by hand, probed meanwhile", 0, []step{
			{0, "manual drain", Drain, false}, {0, "tick", Drain, true}, {0, "sent", Drain, false},
			{1, "answer 200", Drain, false}, {2, "manual active", Active, false},
		}},
	} {
		h := NewHealth(&Dest{Flags: tc.flags})
		for _, st := range tc.steps {
			now := at(st.ms)
			due := false
			switch ev, arg, _ := strings.Cut(st.ev, " "); ev {
			case "tick":
				due = h.Tick(now, p)
			case "sent":
				h.Sent(now, p)
			case "answer":
				var code int
				fmt.Sscan(arg, &code)
				h.Answered(now, code, p)
			case "hold":
				var ms int
				fmt.Sscan(arg, &ms)
				h.Hold(at(ms))
			case "manual":
				h.Manual, _ = ParseStatus(arg)
			}
			if got := h.Status(now); got != st.want || due != st.due {
				t.Errorf("%s: at %d ms after %s: %v due %v, want %v due %v", tc.name, st.ms, st.ev, got, due, st.want, st.due)
			}
		}
	}
}

func TestStatesRoundTrip(t *testing.T) {
	in := States{Gen: 7, Status: map[string]Status{"1 sip:a": Inactive, "2 sip:b": Drain}}
	out, err := DecodeStates(EncodeStates(in))
	if err != nil || fmt.Sprint(out) != fmt.Sprint(in) {
		t.Fatalf("got %v %v", out, err)
	}
	if _, err := DecodeStates([]byte("{")); err == nil {
		t.Fatal("a broken frame decoded")
	}
}

// BenchmarkSelect is the cost ds_select_dst adds to a call, beside the
// ~55 µs a proxied call costs a worker.
func BenchmarkSelect(b *testing.B) {
	var lines []string
	for i := range 8 {
		lines = append(lines, fmt.Sprintf("1 sip:10.0.0.%d:5060 0 0 weight=%d", i+1, i+1))
	}
	tb := table(lines...)
	for _, alg := range []Alg{AlgRoundRobin, AlgWeight, AlgCallID} {
		b.Run(alg.String(), func(b *testing.B) {
			s := NewSelector(tb, nil)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				s.Select(1, alg, "a84b4c76e66710@pc33.atlanta.example.com", all)
			}
		})
	}
}
