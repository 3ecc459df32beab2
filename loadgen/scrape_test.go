package loadgen

import (
	"context"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

const metricsText = `# HELP sipvisor_profile_load_ratio Load of a worker group.
# TYPE sipvisor_profile_load_ratio gauge
sipvisor_profile_load_ratio{group="udp:127.0.0.1:5060"} 0.07
sipvisor_profile_load_ratio{group="tcp"} 0.5
sipvisor_pool_workers{group="udp:127.0.0.1:5060",state="ready"} 3
sipvisor_pool_workers{group="udp:127.0.0.1:5060",state="draining"} 1
sipvisor_pool_workers{group="udp:127.0.0.1:5060",state="exited"} 9
sipvisor_pool_workers{group="tcp",state="ready"} 2 1700000000000
go_goroutines 12
weird{a="x\"y\\z",b="1"} +Inf
`

func TestParseMetrics(t *testing.T) {
	t.Parallel()
	ss, err := parseMetrics(metricsText)
	if err != nil {
		t.Fatal(err)
	}
	if len(ss) != 8 {
		t.Fatalf("want 8 samples, have %d", len(ss))
	}
	if w := ss[7]; w.labels["a"] != `x"y\z` || !math.IsInf(w.value, 1) {
		t.Errorf("escapes: want x\"y\\z and +Inf, have %q %v", w.labels["a"], w.value)
	}
	g := groupSamples(ss)
	for _, tc := range []struct {
		group         string
		load, workers float64
	}{
		{"udp:127.0.0.1:5060", 0.07, 4},
		{"tcp", 0.5, 2},
	} {
		have := g[tc.group]
		if have.Load != tc.load || have.Workers != tc.workers {
			t.Errorf("%s: want load %v workers %v, have %v %v", tc.group, tc.load, tc.workers, have.Load, have.Workers)
		}
	}
}

func TestParseMetricsErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, err string }{
		{"x", "line 1: no value"},
		{"ok 1\nx{a=\"1\" 2", "line 2: bad label"},
		{"x{a=1} 2", "bad label"},
		{"x{a=\"1} 2", "unterminated label value"},
		{"x{} two", "not a number"},
		{"x 1 2 3", "want one value"},
	} {
		_, err := parseMetrics(tc.in)
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: want error with %q, have %v", tc.in, tc.err, err)
		}
	}
}

// Scraped columns follow the server's metrics as the run goes.
func TestScrapeAddsGroupColumns(t *testing.T) {
	t.Parallel()
	var workers atomic.Int64
	workers.Store(2)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "sipvisor_profile_load_ratio{group=\"udp\"} 0.25\nsipvisor_pool_workers{group=\"udp\",state=\"ready\"} %d\n", workers.Load())
	}))
	defer srv.Close()
	addr, _ := startUAS(t, Options{})
	// Room for every row of the longest run -timeout allows, so that a slow
	// run fails the test rather than blocking its loop.
	seen := make(chan float64, 32)
	o := Options{Scenario: "options", Target: addr.String(), LocalIP: "127.0.0.1", Schedule: Schedule{{20, 4 * time.Second}},
		Scrape: srv.URL, Timeout: 20 * time.Second,
		OnRow: func(r Row) {
			if len(r.Groups) == 1 {
				seen <- r.Groups[0].Workers
				workers.Store(5)
			}
		}}
	st, err := Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	if len(st.Rows) < 3 || len(st.Rows[0].Groups) != 1 || st.Rows[0].Groups[0].Group != "udp" || st.Rows[0].Groups[0].Load != .25 {
		t.Fatalf("want every row with group udp at load 0.25, have %+v", st.Rows)
	}
	close(seen)
	first, last := <-seen, 0.0
	for v := range seen {
		last = v
	}
	if first != 2 || last != 5 {
		t.Errorf("workers: want 2 first and 5 last, have %v %v", first, last)
	}
}

func TestScrapeFailureIsReported(t *testing.T) {
	t.Parallel()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "no", http.StatusInternalServerError)
	}))
	defer srv.Close()
	addr, _ := startUAS(t, Options{})
	st, err := Run(context.Background(), Options{Scenario: "options", Target: addr.String(), LocalIP: "127.0.0.1",
		Schedule: Schedule{{10, 500 * time.Millisecond}}, Scrape: srv.URL, Timeout: 20 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, w := range st.Warnings {
		found = found || strings.Contains(w, "reads of "+srv.URL+" failed")
	}
	if !found || len(st.Rows[0].Groups) != 0 {
		t.Errorf("want a warning naming %s and no group columns, have %q and %v", srv.URL, st.Warnings, st.Rows[0].Groups)
	}
}
