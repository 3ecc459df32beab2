package overload

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	value       *prometheus.GaugeVec
	high, low   *prometheus.GaugeVec
	suspended   prometheus.Gauge
	suspensions *prometheus.CounterVec
	share       *prometheus.GaugeVec
	rtt         *prometheus.GaugeVec
	flips       *prometheus.GaugeVec
	healthy     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) metrics {
	g := func(name, help string, labels ...string) *prometheus.GaugeVec {
		return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sipvisor", Subsystem: "overload", Name: name, Help: help}, labels)
	}
	m := metrics{
		value: g("monitor_value", "Each suspend monitor's last reading (percent, or a count for number_of_sessions).", "monitor"),
		high:  g("monitor_high_watermark", "Each monitor's high watermark: at or over it new sessions are refused.", "monitor"),
		low:   g("monitor_low_watermark", "Each monitor's low watermark: at or under it the monitor releases the suspension.", "monitor"),
		suspended: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sipvisor", Subsystem: "overload", Name: "suspended",
			Help: "1 while new sessions are refused by auto-suspend or by the operator."}),
		suspensions: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sipvisor", Subsystem: "overload", Name: "suspensions_total",
			Help: "Suspensions, by the monitor that caused them (operator for ctl suspend)."}, []string{"reason"}),
		share: g("throttle_refused_ratio", "Share of new sessions the RTT throttle refuses, per group (0-1).", "group"),
		rtt:   g("echo_rtt_seconds", "Worst echo round trip of the group's workers in the last echo interval.", "group"),
		flips: g("flips", "Status flips per component within the flip window.", "component"),
		healthy: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "sipvisor", Subsystem: "overload", Name: "healthy",
			Help: "1 while no component flapped more than the flip threshold within the window."}),
	}
	reg.MustRegister(m.value, m.high, m.low, m.suspended, m.suspensions, m.share, m.rtt, m.flips, m.healthy)
	return m
}
