package supervisor

import (
	"strconv"
	"syscall"
	"testing"
	"time"
)

// series is the value of the sample of the family name whose labels are
// exactly labels, and whether there is one: a missing series is not a 0.
func series(t *testing.T, s *Supervisor, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	for _, mf := range mustGather(t, s) {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			if len(m.GetLabel()) != len(labels) {
				continue
			}
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; !ok || v != l.GetValue() {
					continue next
				}
			}
			switch {
			case m.Counter != nil:
				return m.GetCounter().GetValue(), true
			case m.Gauge != nil:
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// seriesCount counts the samples of the family name with label group.
func seriesCount(t *testing.T, s *Supervisor, name, group string) int {
	t.Helper()
	n := 0
	for _, mf := range mustGather(t, s) {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "group" && l.GetValue() == group {
					n++
				}
			}
		}
	}
	return n
}

// Every worker has a heap and a GC CPU series once its group is sampled;
// a worker's series go when it exits, and its replacement's come.
func TestWorkerMemoryMetrics(t *testing.T) {
	st := startSupervisor(t, cfgf(`
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
auto_scaling_cycle = 0.2
udp_workers = 2
route { exit; }
`), costWorker(0), nil)
	g := st.s.Groups()[0]
	waitFor(t, "2 ready workers", 20*time.Second, func() bool { return len(g.Routable()) == 2 })
	of := func(id int) map[string]string {
		return map[string]string{"group": g.Name(), "worker": strconv.Itoa(id)}
	}
	for _, id := range []int{1, 2} {
		waitFor(t, "worker "+strconv.Itoa(id)+"'s heap series", 10*time.Second, func() bool {
			_, ok := series(t, st.s, "sipvisor_worker_heap_bytes", of(id))
			return ok
		})
		if v, _ := series(t, st.s, "sipvisor_worker_heap_bytes", of(id)); v <= 0 {
			t.Errorf("worker %d: want a heap over 0 bytes, have %v", id, v)
		}
		if v, ok := series(t, st.s, "sipvisor_worker_gc_cpu_seconds_total", of(id)); !ok || v < 0 {
			t.Errorf("worker %d: want a GC CPU series of 0 or more, have %v (present %v)", id, v, ok)
		}
	}

	// `ctl ps` shows the same figures, read live.
	ps := backend{st.s}.PS()
	for _, w := range ps[0].Workers {
		if w.HeapBytes == 0 || w.GCCPUSeconds < 0 {
			t.Errorf("ps: worker %d: want its heap and GC CPU time, have %d bytes, %v s", w.ID, w.HeapBytes, w.GCCPUSeconds)
		}
	}

	w2 := g.Workers()[1]
	w2.Signal(syscall.SIGKILL)
	<-w2.Done()
	waitFor(t, "worker 2's series gone and its replacement's there", 10*time.Second, func() bool {
		_, heap := series(t, st.s, "sipvisor_worker_heap_bytes", of(2))
		_, gc := series(t, st.s, "sipvisor_worker_gc_cpu_seconds_total", of(2))
		_, next := series(t, st.s, "sipvisor_worker_heap_bytes", of(3))
		return !heap && !gc && next
	})
	for _, name := range []string{"sipvisor_worker_heap_bytes", "sipvisor_worker_gc_cpu_seconds_total"} {
		if n := seriesCount(t, st.s, name, g.Name()); n != 2 {
			t.Errorf("%s: want a series for each of 2 workers, have %d", name, n)
		}
	}
}
