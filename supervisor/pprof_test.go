package supervisor

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/ctl"
	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/internal/wire"
)

// pprofConfig has a UDP group of two workers, a TCP group and a timer group
// of one each, so that worker 1 is in every group and worker 2 only in the
// UDP one.
const pprofConfig = `
socket = udp:127.0.0.1:0
socket = tcp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 2
tcp_workers = 1
route { exit; }
`

func startPprof(t *testing.T, extra string) *started {
	t.Helper()
	st := startSupervisor(t, cfgf("%s", pprofConfig+extra), costWorker(0), nil)
	testkit.WaitFor(t, patience, "every worker ready", func() bool {
		for _, g := range st.s.Groups() {
			if n := len(g.Routable()); n == 0 || n != g.Live() {
				return false
			}
		}
		return true
	})
	return st
}

type answer struct {
	code int
	body []byte
	hdr  http.Header
}

func (a answer) errorText(t *testing.T) string {
	t.Helper()
	var e struct{ Error string }
	if err := json.Unmarshal(a.body, &e); err != nil || e.Error == "" {
		t.Fatalf("want a JSON error, have %d %q", a.code, a.body)
	}
	return e.Error
}

func get(t *testing.T, st *started, path string, header ...string) answer {
	t.Helper()
	a, err := fetch(st, path, header...)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// fetch is get for goroutines other than the test's.
func fetch(st *started, path string, header ...string) (answer, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+st.s.HTTPAddr()+path, nil)
	if err != nil {
		return answer{}, err
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return answer{}, fmt.Errorf("GET %s: %v", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return answer{}, fmt.Errorf("GET %s: reading the body: %v", path, err)
	}
	return answer{resp.StatusCode, b, resp.Header}, nil
}

// pprofStrings checks that b is a pprof profile, gzip-compressed protocol
// buffers of the Profile message (github.com/google/pprof/proto/profile.proto),
// as far as its top level goes, and returns its string table.
func pprofStrings(t *testing.T, b []byte) []string {
	t.Helper()
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("want gzip data, have %d bytes starting %q", len(b), b[:min(len(b), 16)])
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("decompress: %v", err)
	}
	var strs []string
	sampleTypes := 0
	for len(raw) > 0 {
		key, n := binary.Uvarint(raw)
		if n <= 0 {
			t.Fatalf("bad field key at %d bytes from the end", len(raw))
		}
		raw = raw[n:]
		field, wire := key>>3, key&7
		if field < 1 || field > 15 {
			t.Fatalf("field %d: not in pprof's Profile message", field)
		}
		switch wire {
		case 0:
			if _, n = binary.Uvarint(raw); n <= 0 {
				t.Fatalf("field %d: bad varint", field)
			}
			raw = raw[n:]
		case 2:
			l, n := binary.Uvarint(raw)
			if n <= 0 || uint64(len(raw)-n) < l {
				t.Fatalf("field %d: bad length", field)
			}
			v := raw[n : n+int(l)]
			raw = raw[n+int(l):]
			switch field {
			case 1:
				sampleTypes++
			case 6:
				strs = append(strs, string(v))
			}
		default:
			t.Fatalf("field %d: wire type %d, which pprof does not write", field, wire)
		}
	}
	if sampleTypes == 0 || len(strs) == 0 || strs[0] != "" {
		t.Fatalf("want sample types and a string table starting with \"\", have %d sample types and strings %q", sampleTypes, strs[:min(len(strs), 5)])
	}
	return strs
}

func wantStrings(t *testing.T, what string, strs []string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !slices.Contains(strs, w) {
			t.Errorf("%s: want %q among the profile's strings", what, w)
		}
	}
}

// The supervisor's profiles and any worker's come back as pprof data, and
// no pipe stays open after.
//
// Not parallel: it counts the pipes the whole process holds, which other
// tests' workers open and close.
func TestPprofProfiles(t *testing.T) {
	st := startPprof(t, "")
	if st.s.httpServer().Handler == http.DefaultServeMux {
		t.Fatal("the control server uses http.DefaultServeMux")
	}
	pipes := openPipes()

	a := get(t, st, "/debug/pprof/")
	if a.code != 200 || !bytes.Contains(a.body, []byte("heap")) {
		t.Fatalf("index: want 200 listing the profiles, have %d", a.code)
	}
	a = get(t, st, "/debug/pprof/heap")
	if a.code != 200 {
		t.Fatalf("supervisor heap: %d %s", a.code, a.body)
	}
	wantStrings(t, "supervisor heap", pprofStrings(t, a.body), "inuse_space", "alloc_objects")

	udp := st.s.Groups()[0]
	a = get(t, st, "/debug/pprof/worker/2/heap")
	if a.code != 200 {
		t.Fatalf("worker heap: %d %s", a.code, a.body)
	}
	wantStrings(t, "worker heap", pprofStrings(t, a.body), "inuse_space", "alloc_objects")
	if g := a.hdr.Get("X-Sipvisor-Group"); g != udp.Name() {
		t.Errorf("group header: want %q, have %q", udp.Name(), g)
	}

	a = get(t, st, "/debug/pprof/worker/1/allocs?group="+url.QueryEscape(udp.Name()))
	if a.code != 200 || a.hdr.Get("X-Sipvisor-Group") != udp.Name() {
		t.Fatalf("worker allocs by group name: %d %s", a.code, a.body)
	}
	wantStrings(t, "worker allocs", pprofStrings(t, a.body), "alloc_space")

	a = get(t, st, "/debug/pprof/worker/1/goroutine?group=tcp")
	if a.code != 200 {
		t.Fatalf("worker goroutines: %d %s", a.code, a.body)
	}
	// The worker's loop is in it: the profile is the worker's, not the
	// supervisor's.
	wantStrings(t, "worker goroutines", pprofStrings(t, a.body), "goroutine", "github.com/sipvisor/sipvisor/worker.(*workerLoop).run")

	start := time.Now()
	a = get(t, st, "/debug/pprof/worker/1/profile?seconds=1&group=tcp")
	if a.code != 200 {
		t.Fatalf("worker CPU profile: %d %s", a.code, a.body)
	}
	if d := time.Since(start); d < time.Second {
		t.Errorf("a 1-second CPU profile came after %v", d)
	}
	wantStrings(t, "worker CPU profile", pprofStrings(t, a.body), "samples", "cpu", "nanoseconds")

	testkit.WaitFor(t, 5*time.Second, "every profile pipe closed", func() bool { return openPipes() == pipes })
}

func TestPprofErrors(t *testing.T) {
	t.Parallel()
	st := startPprof(t, "")
	for _, tt := range []struct {
		path string
		code int
		msg  string
	}{
		{"/debug/pprof/worker/9/heap", 404, "no worker 9"},
		{"/debug/pprof/worker/2/heap?group=tcp", 404, "no worker 2 in group tcp"},
		{"/debug/pprof/worker/2/heap?group=nope", 404, `no group "nope"`},
		{"/debug/pprof/worker/2/heap?group=timer", 404, "no worker 2 in group timer"},
		{"/debug/pprof/worker/2", 404, "want /debug/pprof/worker/ID/PROFILE"},
		{"/debug/pprof/worker/two/heap", 400, "ID column of `sipvisor ctl ps`"},
		{"/debug/pprof/worker/1/heap", 400, "worker 1 is in groups"},
		{"/debug/pprof/worker/2/cpu", 400, `the CPU profile is "profile"`},
		{"/debug/pprof/worker/2/trace", 400, "want one of heap, allocs, goroutine, profile"},
		{"/debug/pprof/worker/2/profile?seconds=0", 400, "from 1 to 120"},
		{"/debug/pprof/worker/2/profile?seconds=121", 400, "from 1 to 120"},
		{"/debug/pprof/worker/2/profile?seconds=ten", 400, `seconds="ten"`},
		{"/debug/pprof/worker/2/heap?seconds=5", 400, "for the CPU profile"},
		{"/debug/pprof/profile?seconds=0", 400, "from 1 to 120"},
	} {
		a := get(t, st, tt.path)
		if a.code != tt.code {
			t.Errorf("%s: want %d, have %d %s", tt.path, tt.code, a.code, a.body)
			continue
		}
		if msg := a.errorText(t); !strings.Contains(msg, tt.msg) {
			t.Errorf("%s: want %q in the reason, have %q", tt.path, tt.msg, msg)
		}
	}
}

// A second CPU profile of the same process is refused with 409 at once,
// for a worker and for the supervisor; the first one completes.
//
// Not parallel: the supervisor's CPU profile is the whole process's.
func TestPprofOneCPUProfileAtATime(t *testing.T) {
	st := startPprof(t, "")
	w2 := st.s.Groups()[0].Workers()[1]
	for _, tt := range []struct {
		what, path string
		started    func() bool
		msg        string
	}{
		{"worker", "/debug/pprof/worker/2/profile?seconds=1", w2.CPUProfiling, "worker 2 is being CPU-profiled already"},
		{"supervisor", "/debug/pprof/profile?seconds=1", st.s.cpuProfiling.Load, "the supervisor is being CPU-profiled already"},
	} {
		first := make(chan answer, 1)
		go func() {
			a, err := fetch(st, tt.path)
			if err != nil {
				a.body = []byte(err.Error())
			}
			first <- a
		}()
		testkit.WaitFor(t, 5*time.Second, "the first CPU profile of the "+tt.what, tt.started)
		a := get(t, st, tt.path)
		// At once: while the first still runs, not once it is over.
		if !tt.started() {
			t.Errorf("%s: the refusal came only once the first CPU profile had ended", tt.what)
		}
		if a.code != http.StatusConflict {
			t.Fatalf("%s: second CPU profile: want 409, have %d %s", tt.what, a.code, a.body)
		}
		if msg := a.errorText(t); !strings.Contains(msg, tt.msg) {
			t.Errorf("%s: want %q in the reason, have %q", tt.what, tt.msg, msg)
		}
		a = <-first
		if a.code != 200 {
			t.Fatalf("%s: first CPU profile: %d %s", tt.what, a.code, a.body)
		}
		pprofStrings(t, a.body)
	}
}

// A worker that dies in the middle of a CPU profile ends the request with
// 502 and the reason, and leaves no pipe open in the supervisor.
//
// Not parallel: it counts the pipes the whole process holds, which other
// tests' workers open and close.
func TestPprofWorkerExitsMidProfile(t *testing.T) {
	st := startPprof(t, "")
	w2 := st.s.Groups()[0].Workers()[1]
	pipes := openPipes()
	res := make(chan answer, 1)
	go func() {
		a, err := fetch(st, "/debug/pprof/worker/2/profile?seconds=30")
		if err != nil {
			a.body = []byte(err.Error())
		}
		res <- a
	}()
	testkit.WaitFor(t, 5*time.Second, "the CPU profile to start", w2.CPUProfiling)
	w2.Signal(syscall.SIGKILL)
	var a answer
	select {
	case a = <-res:
	case <-time.After(15 * time.Second):
		t.Fatal("the request did not end when the worker died")
	}
	if a.code != http.StatusBadGateway {
		t.Fatalf("want 502, have %d %s", a.code, a.body)
	}
	if msg := a.errorText(t); !strings.Contains(msg, "exited") {
		t.Errorf("want the reason to say the worker exited, have %q", msg)
	}
	testkit.WaitFor(t, 5*time.Second, "the profile pipe closed", func() bool { return openPipes() == pipes })
}

// A worker stuck on a message answers no profile: the supervisor stops
// waiting at its bound and answers 504 with the reason.
func TestPprofWorkerStuck(t *testing.T) {
	t.Parallel()
	st := startSupervisor(t, cfgf(`
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 1
route { exit; }
`), costWorker(1500*time.Millisecond), nil)
	g := st.s.Groups()[0]
	testkit.WaitFor(t, patience, "a ready worker", func() bool { return len(g.Routable()) == 1 })
	st.s.profileWait.Store(int64(200 * time.Millisecond))
	target := st.s.SIPAddrs()[0]
	c, err := net.Dial("udp", net.JoinHostPort(target.Host, strconv.Itoa(target.Port)))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	door := &st.s.groupRuns()[0].door.Stats
	if _, err := c.Write(numbered("OPTIONS", 1)); err != nil {
		t.Fatal(err)
	}
	// Frames are handled in order: once the message is handed over, the
	// profile request waits behind it.
	testkit.WaitFor(t, 5*time.Second, "the message handed to the worker", func() bool { return door.Forwarded.Load() == 1 })
	a := get(t, st, "/debug/pprof/worker/1/heap?group=udp")
	if a.code != http.StatusGatewayTimeout {
		t.Fatalf("want 504, have %d %s", a.code, a.body)
	}
	if msg := a.errorText(t); !strings.Contains(msg, "sent no profile within") {
		t.Errorf("want the reason, have %q", msg)
	}
}

// With a control token, profiles need it as the API does.
func TestPprofNeedsToken(t *testing.T) {
	t.Parallel()
	st := startPprof(t, `http_token = "s3cret"`+"\n")
	for _, path := range []string{"/debug/pprof/heap", "/debug/pprof/worker/2/heap"} {
		if a := get(t, st, path); a.code != http.StatusUnauthorized {
			t.Errorf("%s without the token: want 401, have %d", path, a.code)
		}
		if a := get(t, st, path, "Authorization", "Bearer s3cret"); a.code != 200 {
			t.Errorf("%s with the token: want 200, have %d %s", path, a.code, a.body)
		}
	}
}

// openPipes counts the pipes this process holds open.
func openPipes() int {
	ents, _ := os.ReadDir("/proc/self/fd")
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/self/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
			n++
		}
	}
	return n
}

// `sipvisor ctl pprof` against a running supervisor saves a worker's
// profile that parses, and says where; a worker ID in several groups is
// refused with the reason.
func TestCtlPprof(t *testing.T) {
	t.Parallel()
	if !slices.Equal(ctl.ProfileNames, wire.ProfileNames) {
		t.Fatalf("ctl offers profiles %v, workers take %v", ctl.ProfileNames, wire.ProfileNames)
	}
	st := startPprof(t, "")
	dir := t.TempDir()
	ctlRun := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		code := runCtl(t.Context(), append([]string{"-addr", st.s.HTTPAddr()}, args...), &out, &errb)
		return code, out.String(), errb.String()
	}
	file := filepath.Join(dir, "heap.pb.gz")
	code, out, errs := ctlRun("pprof", "heap", "-worker", "2", "-o", file)
	if code != 0 {
		t.Fatalf("want exit 0, have %d %q", code, errs)
	}
	w2 := st.s.Groups()[0].Workers()[1]
	if want := fmt.Sprintf("wrote the heap profile of worker 2 (group %s, pid %d) to %s", st.s.Groups()[0].Name(), w2.Pid, file); !strings.HasPrefix(out, want) {
		t.Errorf("want %q, have %q", want, out)
	}
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	wantStrings(t, "ctl pprof heap", pprofStrings(t, b), "inuse_space")

	code, _, errs = ctlRun("pprof", "goroutine", "-worker", "1", "-o", filepath.Join(dir, "g.pb.gz"))
	if code != 1 || !strings.Contains(errs, "worker 1 is in groups") {
		t.Errorf("ambiguous worker: want exit 1 and the reason, have %d %q", code, errs)
	}
	code, _, errs = ctlRun("pprof", "goroutine", "-worker", "1", "-group", "tcp", "-o", filepath.Join(dir, "g.pb.gz"))
	if code != 0 {
		t.Errorf("-group tcp: want exit 0, have %d %q", code, errs)
	}
}
