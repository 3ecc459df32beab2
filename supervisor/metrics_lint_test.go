package supervisor

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
	"github.com/sipvisor/sipvisor/internal/testkit"
)

// Every metric the supervisor exports passes Prometheus's own linter
// (promtool check metrics): base units, _total counters, help text.
func TestMetricsLint(t *testing.T) {
	t.Parallel()
	st := startSupervisor(t, cfgf(`
socket = udp:127.0.0.1:0
socket = tcp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 1
route { exit; }
`), costWorker(0), nil)
	// Once a cycle has sampled a ready worker, the load gauge and the
	// per-worker series have samples and the families lint with values in
	// them.
	testkit.WaitFor(t, patience, "a sampled group", func() bool {
		want := map[string]bool{"sipvisor_profile_load_ratio": true, "sipvisor_worker_heap_bytes": true, "sipvisor_worker_gc_cpu_seconds_total": true}
		for _, mf := range mustGather(t, st.s) {
			delete(want, mf.GetName())
		}
		return len(want) == 0
	})
	problems, err := promlint.NewWithMetricFamilies(mustGather(t, st.s)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}
