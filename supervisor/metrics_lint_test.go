package supervisor

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"
)

// Every metric the supervisor exports passes Prometheus's own linter
// (promtool check metrics): base units, _total counters, help text.
func TestMetricsLint(t *testing.T) {
	st := startSupervisor(t, cfgf(`
socket = udp:127.0.0.1:0
socket = tcp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 1
route { exit; }
`), costWorker(0), nil)
	// Once a cycle has sampled a ready worker, the load gauge has a sample
	// and the families lint with values in them.
	waitFor(t, "a sampled group", 20*time.Second, func() bool {
		for _, mf := range mustGather(t, st.s) {
			if mf.GetName() == "sipvisor_profile_load_ratio" {
				return true
			}
		}
		return false
	})
	problems, err := promlint.NewWithMetricFamilies(mustGather(t, st.s)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("%s: %s", p.Metric, p.Text)
	}
}
