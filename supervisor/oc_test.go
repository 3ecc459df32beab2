package supervisor

import (
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/overload/oc"
)

func TestOCSettled(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name         string
		smp          oc.Sample
		before, loss int
		validity     time.Duration
		want         bool
	}{
		{"idle", oc.Sample{}, 0, 0, time.Second, true},
		{"sessions offered", oc.Sample{Admitted: 3}, 0, 0, time.Second, false},
		{"a loss decaying", oc.Sample{}, 20, 10, time.Second, false},
		{"refusals weighed", oc.Sample{Admitted: 10, Refused: 5}, 0, 12, time.Second, false},
		{"suspended: the first interval says 100 %", oc.Sample{RefuseAll: true, Refused: 4}, 30, 100, time.Second, false},
		{"suspended, 100 % said", oc.Sample{RefuseAll: true, Refused: 50}, 100, 100, time.Second, true},
		{"suspended with nothing offered", oc.Sample{RefuseAll: true}, 100, 100, 2 * time.Second, true},
		{"suspended, a validity shorter than the quiet interval", oc.Sample{RefuseAll: true}, 100, 100, 500 * time.Millisecond, false},
	} {
		if have := ocSettled(c.smp, c.before, c.loss, c.validity); have != c.want {
			t.Errorf("%s: want %v, have %v", c.name, c.want, have)
		}
	}
}
