package didyoumean

import "testing"

func TestClosest(t *testing.T) {
	t.Parallel()
	names := []string{"udp_workers", "tcp_workers", "timer_workers", "auto_scaling_cycle"}
	for _, c := range []struct{ word, want string }{
		{"udp_workerz", "udp_workers"},
		{"tpc_workers", "tcp_workers"},
		{"auto_scalign_cycle", "auto_scaling_cycle"},
		{"banana", ""},
		{"", ""},
		{"x", ""},
	} {
		if have := Closest(c.word, names); have != c.want {
			t.Errorf("%q: want %q, have %q", c.word, c.want, have)
		}
	}
}

func TestDistance(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		a, b string
		want int
	}{
		{"", "", 0}, {"abc", "abc", 0}, {"abc", "acb", 1}, {"abc", "abd", 1}, {"abc", "", 3}, {"kitten", "sitting", 3},
	} {
		if have := Distance(c.a, c.b); have != c.want {
			t.Errorf("%q %q: want %d, have %d", c.a, c.b, c.want, have)
		}
	}
}
