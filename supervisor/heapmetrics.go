package supervisor

import (
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
)

// workerCollector exports each worker's heap, GC and process CPU time and
// GC's share of that CPU as of its
// group's last sample. Workers write them on their stats page; series come
// from the sample, not from a live read, so that a scrape never sees a
// worker the supervisor has not sampled, nor one it has reaped.
type workerCollector struct {
	s                         *Supervisor
	heap, gcCPU, cpu, gcShare *prometheus.Desc
}

func newWorkerCollector(s *Supervisor) *workerCollector {
	labels := []string{"group", "worker"}
	return &workerCollector{s: s,
		heap: prometheus.NewDesc("sipvisor_worker_heap_bytes",
			"Go heap objects in use in the worker process, as of its group's last sample.", labels, nil),
		gcCPU: prometheus.NewDesc("sipvisor_worker_gc_cpu_seconds_total",
			"CPU time the worker's garbage collector has taken, the Go runtime's estimate (/cpu/classes/gc/total:cpu-seconds), as of its group's last sample.", labels, nil),
		cpu: prometheus.NewDesc("sipvisor_worker_cpu_seconds_total",
			"CPU time the worker's Go runtime counts as busy, its estimate (/cpu/classes/total less /cpu/classes/idle, the base of the GC's share), as of its group's last sample.", labels, nil),
		gcShare: prometheus.NewDesc("sipvisor_worker_gc_cpu_ratio",
			"Share (0-1) of the worker's CPU its garbage collector took over the last 10 to 20 seconds, as of its group's last sample.", labels, nil),
	}
}

func (c *workerCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.heap
	ch <- c.gcCPU
	ch <- c.cpu
	ch <- c.gcShare
}

func (c *workerCollector) Collect(ch chan<- prometheus.Metric) {
	var ms []prometheus.Metric
	c.s.mu.Lock()
	for _, gr := range c.s.groups {
		for id, w := range gr.mem {
			g, wid := gr.g.Name(), strconv.Itoa(id)
			ms = append(ms,
				prometheus.MustNewConstMetric(c.heap, prometheus.GaugeValue, float64(w.Heap), g, wid),
				prometheus.MustNewConstMetric(c.gcCPU, prometheus.CounterValue, w.GCCPU, g, wid),
				prometheus.MustNewConstMetric(c.cpu, prometheus.CounterValue, w.CPU, g, wid))
			if w.GCShareOK {
				ms = append(ms, prometheus.MustNewConstMetric(c.gcShare, prometheus.GaugeValue, w.GCShare/100, g, wid))
			}
		}
	}
	c.s.mu.Unlock()
	for _, m := range ms {
		ch <- m
	}
}
