package pool

import (
	"math"
	"testing"
	"time"
)

func TestGCWindow(t *testing.T) {
	t.Parallel()
	s := int64(time.Second)
	type step struct {
		at      int64
		gc, cpu float64
		want    float64 // -1: no share
	}
	cases := []struct {
		name  string
		steps []step
	}{
		{"no CPU yet", []step{{1 * s, 0, 0, -1}}},
		{"young worker: since its start", []step{{1 * s, 0.01, 1, 1}, {5 * s, 0.1, 2, 5}}},
		{"a span on, the base moves to the first checkpoint", []step{
			{1 * s, 0.01, 1, 1}, {11 * s, 0.05, 3, 2}, {12 * s, 0.15, 4, 100 * 0.14 / 3}}},
		{"two spans on, the old collections leave the window", []step{
			{1 * s, 0.5, 1, 50}, {11 * s, 0.5, 2, 0}, {21 * s, 0.52, 4, 1}, {22 * s, 0.53, 5, 1}}},
		{"counts going back start over", []step{{1 * s, 0.2, 2, 10}, {11 * s, 0.1, 3, -1}, {12 * s, 0.11, 4, 100 * 0.11 / 4}}},
		{"no CPU in the window", []step{{1 * s, 0, 2, 0}, {11 * s, 0, 2, -1}, {21 * s, 0, 2, -1}}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var w gcWindow
			for i, st := range c.steps {
				got, ok := w.add(st.at, st.gc, st.cpu)
				if st.want < 0 {
					if ok {
						t.Errorf("step %d: want no share, have %v", i, got)
					}
					continue
				}
				if !ok || math.Abs(got-st.want) > 1e-9 {
					t.Errorf("step %d: want %v, have %v (ok %v)", i, st.want, got, ok)
				}
			}
		})
	}
}
