// Package dispatcher tests sipvisor as a front end over a farm: the
// front runs examples/dispatcher.cfg over two SIPp backends (with -aa,
// which answers the probes), and a SIPp caller places the calls.
package dispatcher

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/ctl"
	ds "github.com/sipvisor/sipvisor/dispatcher"
	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// backend is a SIPp callee that copies Record-Route and logs every
// message it receives.
type backend struct {
	run *harness.SIPpRun
	log string
	uri string
}

func startBackend(t *testing.T, dir, name string) *backend {
	t.Helper()
	log := filepath.Join(dir, name+".log")
	r := harness.StartSIPp(t, 3*time.Minute, "-sf", harness.Path("examples/sipp-uas-rr.xml"), "-aa",
		"-i", "127.0.0.1", "-trace_msg", "-message_file", log)
	return &backend{run: r, log: log, uri: fmt.Sprintf("sip:127.0.0.1:%d", r.Port)}
}

// received is one request a backend received: its method, Call-ID and
// From user.
type received struct{ method, callID, fromUser string }

var (
	firstLine = regexp.MustCompile(`(?m)^([A-Z]+) sip:\S+ SIP/2\.0\r?$`)
	callID    = regexp.MustCompile(`(?mi)^(?:Call-ID|i):\s*(\S+)\r?$`)
	fromUser  = regexp.MustCompile(`(?mi)^(?:From|f):[^\n]*<sip:([^@>]+)@`)
)

// requests reads the requests of a backend's message log, probes left out.
func (b *backend) requests(t *testing.T) []received {
	t.Helper()
	raw, err := os.ReadFile(b.log)
	if err != nil && !os.IsNotExist(err) {
		t.Fatal(err)
	}
	var out []received
	for _, chunk := range strings.Split(string(raw), "message received")[1:] {
		m := firstLine.FindStringSubmatch(chunk)
		if m == nil || m[1] == "OPTIONS" {
			continue
		}
		r := received{method: m[1]}
		if c := callID.FindStringSubmatch(chunk); c != nil {
			r.callID = c[1]
		}
		if f := fromUser.FindStringSubmatch(chunk); f != nil {
			r.fromUser = f[1]
		}
		out = append(out, r)
	}
	return out
}

func invites(rs []received) int {
	n := 0
	for _, r := range rs {
		if r.method == "INVITE" {
			n++
		}
	}
	return n
}

// front starts examples/dispatcher.cfg over the backends, with the
// algorithm, the probe settings and a list written for them.
func front(t *testing.T, dir string, alg int, probe string, bs []*backend, weights ...int) *harness.Server {
	t.Helper()
	var list strings.Builder
	for i, b := range bs {
		w := 1
		if i < len(weights) {
			w = weights[i]
		}
		fmt.Fprintf(&list, "1 %s 0 0 weight=%d\n", b.uri, w)
	}
	path := filepath.Join(dir, "backends.list")
	if err := os.WriteFile(path, []byte(list.String()), 0o644); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(harness.Path("examples/dispatcher.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(raw)
	for old, repl := range map[string]string{
		"socket = udp:127.0.0.1:5060":      "socket = udp:127.0.0.1:0\nhttp_listen = 127.0.0.1:0",
		`ds_list_file = "dispatcher.list"`: fmt.Sprintf("ds_list_file = %q", path),
		"ds_select_dst(1, 0)":              fmt.Sprintf("ds_select_dst(1, %d)", alg),
	} {
		if !strings.Contains(cfg, old) {
			t.Fatalf("examples/dispatcher.cfg lacks %q", old)
		}
		cfg = strings.Replace(cfg, old, repl, 1)
	}
	if probe != "" {
		for _, line := range strings.Split(probe, "\n") {
			name, _, _ := strings.Cut(line, " =")
			cfg = regexp.MustCompile(`(?m)^`+name+` = .*$`).ReplaceAllString(cfg, line)
		}
	}
	return harness.Start(t, cfg)
}

// calls places n calls through the front from SIPp, each from one of 12
// users in turn, and returns SIPp's result.
func calls(t *testing.T, s *harness.Server, n, rate int) harness.SIPpResult {
	t.Helper()
	return harness.RunSIPp(t, 2*time.Minute, "-sf", harness.Testdata("uac_ds_users.xml"),
		"-inf", harness.Testdata("ds_users.csv"), "-s", "service", s.SIPAddr("udp"), "-i", "127.0.0.1",
		"-m", strconv.Itoa(n), "-r", strconv.Itoa(rate), "-timeout", "60s", "-timeout_error")
}

func destinations(t *testing.T, s *harness.Server) map[string]ctl.Destination {
	t.Helper()
	out, err := s.Ctl("ds", "list", "--json")
	if err != nil {
		t.Fatalf("ctl ds list: %v: %s", err, out)
	}
	var list []ctl.Destination
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("ctl ds list: %v: %s", err, out)
	}
	m := map[string]ctl.Destination{}
	for _, d := range list {
		m[d.URI] = d
	}
	return m
}

// oneBackendPerDialog checks that the INVITE, ACK and BYE of every call
// reached one backend, and returns which one had each Call-ID.
func oneBackendPerDialog(t *testing.T, bs []*backend) map[string]int {
	t.Helper()
	at := map[string]int{}
	for i, b := range bs {
		for _, r := range b.requests(t) {
			if j, ok := at[r.callID]; ok && j != i {
				t.Errorf("call %s: %s at backend %d, an earlier request at backend %d", r.callID, r.method, i, j)
			}
			at[r.callID] = i
		}
	}
	return at
}

func TestSpreadByAlgorithm(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("260 SIPp calls through four fronts; skipped with -short")
	}
	harness.NeedSIPp(t)
	const n = 60
	for _, tc := range []struct {
		name    string
		alg     int
		weights []int
	}{
		{"round-robin", 4, nil},
		{"weight", 9, []int{3, 1}},
		{"hash over Call-ID", 0, nil},
		{"hash over From URI", 1, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			bs := []*backend{startBackend(t, dir, "b1"), startBackend(t, dir, "b2")}
			s := front(t, dir, tc.alg, "", bs, tc.weights...)
			r := calls(t, s, n, 30)
			if r.Successful != n || r.Failed != 0 {
				t.Fatalf("want %d calls through, have %d successful and %d failed\n%s", n, r.Successful, r.Failed, harness.Tail(r.Out, 30))
			}
			got := []int{invites(bs[0].requests(t)), invites(bs[1].requests(t))}
			t.Logf("%s: INVITEs per backend %v", tc.name, got)
			if got[0]+got[1] != n {
				t.Fatalf("the backends received %v INVITEs, want %d in all", got, n)
			}
			at := oneBackendPerDialog(t, bs)
			switch tc.alg {
			case 4:
				// Each worker (2) takes the backends in turn.
				if d := got[0] - got[1]; d < -2 || d > 2 {
					t.Errorf("round-robin: %v calls per backend", got)
				}
			case 9:
				if want := n * 3 / 4; got[0] < want-3 || got[0] > want+3 {
					t.Errorf("weight 3:1: %v calls per backend, want about %d and %d", got, want, n-want)
				}
			case 0, 1:
				// Every call is where the hash puts it, whichever worker
				// handled it: the placement is a function of the key alone.
				users := map[string]int{}
				for i, b := range bs {
					for _, rq := range b.requests(t) {
						if rq.method != "INVITE" {
							continue
						}
						key := rq.callID
						if tc.alg == 1 {
							key = rq.fromUser + "@127.0.0.1"
							if j, ok := users[rq.fromUser]; ok && j != i {
								t.Errorf("user %s called through backends %d and %d", rq.fromUser, j, i)
							}
							users[rq.fromUser] = i
						}
						if want := int(ds.Hash(key) % 2); want != i {
							t.Errorf("call %s (key %s) at backend %d, its hash says %d", rq.callID, key, i, want)
						}
					}
				}
				if got[0] == 0 || got[1] == 0 {
					t.Errorf("a hash sent every call to one backend: %v", got)
				}
			}
			if len(at) != n {
				t.Errorf("%d dialogs seen at the backends, want %d", len(at), n)
			}
			// The workers report what they sent each backend, which ctl ds
			// list shows: the same counts as the backends'.
			harness.WaitFor(t, "ctl ds list counting every call", 10*time.Second, func() bool {
				d := destinations(t, s)
				return d[bs[0].uri].Sent == uint64(got[0]) && d[bs[1].uri].Sent == uint64(got[1])
			})
			if tc.alg != 4 {
				return
			}
			// Drained by hand, a backend takes no new call; back to
			// active, it takes its share again.
			if out, err := s.Ctl("ds", "set", "1", bs[1].uri, "drain"); err != nil {
				t.Fatalf("ctl ds set drain: %v: %s", err, out)
			}
			if st := destinations(t, s)[bs[1].uri].State; st != "drain" {
				t.Fatalf("after ctl ds set drain, ds list says %s", st)
			}
			// ctl ds set returns once the state is on its way to every
			// worker, ahead of the calls that follow.
			before := got[1]
			if r := calls(t, s, 20, 30); r.Successful != 20 {
				t.Fatalf("while draining: %d of 20 calls through\n%s", r.Successful, harness.Tail(r.Out, 30))
			}
			if now := invites(bs[1].requests(t)); now != before {
				t.Errorf("a draining backend took %d new calls", now-before)
			}
			out, _ := s.Ctl("ds", "list")
			t.Logf("ctl ds list:\n%s", out)
		})
	}
}

// A backend killed under load: its probes fail and it goes inactive
// within ds_ping_interval × (ds_probing_threshold + 1) and some slack;
// the calls sent to it meanwhile fail over to the other backend in the
// failure route (t_set_fr's 2 s, then ds_next_dst); once it is detected,
// no call fails.
func TestBackendKilled(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("300 SIPp calls and a backend killed; skipped with -short")
	}
	harness.NeedSIPp(t)
	dir := t.TempDir()
	bs := []*backend{startBackend(t, dir, "b1"), startBackend(t, dir, "b2")}
	const interval, threshold = 500 * time.Millisecond, 2
	s := front(t, dir, 4, fmt.Sprintf("ds_ping_interval = %dms\nds_probing_threshold = %d", interval.Milliseconds(), threshold), bs)
	harness.WaitFor(t, "both backends answering their probes", 10*time.Second, func() bool {
		d := destinations(t, s)
		return d[bs[0].uri].State == "active" && d[bs[1].uri].State == "active" && d[bs[0].uri].RTTSeconds > 0 && d[bs[1].uri].RTTSeconds > 0
	})

	const n1, rate = 200, 20
	errs := filepath.Join(dir, "caller_errors.log")
	caller := harness.StartSIPp(t, 2*time.Minute, "-sf", harness.Testdata("uac_ds_users.xml"),
		"-inf", harness.Testdata("ds_users.csv"), "-s", "service", s.SIPAddr("udp"), "-i", "127.0.0.1",
		"-m", strconv.Itoa(n1), "-r", strconv.Itoa(rate), "-timeout", "90s", "-timeout_error",
		"-trace_err", "-error_file", errs)
	harness.WaitFor(t, "calls reaching the second backend", 20*time.Second, func() bool { return invites(bs[1].requests(t)) >= 20 })
	bs[1].run.Kill()
	killed := time.Now()
	var detected time.Duration
	harness.WaitFor(t, "the killed backend inactive", 15*time.Second, func() bool {
		if destinations(t, s)[bs[1].uri].State == "inactive" {
			detected = time.Since(killed)
			return true
		}
		return false
	})
	limit := interval*(threshold+1) + time.Second
	t.Logf("killed backend inactive after %v (limit %v)", detected.Round(time.Millisecond), limit)
	if detected > limit {
		t.Errorf("detected after %v, want within %v", detected, limit)
	}
	r1 := caller.Wait()
	d := destinations(t, s)[bs[0].uri]
	t.Logf("during the kill: %d successful, %d failed of %d; failovers to the survivor: %d", r1.Successful, r1.Failed, n1, d.Failovers)
	if d.Failovers == 0 {
		t.Errorf("no call failed over to the surviving backend")
	}
	// Only a call already answered by the killed backend can fail: its BYE
	// has nowhere to go. At 20 calls/s with no pause, at most a few.
	if r1.Failed > 0 {
		b, _ := os.ReadFile(errs)
		t.Logf("what SIPp saw of the failed calls:\n%s", harness.Tail(string(b), 20))
	}
	if r1.Failed > 2 {
		t.Errorf("%d calls failed during the kill, want at most the 2 a BYE in flight may lose\n%s", r1.Failed, harness.Tail(r1.Out, 30))
	}

	r2 := calls(t, s, 100, 25)
	if r2.Successful != 100 || r2.Failed != 0 {
		t.Fatalf("after detection: want 100 calls through, have %d successful and %d failed\n%s", r2.Successful, r2.Failed, harness.Tail(r2.Out, 30))
	}
	out, _ := s.Ctl("ds", "list")
	t.Logf("ctl ds list:\n%s", out)
	if v := s.Metric("sipvisor_dispatcher_destination_state", `set="1"`, `uri="`+bs[1].uri+`"`, `state="inactive"`); v != 1 {
		t.Errorf("sipvisor_dispatcher_destination_state{state=inactive} of the killed backend = %v, want 1", v)
	}
}

// The list is read again on a reload: a destination added is probed and
// chosen, one that stays keeps the state set by hand, and a list with an
// error is refused with its position, the old one staying in force.
func TestListReload(t *testing.T) {
	t.Parallel()
	harness.NeedSIPp(t)
	dir := t.TempDir()
	bs := []*backend{startBackend(t, dir, "b1"), startBackend(t, dir, "b2")}
	s := front(t, dir, 4, "ds_ping_interval = 200ms", bs[:1])
	harness.WaitFor(t, "the first backend answering its probes", 10*time.Second, func() bool {
		return destinations(t, s)[bs[0].uri].RTTSeconds > 0
	})
	if out, err := s.Ctl("ds", "set", "1", bs[0].uri, "drain"); err != nil {
		t.Fatalf("ctl ds set: %v: %s", err, out)
	}
	list := filepath.Join(dir, "backends.list")
	if err := os.WriteFile(list, []byte("1 "+bs[0].uri+"\n1 sip:127.0.0.1:notaport\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := s.Ctl("reload")
	if err == nil || !strings.Contains(out, list+":2:3:") {
		t.Fatalf("a list with an error: want the reload refused at %s:2:3, have %v: %s", list, err, out)
	}
	if len(destinations(t, s)) != 1 {
		t.Fatalf("a refused reload changed the destinations")
	}
	if err := os.WriteFile(list, []byte("1 "+bs[0].uri+"\n1 "+bs[1].uri+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	group := "udp:" + s.SIPAddr("udp")
	before := s.GroupPids(group)
	if out, err := s.Ctl("reload"); err != nil {
		t.Fatalf("ctl reload: %v: %s", err, out)
	}
	// The reload answers once the new config is in force in the supervisor;
	// the workers that run the new list take over when they are ready, and
	// until then the old ones, whose only destination is drained, serve.
	s.WaitRenewed(group, before, 30*time.Second)
	harness.WaitFor(t, "the added backend answering its probes", 10*time.Second, func() bool {
		d := destinations(t, s)
		return d[bs[1].uri].State == "active" && d[bs[1].uri].RTTSeconds > 0
	})
	if st := destinations(t, s)[bs[0].uri].State; st != "drain" {
		t.Fatalf("a destination that stays lost its state on reload: %s", st)
	}
	// Workers renewed or reloaded by the reload run the new list: every
	// call goes to the added backend, none to the drained one.
	if r := calls(t, s, 10, 20); r.Successful != 10 {
		t.Fatalf("%d of 10 calls through\n%s", r.Successful, harness.Tail(r.Out, 30))
	}
	if got := []int{invites(bs[0].requests(t)), invites(bs[1].requests(t))}; got[0] != 0 || got[1] != 10 {
		t.Errorf("INVITEs per backend %v, want [0 10]", got)
	}
}

// A server started without destinations has nothing to probe and its
// dispatcher sleeps until a reload: the reload that brings a list has its
// destination probed.
func TestListReloadFromNone(t *testing.T) {
	t.Parallel()
	harness.NeedSIPp(t)
	dir := t.TempDir()
	b := startBackend(t, dir, "b1")
	cfg := harness.ProxyCfg(harness.SIPpUAS(t).Port, "")
	s := harness.StartIn(t, dir, cfg)
	if n := len(destinations(t, s)); n != 0 {
		t.Fatalf("no list: want no destination, have %d", n)
	}
	list := filepath.Join(dir, "backends.list")
	if err := os.WriteFile(list, []byte("1 "+b.uri+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	cfg = strings.Replace(cfg, "route {", fmt.Sprintf("ds_list_file = %q\nds_ping_interval = 200ms\nroute {", list), 1)
	if err := os.WriteFile(s.ConfigPath(), []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := s.Ctl("reload"); err != nil {
		t.Fatalf("ctl reload: %v: %s", err, out)
	}
	harness.WaitFor(t, "the listed backend answering its probes", 10*time.Second, func() bool {
		d := destinations(t, s)[b.uri]
		return d.State == "active" && d.RTTSeconds > 0
	})
}
