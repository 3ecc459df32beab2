package supervisor

import (
	"runtime/debug"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
)

// Version is set at build time with -ldflags "-X ...supervisor.Version=...".
var Version = "dev"

type metrics struct {
	cycleDuration  prometheus.Histogram
	decisions      *prometheus.CounterVec
	scalings       *prometheus.CounterVec
	sampleFailures *prometheus.CounterVec
	dropped        *prometheus.CounterVec
	reloadOK       prometheus.Gauge
	reloads        *prometheus.CounterVec
	timerJobs      *prometheus.CounterVec
	maxWorkers     *prometheus.GaugeVec
	storeErrors    *prometheus.CounterVec
	storeUp        prometheus.Gauge
	admissionAsks  *prometheus.CounterVec
}

func newMetrics(reg *prometheus.Registry) *metrics {
	m := &metrics{
		cycleDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: "sipvisor", Subsystem: "supervisor", Name: "cycle_duration_seconds",
			Help:    "Time to sample and decide for every group in one cycle.",
			Buckets: []float64{.0001, .0005, .001, .005, .01, .05, .1},
		}),
		decisions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sipvisor", Subsystem: "profile", Name: "decisions_total",
			Help: "Scaling decisions per group: up, down, hold.",
		}, []string{"group", "decision"}),
		scalings: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sipvisor", Subsystem: "profile", Name: "scalings_total",
			Help: "Scaling actions carried out per group and direction.",
		}, []string{"group", "direction"}),
		sampleFailures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sipvisor", Subsystem: "profile", Name: "sample_failures_total",
			Help: "Cycles in which a group had no ready worker to sample.",
		}, []string{"group"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sipvisor", Subsystem: "frontdoor", Name: "connections_dropped_total",
			Help: "TCP connections the supervisor could not hand to a worker, by reason.",
		}, []string{"group", "reason"}),
		reloadOK: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sipvisor", Subsystem: "config", Name: "last_reload_successful",
			Help: "1 if the last config reload succeeded (or none was tried), 0 if it failed.",
		}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sipvisor", Subsystem: "config", Name: "reloads_total",
			Help: "Config reloads by result.",
		}, []string{"result"}),
	}
	m.timerJobs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sipvisor", Subsystem: "supervisor", Name: "timer_jobs_total",
		Help: "timer_route runs handed to the timer group (sent) or not (skipped: no worker could take one).",
	}, []string{"result"})
	reg.MustRegister(m.timerJobs)
	m.admissionAsks = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sipvisor", Subsystem: "admission", Name: "asks_total",
		Help: "New sessions a worker asked the supervisor about rather than deciding by the gate and quota in its page: while admission is not open to all (a throttle, queue admission, a suspension's REGISTER), once a quota is used up, or before a worker's first gate.",
	}, []string{"group"})
	reg.MustRegister(m.admissionAsks)
	m.maxWorkers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "sipvisor", Subsystem: "profile", Name: "max_workers",
		Help: "The most workers a scaling group's profile lets it have (scale up to N); only groups with a profile.",
	}, []string{"group"})
	reg.MustRegister(m.maxWorkers)
	m.storeErrors = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sipvisor", Subsystem: "location", Name: "store_errors_total",
		Help: "Calls to the location store that failed, by the process that made them: a worker's REGISTER or lookup (answered 503), or the supervisor's count and sweep.",
	}, []string{"process"})
	m.storeUp = prometheus.NewGauge(prometheus.GaugeOpts{
		Namespace: "sipvisor", Subsystem: "location", Name: "store_up",
		Help: "1 if the supervisor's last call to the location store succeeded, 0 if it failed.",
	})
	reg.MustRegister(m.storeErrors, m.storeUp)
	m.reloadOK.Set(1)
	build := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: "sipvisor", Name: "build_info", Help: "Build information; always 1.",
	}, []string{"version", "goversion"})
	gov := "unknown"
	if bi, ok := debug.ReadBuildInfo(); ok {
		gov = bi.GoVersion
	}
	build.WithLabelValues(Version, gov).Set(1)
	reg.MustRegister(m.cycleDuration, m.decisions, m.scalings, m.sampleFailures, m.dropped, m.reloadOK, m.reloads, build,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}
