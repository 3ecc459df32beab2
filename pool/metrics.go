package pool

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the pool's Prometheus metrics. They are made by the supervisor
// and passed down, so that two supervisors fit in one test process.
type Metrics struct {
	workers  *prometheus.GaugeVec
	spawns   *prometheus.CounterVec
	exits    *prometheus.CounterVec
	restarts *prometheus.CounterVec
	ready    *prometheus.HistogramVec
	load     *prometheus.GaugeVec
}

// NewMetrics makes the metrics and registers them with reg, if not nil.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		workers: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sipvisor", Subsystem: "pool", Name: "workers",
			Help: "Worker processes per group and state.",
		}, []string{"group", "state"}),
		spawns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sipvisor", Subsystem: "pool", Name: "worker_spawns_total",
			Help: "Worker processes started.",
		}, []string{"group"}),
		exits: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sipvisor", Subsystem: "pool", Name: "worker_exits_total",
			Help: "Worker processes ended, by reason: clean, crash, killed, ready_timeout.",
		}, []string{"group", "reason"}),
		restarts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sipvisor", Subsystem: "pool", Name: "worker_restarts_total",
			Help: "Workers replaced after an unplanned exit.",
		}, []string{"group"}),
		ready: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: "sipvisor", Subsystem: "pool", Name: "worker_ready_duration_seconds",
			Help:    "Time from fork to the worker's ready byte.",
			Buckets: []float64{.002, .005, .01, .02, .05, .1, .25, .5, 1, 5},
		}, []string{"group"}),
		load: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: "sipvisor", Subsystem: "profile", Name: "load_ratio",
			Help: "Group load over the last cycle: mean busy share of its ready workers (0-1).",
		}, []string{"group"}),
	}
	if reg != nil {
		reg.MustRegister(m.workers, m.spawns, m.exits, m.restarts, m.ready, m.load)
	}
	return m
}

// exitReasons are the values of worker_exits_total's reason label.
var exitReasons = [...]string{ExitClean, ExitCrash, ExitKilled, ExitReadyTimeout}

// initGroup makes every series of a group's metrics at 0, each label value
// it may take, so that a series exists before its first event: a counter
// born at 1 hides that event from increase(), and an alert on the first
// worker crash would miss it.
func (m *Metrics) initGroup(group string) {
	m.spawns.WithLabelValues(group)
	m.restarts.WithLabelValues(group)
	m.load.WithLabelValues(group) // no load before the first sample
	for _, r := range exitReasons {
		m.exits.WithLabelValues(group, r)
	}
	for s := range stateNames {
		m.workers.WithLabelValues(group, State(s).String())
	}
}
