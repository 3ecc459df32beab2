package profile

import (
	"fmt"
	"time"
)

// Loads are the three views of a load series that OpenSIPS reports
// (load, load1m, load10m), each a mean in percent.
type Loads struct {
	Second     float64 `json:"load"`
	Minute     float64 `json:"load1m"`
	TenMinutes float64 `json:"load10m"`
}

// Views keeps the 1 s, 1 min and 10 min means of a load series sampled once
// per cycle. Each view is a ring of the samples its span covers (at least one,
// so with a 2 s cycle the 1 s view is the last sample) and a running sum.
// Memory is taken once, in NewViews; Add is O(1) and does not allocate.
// Until a span has filled, its view is the mean of the samples so far.
type Views struct {
	second, minute, tenMinutes span
}

// NewViews sizes the views for samples taken every cycle.
func NewViews(cycle time.Duration) (*Views, error) {
	if cycle <= 0 {
		return nil, fmt.Errorf("load views: cycle %v must be positive", cycle)
	}
	return &Views{
		second:     newSpan(time.Second, cycle),
		minute:     newSpan(time.Minute, cycle),
		tenMinutes: newSpan(10*time.Minute, cycle),
	}, nil
}

// Add records one cycle's load.
func (v *Views) Add(load float64) {
	v.second.add(load)
	v.minute.add(load)
	v.tenMinutes.add(load)
}

// Loads returns the three means.
func (v *Views) Loads() Loads {
	return Loads{v.second.mean(), v.minute.mean(), v.tenMinutes.mean()}
}

type span struct {
	buf  []float64
	next int
	n    int
	sum  float64
}

// newSpan holds the samples that fall within d, rounded to the nearest whole
// number of cycles.
func newSpan(d, cycle time.Duration) span {
	n := int((d + cycle/2) / cycle)
	return span{buf: make([]float64, max(n, 1))}
}

func (s *span) add(x float64) {
	if s.n == len(s.buf) {
		s.sum -= s.buf[s.next]
	} else {
		s.n++
	}
	s.buf[s.next] = x
	s.sum += x
	s.next++
	if s.next == len(s.buf) {
		s.next = 0
		// A running sum drifts by rounding as values come and go; adding the
		// ring up again once a lap keeps the error bounded at O(1) per sample.
		s.sum = 0
		for _, v := range s.buf[:s.n] {
			s.sum += v
		}
	}
}

func (s *span) mean() float64 {
	if s.n == 0 {
		return 0
	}
	return s.sum / float64(s.n)
}
