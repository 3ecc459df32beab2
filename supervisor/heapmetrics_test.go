package supervisor

import (
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/testkit"
)

// seriesCount counts the series of the family name with label group.
func seriesCount(body, name, group string) int {
	n := 0
	for line := range strings.Lines(body) {
		if strings.HasPrefix(line, name+"{") && strings.Contains(line, `group="`+group+`"`) {
			n++
		}
	}
	return n
}

// Every worker has a heap and a GC CPU series once its group is sampled;
// a worker's series go when it exits, and its replacement's come.
func TestWorkerMemoryMetrics(t *testing.T) {
	t.Parallel()
	st := startSupervisor(t, cfgf(`
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
auto_scaling_cycle = 0.2
udp_workers = 2
route { exit; }
`), costWorker(0), nil)
	g := st.s.Groups()[0]
	testkit.WaitFor(t, patience, "2 ready workers", func() bool { return len(g.Routable()) == 2 })
	// A worker's series is there or not: a missing one is not a 0.
	series := func(name string, id int) (float64, bool) {
		return st.lookup(t, name, `group="`+g.Name()+`"`, `worker="`+strconv.Itoa(id)+`"`)
	}
	for _, id := range []int{1, 2} {
		testkit.WaitFor(t, 10*time.Second, "worker "+strconv.Itoa(id)+"'s heap series", func() bool {
			_, ok := series("sipvisor_worker_heap_bytes", id)
			return ok
		})
		if v, _ := series("sipvisor_worker_heap_bytes", id); v <= 0 {
			t.Errorf("worker %d: want a heap over 0 bytes, have %v", id, v)
		}
		if v, ok := series("sipvisor_worker_gc_cpu_seconds_total", id); !ok || v < 0 {
			t.Errorf("worker %d: want a GC CPU series of 0 or more, have %v (present %v)", id, v, ok)
		}
		// The runtime counts CPU by class at the end of each collection:
		// until a worker's first, its busy CPU is 0 and GC's share of it
		// unknown (no series), after it a share.
		cpu, ok := series("sipvisor_worker_cpu_seconds_total", id)
		if !ok || cpu < 0 {
			t.Errorf("worker %d: want a CPU series of 0 or more, have %v (present %v)", id, cpu, ok)
		}
		if v, ok := series("sipvisor_worker_gc_cpu_ratio", id); ok && (v < 0 || v > 1) {
			t.Errorf("worker %d: want a GC share between 0 and 1, have %v", id, v)
		}
	}

	// `ctl ps` shows the same figures, read live.
	ps := backend{st.s}.PS()
	for _, w := range ps[0].Workers {
		if w.HeapBytes == 0 || w.GCCPUSeconds < 0 {
			t.Errorf("ps: worker %d: want its heap and GC CPU time, have %d bytes, %v s", w.ID, w.HeapBytes, w.GCCPUSeconds)
		}
		if p := w.GCCPUPercent; w.CPUSeconds < 0 || p != nil && (*p < 0 || *p > 100 || w.CPUSeconds == 0) {
			t.Errorf("ps: worker %d: want its CPU time and GC's percent of it when it has any, have %v s, %v", w.ID, w.CPUSeconds, p)
		}
	}

	w2 := g.Workers()[1]
	w2.Signal(syscall.SIGKILL)
	<-w2.Done()
	testkit.WaitFor(t, 10*time.Second, "worker 2's series gone and its replacement's there", func() bool {
		_, heap := series("sipvisor_worker_heap_bytes", 2)
		_, gc := series("sipvisor_worker_gc_cpu_seconds_total", 2)
		_, next := series("sipvisor_worker_heap_bytes", 3)
		return !heap && !gc && next
	})
	body := st.metrics(t)
	for _, name := range []string{"sipvisor_worker_heap_bytes", "sipvisor_worker_gc_cpu_seconds_total"} {
		if n := seriesCount(body, name, g.Name()); n != 2 {
			t.Errorf("%s: want a series for each of 2 workers, have %d", name, n)
		}
	}
}
