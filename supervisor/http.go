package supervisor

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/sipvisor/sipvisor/ctl"
)

var errServerClosed = http.ErrServerClosed

// httpServer serves the control address: metrics, health, readiness, the
// management API under /mi/ and profiles under /debug/pprof/.
func (s *Supervisor) httpServer() *http.Server {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.reg, promhttp.HandlerOpts{Registry: s.reg}))
	mux.HandleFunc("GET /healthz", s.healthz)
	mux.HandleFunc("GET /readyz", s.readyz)
	if h := s.miHandler(); h != nil {
		mux.Handle("/mi/", h)
	}
	mux.Handle("POST /mi/upgrade", ctl.RequireToken(s.config().HTTPToken, http.HandlerFunc(s.upgradeHandler)))
	s.registerPprof(mux)
	return &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.Encode(v)
}

// healthz: is the process healthy (not merely up). Flapping components make
// it unhealthy.
func (s *Supervisor) healthz(w http.ResponseWriter, r *http.Request) {
	ok, reason := s.healthy()
	if !ok {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "unhealthy", "reason": reason})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ok"})
}

// readyz: should new users be sent here. Not while suspended, so that an
// orchestrator or load balancer sends them elsewhere; healthz stays healthy.
func (s *Supervisor) readyz(w http.ResponseWriter, r *http.Request) {
	ok, reason := s.ready()
	if !ok {
		writeJSON(w, http.StatusServiceUnavailable, map[string]any{"status": "not ready", "reason": reason})
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"status": "ready"})
}

func (s *Supervisor) healthy() (bool, string) { return s.ov.Healthy(time.Now()) }

func (s *Supervisor) ready() (bool, string) {
	if s.ov.Stopping() {
		return false, "stopping: draining workers"
	}
	if s.ov.Suspended() {
		return false, s.ov.Status().Warning
	}
	for _, gr := range s.groupRuns() {
		if len(gr.g.Routable()) == 0 {
			return false, "group " + gr.g.Name() + " has no ready worker"
		}
	}
	return true, ""
}
