package load

import (
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/ctl"
	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// BenchmarkRefusedVsServedCPU measures what a refused new session costs the
// server next to a served call: the CPU seconds of sipvisor's whole process
// tree (supervisor and workers) over a fixed number of calls proxied from a
// SIPp uac to a SIPp uas, then, suspended, over as many INVITEs refused at
// the front door and acknowledged by the client, as real clients do. The
// target is a ratio of at most 1/20. A third phase sends the INVITEs without
// the ACK, to show what the front door alone spends. Each phase is seconds
// of paced traffic, so run it once:
//
//	go test ./e2e/load -run '^$' -bench RefusedVsServedCPU -benchtime 1x
//
// at 200 calls and refusals a second; SIPVISOR_BENCH_RATE=1000 in the
// environment sets another rate (10 s of traffic per phase whatever it is).
//
// The idle cost of the tree (cycle loop, echoes, idle workers) accrues in
// every phase; it is measured apart, and the net figures subtract it: they
// are what a session costs, and the target applies to them. At low rates
// the idle cost is a large part of the gross figure of a refusal (at
// 200/s, 8 ms of idle CPU a second is 40 µs a session).
func BenchmarkRefusedVsServedCPU(b *testing.B) {
	if _, err := exec.LookPath("sipp"); err != nil {
		b.Skip("sipp not installed (apt-get install -y sip-tester)")
	}
	rate := 200
	if v := os.Getenv("SIPVISOR_BENCH_RATE"); v != "" {
		r, err := strconv.Atoi(v)
		if err != nil || r < 1 || r > 5000 {
			b.Fatalf("SIPVISOR_BENCH_RATE=%q: want calls a second from 1 to 5000", v)
		}
		rate = r
	}
	calls := 10 * rate
	var idle, served, refused, invites phase
	for i := 0; i < b.N; i++ {
		s := harness.Start(b, harness.ProxyCfg(harness.SIPpUAS(b).Port, "udp_workers = 1\ntcp_workers = 1\nthrottle_enable = no"))
		uacArgs := []string{s.SIPAddr("udp"), "-i", "127.0.0.1",
			"-r", strconv.Itoa(rate), "-timeout", "100", "-timeout_error"}
		sipp := func(what string, n int, args ...string) {
			b.Helper()
			r := harness.RunSIPp(b, 2*time.Minute, append(append(args, "-m", strconv.Itoa(n)), uacArgs...)...)
			if r.Successful != n || r.Failed != 0 {
				b.Fatalf("%s: want %d successful and 0 failed, have %d/%d\n%s", what, n, r.Successful, r.Failed, harness.Tail(r.Out, 30))
			}
		}

		// The first calls grow maps and heaps.
		sipp("warm-up", 200, "-sn", "uac", "-d", "200")
		// As long as a phase: the CPU counters tick every 10 ms.
		idle.add(measure(b, s, func() { time.Sleep(10 * time.Second) })) // the idle phase: the tree's CPU over 10 s of no traffic
		served.add(measure(b, s, func() { sipp("served", calls, "-sn", "uac", "-d", "200") }))

		if out, err := s.Ctl("suspend"); err != nil {
			b.Fatalf("ctl suspend: %v: %s", err, out)
		}
		before := refusedSuspended(b, s)
		refused.add(measure(b, s, func() { sipp("refused", calls, "-sf", harness.Testdata("overload_refused_uac.xml")) }))
		invites.add(measure(b, s, func() { sipp("refused without ACK", calls, "-sf", harness.Testdata("overload_refused_noack_uac.xml")) }))
		if n := refusedSuspended(b, s) - before; n != float64(2*calls) {
			b.Fatalf("want %d refusals counted for the suspension, have %v", 2*calls, n)
		}
		s.Stop()
	}

	n := float64(b.N * calls)
	idleRate := idle.cpu.total() / idle.wall
	perServed, perRefused := served.cpu.total()/n, refused.cpu.total()/n
	netServed, netRefused, netInvite := served.net(idleRate)/n, refused.net(idleRate)/n, invites.net(idleRate)/n
	metrics := []struct {
		v    float64
		unit string
	}{
		{perServed * 1e6, "cpu-µs/served-call"},
		{perRefused * 1e6, "cpu-µs/refused-call"},
		{perRefused / perServed, "refused/served"},
		{refused.cpu.supervisor / n * 1e6, "supervisor-cpu-µs/refused-call"},
		{refused.cpu.workers / n * 1e6, "worker-cpu-µs/refused-call"},
		{invites.cpu.total() / n * 1e6, "cpu-µs/refused-invite-no-ack"},
		{idleRate * 1e3, "idle-cpu-ms/s"},
		{netServed * 1e6, "net-cpu-µs/served-call"},
		{netRefused * 1e6, "net-cpu-µs/refused-call"},
		{netRefused / netServed, "net-refused/served"},
		{netInvite / netServed, "net-refused-no-ack/served"},
	}
	b.ReportMetric(0, "ns/op")
	var line strings.Builder
	for _, m := range metrics {
		b.ReportMetric(m.v, m.unit)
		fmt.Fprintf(&line, " %.4g %s", m.v, m.unit)
	}
	// A failed benchmark prints no metrics; the log keeps them.
	b.Logf("%d calls each at %d/s:%s", b.N*calls, rate, line.String())
	if netRefused > netServed/20 {
		b.Errorf("net of the idle tree, a refused session costs %.1f µs of CPU, a served call %.1f µs: want a ratio of at most 0.05, have %.3f",
			netRefused*1e6, netServed*1e6, netRefused/netServed)
	}
}

// phase is what one stretch of traffic cost the process tree.
type phase struct {
	cpu  treeCPU
	wall float64 // seconds
}

func (p *phase) add(q phase) {
	p.cpu.supervisor += q.cpu.supervisor
	p.cpu.workers += q.cpu.workers
	p.wall += q.wall
}

// net is the phase's CPU less what the idle tree would have used meanwhile.
func (p phase) net(idlePerSecond float64) float64 { return p.cpu.total() - idlePerSecond*p.wall }

func measure(tb testing.TB, s *harness.Server, run func()) phase {
	c0, t0 := cpu(tb, s), time.Now()
	run()
	c1 := cpu(tb, s)
	return phase{cpu: treeCPU{supervisor: c1.supervisor - c0.supervisor, workers: c1.workers - c0.workers}, wall: time.Since(t0).Seconds()}
}

func refusedSuspended(tb testing.TB, s *harness.Server) float64 {
	tb.Helper()
	out, err := s.Ctl("stats", "--json")
	if err != nil {
		tb.Fatalf("ctl stats: %v: %s", err, out)
	}
	var st ctl.Stats
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		tb.Fatalf("ctl stats --json: %v: %s", err, out)
	}
	if !st.Suspended {
		tb.Fatalf("want suspended, have %+v", st)
	}
	return st.Counters["refused_suspended"]
}

// treeCPU is CPU seconds used by sipvisor's process tree.
type treeCPU struct {
	supervisor float64 // its own
	workers    float64 // the live workers' and the reaped children's
}

func (c treeCPU) total() float64 { return c.supervisor + c.workers }

// cpu is the CPU seconds sipvisor's process tree has used: the supervisor's
// own and its reaped children's, plus each live worker's.
func cpu(tb testing.TB, s *harness.Server) treeCPU {
	tb.Helper()
	resp, err := http.Get("http://" + s.HTTP + "/mi/ps")
	if err != nil {
		tb.Fatal(err)
	}
	var gs []ctl.Group
	err = json.NewDecoder(resp.Body).Decode(&gs)
	resp.Body.Close()
	if err != nil {
		tb.Fatalf("/mi/ps: %v", err)
	}
	var ticks int64
	for _, g := range gs {
		for _, w := range g.Workers {
			own, _, err := procTicks(w.Pid)
			if err != nil {
				tb.Fatalf("worker %d: %v", w.Pid, err)
			}
			ticks += own
		}
	}
	own, children, err := procTicks(s.Cmd.Process.Pid)
	if err != nil {
		tb.Fatal(err)
	}
	hz := clockTicks(tb)
	return treeCPU{supervisor: float64(own) / hz, workers: float64(ticks+children) / hz}
}

// procTicks reads utime+stime and cutime+cstime of a process, in clock ticks.
func procTicks(pid int) (own, children int64, err error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, 0, err
	}
	return parseProcTicks(string(b))
}

// parseProcTicks takes the fields after the command name, which may itself
// hold spaces and parentheses: state is field 3, utime 14 … cstime 17.
func parseProcTicks(stat string) (own, children int64, err error) {
	i := strings.LastIndexByte(stat, ')')
	if i < 0 {
		return 0, 0, fmt.Errorf("proc stat %q: no command name", stat)
	}
	f := strings.Fields(stat[i+1:])
	if len(f) < 15 {
		return 0, 0, fmt.Errorf("proc stat %q: %d fields after the command name, want 15 or more", stat, len(f))
	}
	var v [4]int64
	for k := range v {
		if v[k], err = strconv.ParseInt(f[11+k], 10, 64); err != nil {
			return 0, 0, fmt.Errorf("proc stat field %d: %w", 14+k, err)
		}
	}
	return v[0] + v[1], v[2] + v[3], nil
}

func TestParseProcTicks(t *testing.T) {
	for _, c := range []struct {
		stat            string
		own, children   int64
		wantErrContains string
	}{
		{"4101 (sipvisor) S 1 4101 4101 0 -1 4194560 2411 0 0 0 150 37 12 5 20 0 9 0 1234 1 2 3", 187, 17, ""},
		{"77 (a) b) (c) R 1 77 77 0 -1 0 0 0 0 0 1 2 3 4 20 0 1 0 5 6 7", 3, 7, ""},
		{"77 (x) R 1 2", 0, 0, "fields after the command name"},
		{"no name here", 0, 0, "no command name"},
		{"1 (x) S 1 1 1 0 -1 0 0 0 0 0 ten 2 3 4 20", 0, 0, "field 14"},
	} {
		own, children, err := parseProcTicks(c.stat)
		if c.wantErrContains != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErrContains) {
				t.Errorf("%q: want an error with %q, have %v", c.stat, c.wantErrContains, err)
			}
			continue
		}
		if err != nil || own != c.own || children != c.children {
			t.Errorf("%q: want %d, %d, have %d, %d (%v)", c.stat, c.own, c.children, own, children, err)
		}
	}
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times.
func clockTicks(tb testing.TB) float64 {
	out, err := exec.Command("getconf", "CLK_TCK").Output()
	if err != nil {
		return 100 // Linux's USER_HZ on every common architecture
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(string(out)), 64)
	if err != nil || v <= 0 {
		tb.Fatalf("getconf CLK_TCK: %q", out)
	}
	return v
}
