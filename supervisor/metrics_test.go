package supervisor

import (
	dto "github.com/prometheus/client_model/go"
	"testing"
)

// counterValue sums the samples of a metric family whose label key has
// value val (every sample when key is "").
func counterValue(t *testing.T, s *Supervisor, name, key, val string) float64 {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := key == ""
			for _, l := range m.GetLabel() {
				if l.GetName() == key && l.GetValue() == val {
					match = true
				}
			}
			if !match {
				continue
			}
			switch {
			case m.Counter != nil:
				sum += m.GetCounter().GetValue()
			case m.Gauge != nil:
				sum += m.GetGauge().GetValue()
			}
		}
	}
	return sum
}

func mustGather(t *testing.T, s *Supervisor) []*dto.MetricFamily {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}
