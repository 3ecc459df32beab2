package ctl

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

// pprofServer stands in for the supervisor's /debug/pprof/: each profile
// answers its own name, so a test sees which URL was asked for; worker 9
// does not exist, worker 3 is being CPU-profiled already, and worker 4's
// profile ends short.
type pprofServer struct {
	*httptest.Server
	mu   sync.Mutex
	asks []string
}

func (p *pprofServer) asked() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.asks...)
}

func newPprofServer(t *testing.T, token string) *pprofServer {
	p := &pprofServer{}
	mux := http.NewServeMux()
	profile := func(w http.ResponseWriter, r *http.Request, what string) {
		p.mu.Lock()
		p.asks = append(p.asks, r.URL.RequestURI())
		p.mu.Unlock()
		if token != "" && r.Header.Get("Authorization") != "Bearer "+token {
			writeError(w, http.StatusUnauthorized, "missing or wrong token")
			return
		}
		if r.URL.Query().Get("seconds") == "5" {
			time.Sleep(400 * time.Millisecond) // stands in for a CPU profile's length: beyond the test's -timeout 100ms, well within the 5 s the profile adds to it
		}
		w.Write([]byte("\x1f\x8b" + what))
	}
	mux.HandleFunc("GET /debug/pprof/{name}", func(w http.ResponseWriter, r *http.Request) {
		profile(w, r, "supervisor "+r.PathValue("name"))
	})
	mux.HandleFunc("GET /debug/pprof/worker/{id}/{name}", func(w http.ResponseWriter, r *http.Request) {
		switch r.PathValue("id") {
		case "9":
			writeError(w, http.StatusNotFound, "no worker 9 (see `sipvisor ctl ps`)")
			return
		case "3":
			writeError(w, http.StatusConflict, "worker 3 is being CPU-profiled already: one CPU profile at a time per process")
			return
		case "4":
			w.Header().Set("Content-Length", "100")
			w.Write([]byte("\x1f\x8bshort"))
			return
		}
		w.Header().Set("X-Sipvisor-Group", "udp:127.0.0.1:5060")
		w.Header().Set("X-Sipvisor-Pid", "4102")
		profile(w, r, "worker "+r.PathValue("id")+" "+r.PathValue("name"))
	})
	p.Server = httptest.NewServer(mux)
	t.Cleanup(p.Close)
	return p
}

func TestPprofCommand(t *testing.T) {
	t.Chdir(t.TempDir())
	srv := newPprofServer(t, "")
	for _, tt := range []struct {
		args      []string
		asked     string
		file, has string
		out       string
	}{
		{[]string{"pprof", "heap"}, "/debug/pprof/heap", "heap-supervisor.pb.gz", "supervisor heap",
			"wrote the supervisor's heap profile to heap-supervisor.pb.gz (17 bytes)\nread it with: go tool pprof -top heap-supervisor.pb.gz\n"},
		{[]string{"pprof", "heap", "-worker", "2"}, "/debug/pprof/worker/2/heap", "heap-worker-2.pb.gz", "worker 2 heap",
			"wrote the heap profile of worker 2 (group udp:127.0.0.1:5060, pid 4102) to heap-worker-2.pb.gz (15 bytes)\n"},
		{[]string{"pprof", "-worker", "2", "-group", "udp:127.0.0.1:5060", "goroutine"},
			"/debug/pprof/worker/2/goroutine?group=udp%3A127.0.0.1%3A5060", "goroutine-udp_127.0.0.1_5060-worker-2.pb.gz", "worker 2 goroutine", ""},
		{[]string{"pprof", "profile", "-worker", "2", "-seconds", "30", "-o", "cpu.out"}, "/debug/pprof/worker/2/profile?seconds=30", "cpu.out", "worker 2 profile", "wrote the CPU profile of worker 2 (group udp:127.0.0.1:5060, pid 4102) to cpu.out"},
		{[]string{"pprof", "profile"}, "/debug/pprof/profile", "profile-supervisor.pb.gz", "supervisor profile", ""},
		{[]string{"-timeout", "100ms", "pprof", "profile", "-seconds", "5"}, "/debug/pprof/profile?seconds=5", "profile-supervisor.pb.gz", "supervisor profile", ""},
	} {
		n := len(srv.asked())
		code, out, errs := ctl(t, srv.URL, tt.args...)
		if code != 0 || errs != "" {
			t.Errorf("%v: want exit 0, have %d %q", tt.args, code, errs)
			continue
		}
		if a := srv.asked(); len(a) != n+1 || a[n] != tt.asked {
			t.Errorf("%v: want %s asked for, have %q", tt.args, tt.asked, a[n:])
		}
		if b, err := os.ReadFile(tt.file); err != nil || string(b) != "\x1f\x8b"+tt.has {
			t.Errorf("%v: want %s to hold %q, have %q %v", tt.args, tt.file, tt.has, b, err)
		}
		if !strings.HasPrefix(out, tt.out) {
			t.Errorf("%v: want %q, have %q", tt.args, tt.out, out)
		}
	}

	code, out, _ := ctl(t, srv.URL, "pprof", "heap", "-worker", "2", "--json")
	var r PprofResult
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
		t.Fatalf("--json: want JSON, have %d %q", code, out)
	}
	if want := (PprofResult{File: "heap-worker-2.pb.gz", Bytes: 15, Profile: "heap", Worker: 2, Group: "udp:127.0.0.1:5060", Pid: 4102}); r != want {
		t.Errorf("--json: want %+v, have %+v", want, r)
	}
}

func TestPprofCommandErrors(t *testing.T) {
	for _, tt := range []struct {
		args  []string
		token bool
		code  int
		err   string
	}{
		{[]string{"pprof"}, true, 2, "pprof: no PROFILE given; want pprof PROFILE [-worker ID [-group NAME]]"},
		{[]string{"pprof", "cpu"}, true, 2, `unknown profile "cpu": want one of heap, allocs, goroutine, profile, block, mutex, threadcreate (the CPU profile is "profile")`},
		{[]string{"pprof", "heap", "goroutine"}, true, 2, `one PROFILE, not "heap" and "goroutine"`},
		{[]string{"pprof", "heap", "-worker", "x"}, true, 2, `invalid value "x" for flag -worker`},
		{[]string{"pprof", "heap", "-worker", "0"}, true, 2, "-worker 0: want a worker's ID"},
		{[]string{"pprof", "heap", "-group", "tcp"}, true, 2, "give -worker too"},
		{[]string{"pprof", "heap", "-seconds", "5"}, true, 2, "-seconds is for the CPU profile"},
		{[]string{"pprof", "profile", "-seconds", "five"}, true, 2, `invalid value "five" for flag -seconds`},
		{[]string{"pprof", "heap", "-bogus"}, true, 2, "flag provided but not defined: -bogus"},
		{[]string{"pprof", "heap", "-o"}, true, 2, "flag needs an argument: -o"},
		{[]string{"pprof", "heap", "-o", ""}, true, 2, "-o: give a file name"},
		{[]string{"prof"}, true, 2, `unknown command "prof" (did you mean "pprof"?)`},
		{[]string{"pprof", "heap", "-worker", "9"}, true, 1, "sipvisor ctl: no worker 9 (see `sipvisor ctl ps`)"},
		{[]string{"pprof", "profile", "-worker", "3"}, true, 1, "answered 409 Conflict: worker 3 is being CPU-profiled already"},
		{[]string{"pprof", "heap", "-worker", "4"}, true, 1, "heap-worker-4.pb.gz: the profile was cut short"},
		{[]string{"pprof", "heap"}, false, 1, "refused the token"},
	} {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Chdir(t.TempDir())
			srv := newPprofServer(t, "t0ken")
			args := tt.args
			if tt.token {
				args = append([]string{"-token", "t0ken"}, args...)
			}
			code, out, errs := ctl(t, srv.URL, args...)
			if code != tt.code || !strings.Contains(errs, tt.err) {
				t.Errorf("want exit %d and %q, have %d %q", tt.code, tt.err, code, errs)
			}
			if out != "" {
				t.Errorf("stdout: want nothing, have %q", out)
			}
			if left, _ := os.ReadDir("."); len(left) != 0 {
				t.Errorf("want no file left, have %v", fmt.Sprint(left))
			}
		})
	}
}
