package main

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// palette is loadgen's, with two more for larger worker counts.
var palette = []color.Color{
	color.RGBA{R: 31, G: 119, B: 180, A: 255},
	color.RGBA{R: 214, G: 39, B: 40, A: 255},
	color.RGBA{R: 44, G: 160, B: 44, A: 255},
	color.RGBA{R: 255, G: 127, B: 14, A: 255},
	color.RGBA{R: 148, G: 103, B: 189, A: 255},
	color.RGBA{R: 140, G: 86, B: 75, A: 255},
	color.RGBA{R: 227, G: 119, B: 194, A: 255},
	color.RGBA{R: 23, G: 190, B: 207, A: 255},
}

// dashes: solid for the first round of colours, then dashed, then dotted,
// so that no two lines of a panel look alike.
var dashes = [][]vg.Length{
	nil,
	{vg.Points(6), vg.Points(3)},
	{vg.Points(2), vg.Points(2)},
}

// line is one series of a panel. Its style follows its name, so that a
// process keeps its colour from panel to panel.
type line struct {
	name string
	pts  plotter.XYs
}

// panel is one plot of the chart with its legend entries.
type panel struct {
	title, ylabel string
	lines         []line
}

const mib = 1 << 20

// panels builds the chart's panels from the samples, leaving out a panel
// (and a line) without data.
func panels(rows []sample) []panel {
	var out []panel
	add := func(p panel) {
		if len(p.lines) > 0 {
			out = append(out, p)
		}
	}
	sv := func(s sample) bool { return s.Server == "sipvisor" && s.Role != "tree" }
	add(panel{"sipvisor: RSS per process", "RSS (MiB)",
		series(rows, sv, func(s sample) float64 { return s.RSSKB / 1024 })})

	// One line per server: its whole tree's memory, the sum of PSS.
	var tree []line
	for _, srv := range servers(rows) {
		ls := series(rows, func(s sample) bool { return s.Server == srv && s.Role == "tree" },
			func(s sample) float64 { return s.PSSKB / 1024 })
		for _, l := range ls {
			tree = append(tree, line{name: srv, pts: l.pts})
		}
	}
	add(panel{"whole process tree: sum of PSS", "PSS (MiB)", tree})

	heap := series(rows, sv, func(s sample) float64 { return s.Heap / mib })
	title := "sipvisor: Go heap in use"
	if len(heap) == 1 && heap[0].name == "supervisor" {
		title += " (the workers' is not reported)"
	}
	add(panel{title, "heap (MiB)", heap})

	// GC CPU per second: the counter's increase over each sampling period.
	var gc []line
	for _, l := range series(rows, func(s sample) bool { return sv(s) && s.Role != "supervisor" },
		func(s sample) float64 { return s.GCCPUS }) {
		var pts plotter.XYs
		for i := 1; i < len(l.pts); i++ {
			dt := l.pts[i].X - l.pts[i-1].X
			dv := l.pts[i].Y - l.pts[i-1].Y
			if dt <= 0 || dv < 0 { // a replaced worker's counter starts again
				continue
			}
			pts = append(pts, plotter.XY{X: l.pts[i].X, Y: 100 * dv / dt})
		}
		if len(pts) > 0 {
			gc = append(gc, line{name: l.name, pts: pts})
		}
	}
	add(panel{"sipvisor: GC CPU per worker", "% of one core", gc})
	return out
}

// series gives one line per role of the rows keep selects, in roleLess
// order, with the points whose value is a number.
func series(rows []sample, keep func(sample) bool, y func(sample) float64) []line {
	byRole := map[string]plotter.XYs{}
	for _, s := range rows {
		if !keep(s) {
			continue
		}
		v := y(s)
		if math.IsNaN(v) {
			continue
		}
		byRole[s.Role] = append(byRole[s.Role], plotter.XY{X: s.T, Y: v})
	}
	roles := make([]string, 0, len(byRole))
	for r := range byRole {
		roles = append(roles, r)
	}
	sort.Slice(roles, func(i, j int) bool { return roleLess(roles[i], roles[j]) })
	out := make([]line, 0, len(roles))
	for _, r := range roles {
		out = append(out, line{name: r, pts: byRole[r]})
	}
	return out
}

// roleLess orders the supervisor (and Kamailio's main) first, then by
// name with the number after the last dash compared as a number: udp-2
// before udp-10.
func roleLess(a, b string) bool {
	rank := func(r string) int {
		if r == "supervisor" || r == "main" {
			return 0
		}
		return 1
	}
	if rank(a) != rank(b) {
		return rank(a) < rank(b)
	}
	an, ai := splitNum(a)
	bn, bi := splitNum(b)
	if an != bn {
		return an < bn
	}
	return ai < bi
}

func splitNum(r string) (string, int) {
	i := strings.LastIndexByte(r, '-')
	if i < 0 {
		return r, -1
	}
	n, err := strconv.Atoi(r[i+1:])
	if err != nil {
		return r, -1
	}
	return r[:i], n
}

// servers lists the servers in the order the CSV first names them.
func servers(rows []sample) []string {
	var out []string
	seen := map[string]bool{}
	for _, s := range rows {
		if !seen[s.Server] {
			seen[s.Server] = true
			out = append(out, s.Server)
		}
	}
	return out
}

// drawChart writes the chart: the panels stacked on one time axis, each with its
// legend to the right of the data.
func drawChart(name string, rows []sample) error {
	ps := panels(rows)
	if len(ps) == 0 {
		return fmt.Errorf("no data to draw")
	}
	last := 0.0
	for _, s := range rows {
		last = math.Max(last, s.T)
	}
	legendW := 1.7 * vg.Inch
	w, h := 11*vg.Inch, vg.Length(len(ps))*2.6*vg.Inch+0.3*vg.Inch
	var dc draw.Canvas
	var save func(*os.File) error
	switch strings.ToLower(filepath.Ext(name)) {
	case ".svg":
		sc := vgsvg.New(w, h)
		dc = draw.New(sc)
		save = func(f *os.File) error { _, err := sc.WriteTo(f); return err }
	case ".png":
		ic := vgimg.PngCanvas{Canvas: vgimg.New(w, h)}
		dc = draw.New(ic)
		save = func(f *os.File) error { _, err := ic.WriteTo(f); return err }
	default:
		return fmt.Errorf("%s: want a .svg or .png file name", name)
	}

	style := styles(ps)
	plots := make([][]*plot.Plot, len(ps))
	legends := make([]plot.Legend, len(ps))
	for i, p := range ps {
		pl := plot.New()
		pl.Title.Text = p.title
		pl.Y.Label.Text = p.ylabel
		pl.X.Min, pl.X.Max = 0, last
		pl.Y.Min = 0
		if i == len(ps)-1 {
			pl.X.Label.Text = "time since the load started (s)"
		}
		pl.Add(plotter.NewGrid())
		legends[i] = plot.NewLegend()
		legends[i].Top, legends[i].Left = true, true
		for _, l := range p.lines {
			ln, err := plotter.NewLine(l.pts)
			if err != nil {
				return fmt.Errorf("%s, %s: %w", p.title, l.name, err)
			}
			j := style[l.name]
			ln.Color = palette[j%len(palette)]
			ln.Width = vg.Points(1.5)
			ln.Dashes = dashes[(j/len(palette))%len(dashes)]
			pl.Add(ln)
			legends[i].Add(l.name, ln)
		}
		pl.X.Tick.Marker = timeTicks{}
		pl.Y.Tick.Marker = plainTicks{}
		pl.Y.Max = math.Max(pl.Y.Max*1.08, 1e-9) // headroom; an all-zero line still draws
		plots[i] = []*plot.Plot{pl}
	}

	// The plots take the canvas less a strip on the right for the legends.
	left := draw.Crop(dc, 0, -legendW, 0, 0)
	tiles := draw.Tiles{Rows: len(ps), Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(4), PadX: vg.Points(4), PadY: vg.Points(10)}
	canvases := plot.Align(plots, tiles, left)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
		r := canvases[i][0].Rectangle
		lc := draw.Canvas{Canvas: dc.Canvas, Rectangle: vg.Rectangle{
			Min: vg.Point{X: r.Max.X + vg.Points(10), Y: r.Min.Y},
			Max: vg.Point{X: dc.Max.X - vg.Points(4), Y: r.Max.Y - vg.Points(18)}, // below the title
		}}
		legends[i].Draw(lc)
	}

	f, err := os.Create(name)
	if err != nil {
		return err
	}
	if err := save(f); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", name, err)
	}
	return f.Close()
}

// styles numbers every line name of the chart: processes in roleLess order,
// then the servers (the tree panel's lines), so that no two names share a
// colour and dash.
func styles(ps []panel) map[string]int {
	var roles, srvs []string
	seen := map[string]bool{}
	for _, p := range ps {
		for _, l := range p.lines {
			if seen[l.name] {
				continue
			}
			seen[l.name] = true
			if l.name == "sipvisor" || l.name == "kamailio" {
				srvs = append(srvs, l.name)
			} else {
				roles = append(roles, l.name)
			}
		}
	}
	sort.Slice(roles, func(i, j int) bool { return roleLess(roles[i], roles[j]) })
	out := map[string]int{}
	for i, r := range append(roles, srvs...) {
		out[r] = i
	}
	return out
}

// timeTicks marks the time axis at a round number of seconds (a minute in
// a 10-minute run), so that "at 1 min" and "the last 5 min" can be read off.
type timeTicks struct{}

func (timeTicks) Ticks(lo, hi float64) []plot.Tick {
	step := 600.0
	for _, s := range []float64{5, 10, 15, 30, 60, 120, 300} {
		if (hi-lo)/s <= 12 {
			step = s
			break
		}
	}
	var ts []plot.Tick
	for v := math.Ceil(lo/step) * step; v <= hi+1e-9; v += step {
		ts = append(ts, plot.Tick{Value: v, Label: strconv.FormatFloat(v, 'f', -1, 64)})
		for m := 1; m < 5; m++ {
			if mv := v + float64(m)*step/5; mv < hi {
				ts = append(ts, plot.Tick{Value: mv})
			}
		}
	}
	return ts
}

// plainTicks are gonum's default ticks labelled without trailing zeros,
// and without the binary fraction's noise (1.2000000000000002): six
// significant digits are more than any axis here needs.
type plainTicks struct{}

func (plainTicks) Ticks(lo, hi float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(lo, hi)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = tickLabel(ts[i].Value)
		}
	}
	return ts
}

func tickLabel(v float64) string {
	r, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'g', 6, 64), 64)
	return strconv.FormatFloat(r, 'f', -1, 64)
}
