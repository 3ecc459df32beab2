package loadgen

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

// Colours that stay apart for colour-blind readers (Okabe and Ito), so a
// series is told by colour and, where two may coincide, by width and dashes.
var (
	cBlue   = color.RGBA{R: 0, G: 114, B: 178, A: 255}
	cGreen  = color.RGBA{R: 0, G: 158, B: 115, A: 255}
	cRed    = color.RGBA{R: 213, G: 94, B: 0, A: 255}
	cPurple = color.RGBA{R: 204, G: 121, B: 167, A: 255}
	cOrange = color.RGBA{R: 230, G: 159, B: 0, A: 255}
	cSky    = color.RGBA{R: 86, G: 180, B: 233, A: 255}
	cBlack  = color.RGBA{A: 255}
)

var groupPalette = []color.Color{cBlue, cOrange, cGreen, cPurple, cSky, cRed, cBlack}

// series is one line of a panel, with how it is drawn.
type series struct {
	name   string
	y      func(Row) float64
	color  color.Color
	width  float64 // points
	dashes []vg.Length
}

// panel is one chart of the figure; all share the time axis.
type panel struct {
	title  string
	ylabel string
	series []series
	ymax   float64 // 0: from the data
}

// layout decides the figure: calls per second always; response times when
// a call succeeded; each group's load and workers only with --scrape data.
// A series with nothing to show (no failures) is left out rather than drawn
// as a flat line on the axis.
func layout(rows []Row) []panel {
	has := func(f func(Row) float64) bool {
		for _, r := range rows {
			if v := f(r); v != 0 && !math.IsNaN(v) {
				return true
			}
		}
		return false
	}
	// The offered line is wide and drawn first, the succeeded one narrow on
	// top: when every call succeeds both stay visible, one inside the other.
	cps := panel{title: "Calls per second", ylabel: "calls/s", series: []series{
		{name: "offered", y: func(r Row) float64 { return float64(r.Offered) }, color: cSky, width: 5},
		{name: "succeeded", y: func(r Row) float64 { return float64(r.Succeeded) }, color: cGreen, width: 1.5},
	}}
	if has(func(r Row) float64 { return r.TargetCPS }) { // a uas has no schedule of its own
		cps.series = append(cps.series, series{name: "target", y: func(r Row) float64 { return r.TargetCPS }, color: cBlack, width: 1,
			dashes: []vg.Length{vg.Points(5), vg.Points(4)}})
	}
	if has(func(r Row) float64 { return float64(r.Failed) }) {
		cps.series = append(cps.series, series{name: "failed", y: func(r Row) float64 { return float64(r.Failed) }, color: cRed, width: 2})
	}
	out := []panel{cps}
	if has(func(r Row) float64 { return float64(r.SetupP99) }) {
		out = append(out, panel{title: "Response time (to the 2xx)", ylabel: "ms", series: []series{
			{name: "p99", y: func(r Row) float64 { return msOrNaN(r, r.SetupP99) }, color: cPurple, width: 2},
			{name: "p50", y: func(r Row) float64 { return msOrNaN(r, r.SetupP50) }, color: cBlue, width: 2, dashes: []vg.Length{vg.Points(5), vg.Points(3)}},
		}})
	}
	if len(rows) > 0 && len(rows[len(rows)-1].Groups) > 0 {
		load := panel{title: "Group load (--scrape)", ylabel: "load %", ymax: 105}
		workers := panel{title: "Workers per group (--scrape)", ylabel: "workers"}
		for gi, g := range rows[len(rows)-1].Groups {
			col := groupPalette[gi%len(groupPalette)]
			var dash []vg.Length
			if gi >= len(groupPalette) {
				dash = []vg.Length{vg.Points(4), vg.Points(3)}
			}
			load.series = append(load.series, series{name: g.Group, color: col, width: 2, dashes: dash, y: func(r Row) float64 {
				if gi < len(r.Groups) {
					return 100 * r.Groups[gi].Load
				}
				return math.NaN()
			}})
			workers.series = append(workers.series, series{name: g.Group, color: col, width: 2, dashes: dash, y: func(r Row) float64 {
				if gi < len(r.Groups) {
					return r.Groups[gi].Workers
				}
				return math.NaN()
			}})
		}
		out = append(out, load, workers)
	}
	return out
}

// msOrNaN leaves a gap in a second with no successful call, rather than a
// response time of zero.
func msOrNaN(r Row, d time.Duration) float64 {
	if r.Succeeded == 0 {
		return math.NaN()
	}
	return ms(d)
}

// geometry is where Plot drew each panel's data and legend, for tests.
type geometry struct {
	data, legend []vg.Rectangle
	titles       []string
	names        [][]string
}

const legendWidth = 2.3 * vg.Inch

// Plot draws rows as panels sharing the time axis (see layout), each with
// its legend to the right of its data. The format follows the file name
// (.svg or .png).
func Plot(name string, rows []Row) error {
	if len(rows) == 0 {
		return fmt.Errorf("no rows to draw")
	}
	n := len(layout(rows))
	w, h := 11*vg.Inch, vg.Length(n)*2.7*vg.Inch+0.3*vg.Inch
	var c draw.Canvas
	var save func(*os.File) error
	switch strings.ToLower(filepath.Ext(name)) {
	case ".svg":
		sc := vgsvg.New(w, h)
		c = draw.New(sc)
		save = func(f *os.File) error { _, err := sc.WriteTo(f); return err }
	case ".png":
		ic := vgimg.PngCanvas{Canvas: vgimg.NewWith(vgimg.UseWH(w, h), vgimg.UseDPI(110))}
		c = draw.New(ic)
		save = func(f *os.File) error { _, err := ic.WriteTo(f); return err }
	default:
		return fmt.Errorf("%s: want a .svg or .png file name", name)
	}
	if _, err := render(c, rows); err != nil {
		return err
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

func render(c draw.Canvas, rows []Row) (geometry, error) {
	var g geometry
	panels := layout(rows)
	last := rows[len(rows)-1].Elapsed.Seconds()
	var plots [][]*plot.Plot
	var legends []plot.Legend
	for i, pn := range panels {
		p := plot.New()
		p.Title.Text = pn.title
		p.Title.TextStyle.Font.Size = vg.Points(13)
		p.Y.Label.Text = pn.ylabel
		p.X.Min, p.X.Max = 0, last
		p.Y.Min = 0
		if i == len(panels)-1 {
			p.X.Label.Text = "time (s)"
		}
		p.Y.Tick.Marker = plainTicks{}
		p.X.Tick.Marker = plainTicks{}
		p.Add(plotter.NewGrid())
		leg := plot.NewLegend()
		leg.Top, leg.Left = true, true
		leg.TextStyle.Font.Size = vg.Points(11)
		leg.ThumbnailWidth = vg.Points(28)
		var names []string
		for _, s := range pn.series {
			l, err := stepLine(rows, s)
			if err != nil {
				return g, err
			}
			if l == nil {
				continue
			}
			p.Add(l)
			leg.Add(s.name, l)
			names = append(names, s.name)
		}
		p.Y.Max = math.Max(p.Y.Max*1.08, 1)
		if pn.ymax > 0 {
			p.Y.Max = math.Max(p.Y.Max, pn.ymax)
		}
		plots = append(plots, []*plot.Plot{p})
		legends = append(legends, leg)
		g.titles = append(g.titles, pn.title)
		g.names = append(g.names, names)
	}
	// Data on the left, legends in a column of their own on the right, so
	// that no legend hides a line.
	dataArea := draw.Crop(c, 0, -legendWidth, 0, 0)
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadTop: vg.Points(6), PadBottom: vg.Points(6), PadX: vg.Points(6), PadY: vg.Points(14)}
	canvases := plot.Align(plots, tiles, dataArea)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
		da := plots[i][0].DataCanvas(canvases[i][0])
		g.data = append(g.data, da.Rectangle)
		lc := da
		lc.Rectangle.Min.X = c.Max.X - legendWidth + vg.Points(10)
		lc.Rectangle.Max.X = c.Max.X
		legends[i].Draw(lc)
		g.legend = append(g.legend, legends[i].Rectangle(lc))
	}
	return g, nil
}

// stepLine draws a series as steps: a row's value holds over the second it
// counts. A partial last second is left out, since its counts are not
// per-second rates. nil when the series has no point.
func stepLine(rows []Row, s series) (*plotter.Line, error) {
	pts := make(plotter.XYs, 0, 2*len(rows))
	prev := 0.0
	for _, r := range rows {
		end := r.Elapsed.Seconds()
		start := prev
		prev = end
		y := s.y(r)
		if end-start < 0.999 {
			continue
		}
		if math.IsNaN(y) {
			// A gap: plotter.Line cannot skip, so hold the last value.
			if len(pts) == 0 {
				continue
			}
			y = pts[len(pts)-1].Y
		}
		pts = append(pts, plotter.XY{X: start, Y: y}, plotter.XY{X: end, Y: y})
	}
	if len(pts) == 0 {
		return nil, nil
	}
	l, err := plotter.NewLine(pts)
	if err != nil {
		return nil, fmt.Errorf("series %s: %w", s.name, err)
	}
	l.Color = s.color
	l.Width = vg.Points(s.width)
	l.Dashes = s.dashes
	return l, nil
}

// plainTicks are gonum's default ticks written without float noise
// ("250", not "250.00").
type plainTicks struct{}

func (plainTicks) Ticks(min, max float64) []plot.Tick {
	ts := plot.DefaultTicks{}.Ticks(min, max)
	for i := range ts {
		if ts[i].Label != "" {
			ts[i].Label = strconv.FormatFloat(ts[i].Value, 'f', -1, 64)
		}
	}
	return ts
}
