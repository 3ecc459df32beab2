package loadgen

import (
	"bytes"
	"math"
	"reflect"
	"testing"
	"time"

	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgsvg"
)

func plotRows(n int, groups bool, fail bool) []Row {
	var rows []Row
	for i := 1; i <= n; i++ {
		r := Row{Elapsed: time.Duration(i) * time.Second, TargetCPS: 100}
		r.Offered, r.Succeeded = 100, 100
		r.SetupP50, r.SetupP99 = 2*time.Millisecond, time.Duration(i)*time.Millisecond
		if fail && i > n/2 {
			r.Succeeded, r.Failed = 80, 20
		}
		if groups {
			r.Groups = []GroupSample{{Group: "udp:127.0.0.1:5060", Load: float64(i) / float64(n), Workers: 2}, {Group: "timer", Load: math.NaN(), Workers: 1}}
		}
		rows = append(rows, r)
	}
	return rows
}

// The chart's layout: which panels and series appear for which data, and
// every legend beside its data rather than over it.
func TestPlotLayout(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		rows   []Row
		titles []string
		names  [][]string
	}{
		{"no --scrape, no failures", plotRows(10, false, false),
			[]string{"Calls per second", "Response time (to the 2xx)"},
			[][]string{{"offered", "succeeded", "target"}, {"p99", "p50"}}},
		{"failures", plotRows(10, false, true),
			[]string{"Calls per second", "Response time (to the 2xx)"},
			[][]string{{"offered", "succeeded", "target", "failed"}, {"p99", "p50"}}},
		{"--scrape", plotRows(10, true, false),
			[]string{"Calls per second", "Response time (to the 2xx)", "Group load (--scrape)", "Workers per group (--scrape)"},
			[][]string{{"offered", "succeeded", "target"}, {"p99", "p50"}, {"udp:127.0.0.1:5060", "timer"}, {"udp:127.0.0.1:5060", "timer"}}},
		{"every call failed", func() []Row {
			rs := plotRows(5, false, false)
			for i := range rs {
				rs[i].Succeeded, rs[i].Failed, rs[i].SetupP50, rs[i].SetupP99 = 0, 100, 0, 0
			}
			return rs
		}(), []string{"Calls per second"}, [][]string{{"offered", "succeeded", "target", "failed"}}},
	} {
		w, h := 11*vg.Inch, 8*vg.Inch
		sc := vgsvg.New(w, h)
		g, err := render(draw.New(sc), tc.rows)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if !reflect.DeepEqual(g.titles, tc.titles) {
			t.Errorf("%s: want panels %q, have %q", tc.name, tc.titles, g.titles)
		}
		// The workers panel was drawn with no data as an axis from -1 to 1;
		// "timer" has no load samples (NaN) and so no load line.
		want := tc.names
		if tc.name == "--scrape" {
			want[2] = []string{"udp:127.0.0.1:5060"}
		}
		if !reflect.DeepEqual(g.names, want) {
			t.Errorf("%s: want series %q, have %q", tc.name, want, g.names)
		}
		var svg bytes.Buffer
		sc.WriteTo(&svg)
		for i := range g.data {
			d, l := g.data[i], g.legend[i]
			if l.Min.X < d.Max.X {
				t.Errorf("%s: panel %q: legend starts at x=%v, inside the data area ending at x=%v", tc.name, g.titles[i], l.Min.X, d.Max.X)
			}
			if l.Max.X > w || l.Min.Y < d.Min.Y || l.Max.Y > d.Max.Y {
				t.Errorf("%s: panel %q: legend %v outside the figure or its panel's height %v", tc.name, g.titles[i], l, d)
			}
			if i > 0 && d.Min.X != g.data[0].Min.X {
				t.Errorf("%s: panel %q: data starts at x=%v, not aligned with the first panel's %v", tc.name, g.titles[i], d.Min.X, g.data[0].Min.X)
			}
			for _, n := range g.names[i] {
				if !bytes.Contains(svg.Bytes(), []byte(">"+n+"<")) {
					t.Errorf("%s: want legend entry %q in the SVG", tc.name, n)
				}
			}
		}
	}
}
