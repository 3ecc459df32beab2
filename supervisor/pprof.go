package supervisor

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/pprof"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/sipvisor/sipvisor/ctl"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/pool"
)

// defaultProfileWait bounds the wait for a worker to start sending a
// profile, on top of a CPU profile's seconds: the request waits behind the
// worker's queue, which at QueueCapacity frames of 1 ms is about 4 s.
const defaultProfileWait = 10 * time.Second

// profileSendWait bounds the transfer of a profile to the HTTP client once
// it has started, so that a client that stops reading cannot hold the
// worker's pipe open.
const profileSendWait = time.Minute

// registerPprof puts the profiles on the control mux: the supervisor's own
// (net/http/pprof's handlers, registered here by hand: the package's init
// also registers them on http.DefaultServeMux, which sipvisor never serves)
// and any worker's, under /debug/pprof/worker/.
func (s *Supervisor) registerPprof(mux *http.ServeMux) {
	token := s.config().HTTPToken
	handle := func(pattern string, h http.HandlerFunc) { mux.Handle(pattern, ctl.RequireToken(token, h)) }
	handle("GET /debug/pprof/", pprof.Index)
	handle("GET /debug/pprof/cmdline", pprof.Cmdline)
	handle("GET /debug/pprof/profile", s.ownCPUProfile)
	handle("GET /debug/pprof/symbol", pprof.Symbol)
	handle("POST /debug/pprof/symbol", pprof.Symbol)
	handle("GET /debug/pprof/trace", pprof.Trace)
	handle("GET /debug/pprof/worker/{id}/{profile}", s.workerProfile)
	handle("GET /debug/pprof/worker/", func(w http.ResponseWriter, r *http.Request) {
		profileError(w, http.StatusNotFound, fmt.Sprintf("no endpoint %q: want /debug/pprof/worker/ID/PROFILE, PROFILE one of %s",
			r.URL.Path, strings.Join(wire.ProfileNames, ", ")))
	})
}

func profileError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, map[string]string{"error": msg})
}

// profileSeconds is a CPU profile's ?seconds=, DefaultProfileSeconds when
// absent.
func profileSeconds(q url.Values) (int, error) {
	if !q.Has("seconds") {
		return wire.DefaultProfileSeconds, nil
	}
	n, err := strconv.Atoi(q.Get("seconds"))
	if err != nil || n < 1 || n > wire.MaxProfileSeconds {
		return 0, fmt.Errorf("seconds=%q: want a whole number of seconds from 1 to %d", q.Get("seconds"), wire.MaxProfileSeconds)
	}
	return n, nil
}

// ownCPUProfile is net/http/pprof's CPU profile of the supervisor with the
// workers' bounds on its length, and a second request refused with 409
// rather than pprof's 500.
func (s *Supervisor) ownCPUProfile(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	secs, err := profileSeconds(q)
	if err != nil {
		profileError(w, http.StatusBadRequest, err.Error())
		return
	}
	if !s.cpuProfiling.CompareAndSwap(false, true) {
		profileError(w, http.StatusConflict, "the supervisor is being CPU-profiled already: one CPU profile at a time per process")
		return
	}
	defer s.cpuProfiling.Store(false)
	q.Set("seconds", strconv.Itoa(secs))
	r = r.Clone(r.Context())
	r.URL.RawQuery = q.Encode()
	pprof.Profile(w, r)
}

// workerProfile streams a worker's profile: GET
// /debug/pprof/worker/{id}/{profile}[?seconds=N][&group=NAME], id as in
// `ctl ps`.
func (s *Supervisor) workerProfile(w http.ResponseWriter, r *http.Request) {
	name, q := r.PathValue("profile"), r.URL.Query()
	id, err := strconv.Atoi(r.PathValue("id"))
	if err != nil || id < 1 {
		profileError(w, http.StatusBadRequest, fmt.Sprintf("worker %q: want a worker's ID, as in the ID column of `sipvisor ctl ps`", r.PathValue("id")))
		return
	}
	if err := wire.CheckProfile(name, 1); err != nil {
		profileError(w, http.StatusBadRequest, err.Error())
		return
	}
	seconds := 0
	if name == wire.CPUProfile {
		if seconds, err = profileSeconds(q); err != nil {
			profileError(w, http.StatusBadRequest, err.Error())
			return
		}
	} else if q.Has("seconds") {
		profileError(w, http.StatusBadRequest, fmt.Sprintf("seconds is for the CPU profile (%q) only", wire.CPUProfile))
		return
	}
	wk, group, code, msg := s.findWorker(q.Get("group"), id)
	if wk == nil {
		profileError(w, code, msg)
		return
	}

	wait := time.Duration(seconds)*time.Second + time.Duration(s.profileWait.Load())
	ctx, cancel := context.WithTimeout(r.Context(), wait)
	defer cancel()
	p, err := wk.Profile(ctx, name, seconds)
	if err != nil {
		switch {
		case errors.Is(err, context.Canceled):
			// The client left; there is nobody to answer.
		case errors.Is(err, pool.ErrProfileBusy):
			profileError(w, http.StatusConflict, err.Error())
		case errors.Is(err, pool.ErrQueueFull):
			profileError(w, http.StatusServiceUnavailable, fmt.Sprintf("worker %d of group %s: its queue is full; try again", id, group))
		case errors.Is(err, pool.ErrEnded):
			profileError(w, http.StatusServiceUnavailable, fmt.Sprintf("worker %d of group %s is exiting", id, group))
		case errors.Is(err, pool.ErrWorkerGone):
			profileError(w, http.StatusBadGateway, err.Error())
		case errors.Is(err, pool.ErrProfileTimeout):
			profileError(w, http.StatusGatewayTimeout, err.Error())
		default:
			profileError(w, http.StatusInternalServerError, err.Error())
		}
		return
	}
	defer p.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Content-Disposition", fmt.Sprintf(`attachment; filename="%s-worker-%d.pb.gz"`, name, id))
	h.Set("Content-Length", strconv.FormatInt(p.Size, 10))
	h.Set("X-Sipvisor-Group", group)
	h.Set("X-Sipvisor-Pid", strconv.Itoa(wk.Pid))
	http.NewResponseController(w).SetWriteDeadline(time.Now().Add(profileSendWait))
	if _, err := io.Copy(w, p); err != nil {
		s.log.Warn("worker profile cut short", "group", group, "worker", id, "pid", wk.Pid, "profile", name, "error", err)
		// The status line is out: only an aborted answer tells the client
		// that the profile is not whole.
		panic(http.ErrAbortHandler)
	}
}

// findWorker finds worker id of the group named, or of any group when
// group is "": IDs count from 1 in each group, so more than one may match.
// A group may be named by its kind (udp, tcp, timer) when it is the only
// one of that kind: UDP groups are named after their socket, a mouthful.
func (s *Supervisor) findWorker(group string, id int) (w *pool.Worker, in string, code int, msg string) {
	grs := s.groupRuns()
	var names []string
	for _, gr := range grs {
		names = append(names, gr.g.Name())
	}
	if group != "" && !slices.Contains(names, group) {
		var kind []string
		for _, gr := range grs {
			if string(gr.g.Kind()) == group {
				kind = append(kind, gr.g.Name())
			}
		}
		switch len(kind) {
		case 0:
			return nil, "", http.StatusNotFound, fmt.Sprintf("no group %q: the groups are %s", group, strings.Join(names, ", "))
		case 1:
			group = kind[0]
		default:
			return nil, "", http.StatusBadRequest, fmt.Sprintf("%d groups are %s: name one of %s", len(kind), group, strings.Join(kind, ", "))
		}
	}
	var have []string
	for _, gr := range grs {
		if group != "" && gr.g.Name() != group {
			continue
		}
		for _, x := range gr.g.Workers() {
			if x.ID == id {
				w, in = x, gr.g.Name()
				have = append(have, in)
			}
		}
	}
	switch {
	case len(have) == 0 && group != "":
		return nil, "", http.StatusNotFound, fmt.Sprintf("no worker %d in group %s (see `sipvisor ctl ps`)", id, group)
	case len(have) == 0:
		return nil, "", http.StatusNotFound, fmt.Sprintf("no worker %d (see `sipvisor ctl ps`)", id)
	case len(have) > 1:
		return nil, "", http.StatusBadRequest, fmt.Sprintf("worker %d is in groups %s: name the group (ctl pprof -group NAME, or ?group=NAME), or its kind (udp, tcp, timer) if no other group is of that kind",
			id, strings.Join(have, ", "))
	}
	return w, in, 0, ""
}
