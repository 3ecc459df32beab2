package supervisor

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/internal/testkit/testworker"
	"github.com/sipvisor/sipvisor/pool"
)

// The test binary doubles as a worker with a synthetic per-message cost, so
// that the scaling tests control load exactly; the SIP engine is tested with
// the real binary elsewhere.
func TestMain(m *testing.M) {
	testworker.Serve()
	os.Exit(m.Run())
}

// costWorker is a worker that sends each message back to its source after
// cost: every reply proves a message was handled.
func costWorker(cost time.Duration) pool.Command {
	path, args, env := testworker.Command(testworker.Echo, cost)
	return pool.Command{Path: path, Args: args, Env: env}
}

// started is a running supervisor made from inline config text.
type started struct {
	s    *Supervisor
	done chan error
	path string
}

func startSupervisor(t *testing.T, cfgText string, worker pool.Command, logw io.Writer) *started {
	t.Helper()
	path := t.TempDir() + "/sipvisor.cfg"
	if err := os.WriteFile(path, []byte(cfgText), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg, err := config.LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if logw == nil {
		logw = io.Discard
		if testing.Verbose() {
			logw = os.Stderr
		}
	}
	s, err := New(Options{Config: cfg, ConfigPath: path, Worker: worker,
		Logger: slog.New(slog.NewTextHandler(logw, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	st := &started{s: s, done: make(chan error, 1), path: path}
	go func() { st.done <- s.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-st.done:
			if err != nil {
				t.Errorf("supervisor: %v", err)
			}
		case <-time.After(30 * time.Second):
			t.Errorf("supervisor did not stop")
		}
	})
	return st
}

// metrics is the supervisor's /metrics page, read as Prometheus reads it.
func (st *started) metrics(t testing.TB) string {
	t.Helper()
	return testkit.Scrape(t, "http://"+st.s.HTTPAddr()+"/metrics")
}

// metric is the value of the series name with labels on /metrics; a
// missing series fails the test (see testkit.Metric).
func (st *started) metric(t testing.TB, name string, labels ...string) float64 {
	t.Helper()
	return testkit.Metric(t, st.metrics(t), name, labels...)
}

func cfgf(format string, args ...any) string {
	return strings.TrimSpace(fmt.Sprintf(format, args...)) + "\n"
}

// lookup is metric for a series that a wait may find missing: a gauge not
// yet set by the first sample, a label value not yet counted. ok says
// whether the series is there.
func (st *started) lookup(t testing.TB, name string, labels ...string) (v float64, ok bool) {
	t.Helper()
	v, ok, err := testkit.LookupMetric(st.metrics(t), name, labels...)
	if err != nil {
		t.Fatal(err)
	}
	return v, ok
}

// mustGather is the supervisor's metric families, for tests about which
// families there are rather than their values.
func mustGather(t testing.TB, s *Supervisor) []*dto.MetricFamily {
	t.Helper()
	mfs, err := s.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	return mfs
}

// patience bounds a wait on an event: only a hang should reach it, and a
// worker built with -race on a starved 2-core machine can take tens of
// seconds to start.
const patience = time.Minute
