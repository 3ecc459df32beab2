package loadgen

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"
	"strings"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
	"gonum.org/v1/plot/vg/vgsvg"
)

var palette = []color.Color{
	color.RGBA{R: 31, G: 119, B: 180, A: 255},
	color.RGBA{R: 214, G: 39, B: 40, A: 255},
	color.RGBA{R: 44, G: 160, B: 44, A: 255},
	color.RGBA{R: 255, G: 127, B: 14, A: 255},
	color.RGBA{R: 148, G: 103, B: 189, A: 255},
	color.RGBA{R: 140, G: 86, B: 75, A: 255},
}

// Plot draws rows as one figure of three panels sharing the time axis:
// offered and successful calls/s; each group's load in percent; each group's
// worker count. It is the seed document's chart, with the worker count drawn
// rather than inferred. The format follows the file name (.svg or .png).
func Plot(name string, rows []Row) error {
	if len(rows) == 0 {
		return fmt.Errorf("no rows to draw")
	}
	cps := plot.New()
	cps.Title.Text = "sipload: calls per second"
	cps.Y.Label.Text = "calls/s"
	cps.Y.Min = 0
	if err := addLines(cps, rows, []series{
		{"target", func(r Row) float64 { return r.TargetCPS }, true},
		{"offered", func(r Row) float64 { return float64(r.Offered) }, false},
		{"succeeded", func(r Row) float64 { return float64(r.Succeeded) }, false},
		{"failed", func(r Row) float64 { return float64(r.Failed) }, false},
	}); err != nil {
		return err
	}

	load := plot.New()
	load.Title.Text = "group load"
	load.Y.Label.Text = "load %"
	load.Y.Min, load.Y.Max = 0, 115 // headroom for the legend
	workers := plot.New()
	workers.Title.Text = "workers per group"
	workers.Y.Label.Text = "workers"
	workers.X.Label.Text = "time (s)"
	workers.Y.Min = 0
	var ls, ws []series
	if len(rows[len(rows)-1].Groups) > 0 {
		for gi, g := range rows[len(rows)-1].Groups {
			gi := gi
			ls = append(ls, series{name: g.Group, y: func(r Row) float64 {
				if gi < len(r.Groups) {
					return 100 * r.Groups[gi].Load
				}
				return math.NaN()
			}})
			ws = append(ws, series{name: g.Group, y: func(r Row) float64 {
				if gi < len(r.Groups) {
					return r.Groups[gi].Workers
				}
				return math.NaN()
			}})
		}
	} else {
		load.Title.Text = "group load (no --scrape)"
		workers.Title.Text = "workers per group (no --scrape)"
	}
	if err := addLines(load, rows, ls); err != nil {
		return err
	}
	if err := addLines(workers, rows, ws); err != nil {
		return err
	}
	// One x range for all panels so the eye can read straight down.
	last := rows[len(rows)-1].Elapsed.Seconds()
	for _, p := range []*plot.Plot{cps, load, workers} {
		p.X.Min, p.X.Max = 0, last
		p.Legend.Top, p.Legend.Left = true, true
		p.Legend.XOffs = vg.Points(8)
		p.Add(plotter.NewGrid())
	}
	for _, p := range []*plot.Plot{cps, workers} {
		p.Y.Max *= 1.25 // headroom for the legend
	}

	w, h := 10*vg.Inch, 9*vg.Inch
	var c draw.Canvas
	var save func(*os.File) error
	switch strings.ToLower(filepath.Ext(name)) {
	case ".svg":
		sc := vgsvg.New(w, h)
		c = draw.New(sc)
		save = func(f *os.File) error { _, err := sc.WriteTo(f); return err }
	case ".png":
		ic := vgimg.PngCanvas{Canvas: vgimg.New(w, h)}
		c = draw.New(ic)
		save = func(f *os.File) error { _, err := ic.WriteTo(f); return err }
	default:
		return fmt.Errorf("%s: want a .svg or .png file name", name)
	}
	plots := [][]*plot.Plot{{cps}, {load}, {workers}}
	tiles := draw.Tiles{Rows: 3, Cols: 1, PadTop: vg.Points(4), PadBottom: vg.Points(4), PadX: vg.Points(4), PadY: vg.Points(8)}
	canvases := plot.Align(plots, tiles, c)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
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

type series struct {
	name   string
	y      func(Row) float64
	dashed bool // drawn over another line, so both stay visible
}

// addLines draws each series as steps: a row's value holds over the second
// it counts. A partial last second is left out, since its counts are not
// per-second rates.
func addLines(p *plot.Plot, rows []Row, ss []series) error {
	for i, s := range ss {
		pts := make(plotter.XYs, 0, 2*len(rows))
		prev := 0.0
		for _, r := range rows {
			end := r.Elapsed.Seconds()
			start := prev
			prev = end
			y := s.y(r)
			if math.IsNaN(y) || end-start < 0.999 {
				continue
			}
			pts = append(pts, plotter.XY{X: start, Y: y}, plotter.XY{X: end, Y: y})
		}
		if len(pts) == 0 {
			continue
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return fmt.Errorf("series %s: %w", s.name, err)
		}
		l.Color = palette[i%len(palette)]
		l.Width = vg.Points(1.5)
		if s.dashed {
			l.Dashes = []vg.Length{vg.Points(4), vg.Points(3)}
		}
		p.Add(l)
		p.Legend.Add(s.name, l)
	}
	return nil
}
