package loadgen

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are sipload's own Prometheus series, for a run watched next to the
// server's: sipvisor_loadgen_requests_total{method,result} and
// sipvisor_loadgen_response_duration_seconds{method}.
type Metrics struct {
	requests *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

// NewMetrics creates the series and registers them with reg.
func NewMetrics(reg prometheus.Registerer) (*Metrics, error) {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sipvisor", Subsystem: "loadgen", Name: "requests_total",
			Help: "Calls (INVITE dialogs) or REGISTER/OPTIONS transactions sipload ended, by outcome.",
		}, []string{"method", "result"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sipvisor", Subsystem: "loadgen", Name: "response_duration_seconds",
			Help:    "Time from a request to its successful final response (INVITE: to the 200).",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"method"}),
	}
	for _, c := range []prometheus.Collector{m.requests, m.duration} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

// runMetrics are one run's resolved series, so the loop never looks up labels.
type runMetrics struct {
	ok, timeout, c4xx, c5xx, c503, other prometheus.Counter
	dur                                  prometheus.Observer
}

func (m *Metrics) forRun(method string) *runMetrics {
	if m == nil {
		return nil
	}
	r := func(result string) prometheus.Counter { return m.requests.WithLabelValues(method, result) }
	return &runMetrics{
		ok: r("succeeded"), timeout: r("timeout"), c4xx: r("4xx"), c5xx: r("5xx"),
		c503: r("503_retry_after"), other: r("other"),
		dur: m.duration.WithLabelValues(method),
	}
}

// add counts one second's outcomes: once a second, off the per-message path.
func (r *runMetrics) add(c *Counts) {
	if r == nil {
		return
	}
	r.ok.Add(float64(c.Succeeded))
	r.timeout.Add(float64(c.FailedTimeout))
	r.c4xx.Add(float64(c.Failed4xx))
	r.c5xx.Add(float64(c.Failed5xx))
	r.c503.Add(float64(c.Failed503RetryAfter))
	r.other.Add(float64(c.FailedOther))
}

func (r *runMetrics) observe(d time.Duration) {
	if r != nil {
		r.dur.Observe(d.Seconds())
	}
}
