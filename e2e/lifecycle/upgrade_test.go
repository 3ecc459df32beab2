package lifecycle

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// buildVersions builds sipvisor once per version, each reporting its own
// (-ldflags -X), two at a time, and returns the binaries by version.
func buildVersions(t *testing.T, dir string, versions ...string) map[string]string {
	t.Helper()
	out := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 2)
	for _, v := range versions {
		bin := filepath.Join(dir, "sipvisor-"+v)
		out[v] = bin
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			cmd := exec.Command("go", "build", "-ldflags", "-X github.com/sipvisor/sipvisor/supervisor.Version="+v, "-o", bin, "./cmd/sipvisor")
			cmd.Dir = harness.Root
			if b, err := cmd.CombinedOutput(); err != nil {
				mu.Lock()
				defer mu.Unlock()
				t.Errorf("build %s: %v\n%s", v, err, b)
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	return out
}

// install puts bin at path as an upgrade finds it: renamed over the binary
// that runs.
func install(t *testing.T, bin, path string) {
	t.Helper()
	tmp := path + ".new"
	// cp writes the copy, not this process: a file this process held open
	// for writing would be inherited by a process another test forks at
	// that moment, and exec of the copy would fail "text file busy" until
	// that child execs (golang.org/issue/22315).
	if out, err := exec.Command("cp", bin, tmp).CombinedOutput(); err != nil {
		t.Fatalf("cp %s: %v: %s", bin, err, out)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

// generations follows the supervisor that serves a node across upgrades:
// the first is the harness's process, the later ones are no child of the
// test, and the last is stopped with the test.
type generations struct {
	t   *testing.T
	s   *harness.Server
	mu  sync.Mutex
	pid int
}

func followGenerations(t *testing.T, s *harness.Server) *generations {
	g := &generations{t: t, s: s, pid: s.Cmd.Process.Pid}
	// Registered after the harness's stop, so it runs first: the harness
	// waits for the output pipe, which the last generation holds too.
	t.Cleanup(func() {
		g.mu.Lock()
		pid := g.pid
		g.mu.Unlock()
		if pid == s.Cmd.Process.Pid {
			return
		}
		syscall.Kill(pid, syscall.SIGTERM)
		waitPidGone(t, pid, 60*time.Second)
	})
	return g
}

var upgradedLine = regexp.MustCompile(`upgraded: generation (\d+) \(pid (\d+), version (\S+)\)`)

// upgrade runs ctl upgrade, checks the generation and version the new
// supervisor reports, and returns the previous one's pid.
func (g *generations) upgrade(gen int, version string) (prev int) {
	g.t.Helper()
	out, err := g.s.Ctl("upgrade")
	if err != nil {
		g.t.Fatalf("ctl upgrade to %s: %v: %s\n%s", version, err, out, harness.Tail(g.s.Log.String(), 30))
	}
	m := upgradedLine.FindStringSubmatch(out)
	if m == nil {
		g.t.Fatalf("ctl upgrade: no generation line in %q", out)
	}
	if m[1] != strconv.Itoa(gen) || m[3] != version {
		g.t.Fatalf("want generation %d at version %s, have %q", gen, version, out)
	}
	pid, _ := strconv.Atoi(m[2])
	g.mu.Lock()
	prev, g.pid = g.pid, pid
	g.mu.Unlock()
	return prev
}

// waitPidGone waits until a process has exited (a zombie has).
func waitPidGone(t testing.TB, pid int, within time.Duration) {
	t.Helper()
	harness.WaitFor(t, fmt.Sprintf("process %d gone", pid), within, func() bool {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true
		}
		_, rest, _ := strings.Cut(string(b), ") ")
		return strings.HasPrefix(rest, "Z")
	})
}

// Three upgrades in a row under SIPp calls over UDP (with retransmissions),
// 200 a second held 20 s, each to a rebuilt binary that reports another
// version: no call fails,
// calls up before an upgrade end with their BYE answered after it, ctl ps
// shows both generations while they overlap, and each old generation exits
// once its calls have ended.
func TestUpgradeUnderCallsLosesNoCall(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("SIPp calls across three upgrades")
	}
	harness.NeedSIPp(t)
	dir := t.TempDir()
	bins := buildVersions(t, dir, "upgrade-1", "upgrade-2", "upgrade-3", "upgrade-4")
	path := filepath.Join(dir, "sipvisor")
	install(t, bins["upgrade-1"], path)
	s := harness.StartBin(t, path, harness.ProxyCfg(harness.SIPpUAS(t).Port, "udp_workers = 2\ntcp_workers = 1\n"+handledLate))
	g := followGenerations(t, s)
	const calls = 10000
	sipp := harness.StartSIPp(t, 400*time.Second, "-sn", "uac", s.SIPAddr("udp"), "-i", "127.0.0.1",
		"-r", "200", "-m", strconv.Itoa(calls), "-d", "20000", "-timeout", "380", "-timeout_error", "-recv_timeout", "40000")
	for gen := 2; gen <= 4; gen++ {
		// Calls are up in the old generation: each ends with its BYE after
		// the upgrade, through the new one's socket.
		s.AwaitMetricAtLeast(2000, 60*time.Second, "sipvisor_frontdoor_sessions", `kind="call"`)
		version := fmt.Sprintf("upgrade-%d", gen)
		install(t, bins[version], path)
		prev := g.upgrade(gen, version)
		harness.WaitFor(t, "ctl ps showing both generations", 10*time.Second, func() bool {
			out, _ := s.Ctl("ps")
			return strings.Contains(out, fmt.Sprintf("gen%d/", gen)) && strings.Contains(out, fmt.Sprintf("gen%d/", gen-1))
		})
		if v := s.Metric("sipvisor_generation"); v != float64(gen) {
			t.Fatalf("want sipvisor_generation %d, have %v", gen, v)
		}
		if v := s.Metric("sipvisor_build_info", `version="`+version+`"`); v != 1 {
			t.Fatalf("want sipvisor_build_info for %s, have %v", version, v)
		}
		waitPidGone(t, prev, 90*time.Second)
	}
	r := sipp.Wait()
	if r.Successful != calls || r.Failed != 0 {
		t.Fatalf("want %d successful calls and 0 failed across three upgrades, have %d/%d\n%s", calls, r.Successful, r.Failed, harness.Tail(r.Out, 30))
	}
	log := s.Log.String()
	for gen := 1; gen <= 3; gen++ {
		if !regexp.MustCompile(fmt.Sprintf(`msg="upgrade: handed over; draining the calls in progress" .*new_generation=%d generation=%d\n`, gen+1, gen)).MatchString(log) {
			t.Errorf("want generation %d to have handed over\n%s", gen, harness.Tail(log, 40))
		}
	}
	if strings.Contains(log, "did not drain in time") {
		t.Errorf("want every old worker drained, have one killed\n%s", harness.Tail(log, 40))
	}
}

// A new binary that exits at start, one that never gets ready, and a config
// with an error: each upgrade rolls back, the old generation serves
// throughout (no call of the load fails) and ctl upgrade says why, with the
// new process's last lines. An upgrade afterwards still works.
func TestUpgradeRollsBack(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("SIPp calls across failed upgrades")
	}
	harness.NeedSIPp(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "sipvisor")
	install(t, harness.SipvisorBin, path)
	cfg := harness.ProxyCfg(harness.SIPpUAS(t).Port, "udp_workers = 2\ntcp_workers = 1\nupgrade_timeout = 2s\n")
	s := harness.StartBin(t, path, cfg)
	g := followGenerations(t, s)
	const calls = 400
	sipp := harness.StartSIPp(t, 180*time.Second, "-sn", "uac", s.SIPAddr("udp"), "-i", "127.0.0.1",
		"-r", "20", "-m", strconv.Itoa(calls), "-d", "2000", "-timeout", "170", "-timeout_error", "-recv_timeout", "40000")
	s.AwaitMetricAtLeast(20, 60*time.Second, "sipvisor_frontdoor_sessions", `kind="call"`)
	fails := func(what string, want ...string) {
		t.Helper()
		out, err := s.Ctl("upgrade")
		if err == nil {
			t.Fatalf("%s: want ctl upgrade to fail, have %q", what, out)
		}
		for _, w := range want {
			if !strings.Contains(out, w) {
				t.Errorf("%s: want %q in ctl upgrade's answer, have %q", what, w, out)
			}
		}
		if v := s.Metric("sipvisor_generation"); v != 1 {
			t.Fatalf("%s: want generation 1 serving, have %v", what, v)
		}
		if _, exited := s.Exited(); exited {
			t.Fatalf("%s: the old supervisor exited", what)
		}
	}

	broken := filepath.Join(dir, "broken")
	os.WriteFile(broken, []byte("#!/bin/sh\necho 'broken build: cannot start' >&2\nexit 3\n"), 0o755)
	install(t, broken, path)
	fails("a binary that exits at start", "exited before it was ready: exit status 3", "broken build: cannot start", "generation 1")

	hung := filepath.Join(dir, "hung")
	os.WriteFile(hung, []byte("#!/bin/sh\necho 'stuck at start' >&2\nexec sleep 60\n"), 0o755)
	install(t, hung, path)
	fails("a binary never ready", "was not ready within upgrade_timeout (2s)", "stuck at start")

	install(t, harness.SipvisorBin, path)
	s.Rewrite(cfg + "\nno_such_setting = 1\n")
	fails("a config error", "sipvisor.cfg:", `unknown setting "no_such_setting"`)
	s.Rewrite(cfg)

	r := sipp.Wait()
	if r.Successful != calls || r.Failed != 0 {
		t.Fatalf("want %d successful calls and 0 failed across the failed upgrades, have %d/%d\n%s", calls, r.Successful, r.Failed, harness.Tail(r.Out, 30))
	}
	if v := s.Metric("sipvisor_upgrades_total", `result="rolled_back"`); v != 3 {
		t.Errorf("want 3 upgrades rolled back, have %v", v)
	}
	prev := g.upgrade(2, "dev")
	waitPidGone(t, prev, 60*time.Second)
	if v := s.Metric("sipvisor_generation"); v != 2 {
		t.Errorf("want generation 2 after the last upgrade, have %v", v)
	}
}

// probeCfg answers every INVITE itself (486), so that each is a new
// session that a worker answers at once.
const probeCfg = `
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 2
route {
	if (is_method("INVITE")) { sl_send_reply(486, "Busy Here"); exit; }
	sl_send_reply(200, "OK");
	exit;
}
`

// prober sends a new INVITE every few milliseconds, each once, and notes
// what comes back.
type prober struct {
	c     *net.UDPConn
	to    *net.UDPAddr
	mu    sync.Mutex
	sent  []time.Time
	final map[int]probeAnswer
	stop  chan struct{}
	done  sync.WaitGroup
}

type probeAnswer struct {
	code int
	at   time.Time
}

func startProber(t *testing.T, to string) *prober {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	ua, _ := net.ResolveUDPAddr("udp", to)
	p := &prober{c: c, to: ua, final: map[int]probeAnswer{}, stop: make(chan struct{})}
	p.done.Add(2)
	go p.read()
	go p.send()
	return p
}

func (p *prober) send() {
	defer p.done.Done()
	port := p.c.LocalAddr().(*net.UDPAddr).Port
	for i := 0; ; i++ {
		select {
		case <-p.stop:
			return
		case <-time.After(5 * time.Millisecond):
		}
		msg := fmt.Sprintf("INVITE sip:probe@%s SIP/2.0\r\n"+
			"Via: SIP/2.0/UDP 127.0.0.1:%d;branch=z9hG4bK-probe-%d;rport\r\n"+
			"Max-Forwards: 70\r\nFrom: <sip:prober@127.0.0.1>;tag=p%d\r\nTo: <sip:probe@%s>\r\n"+
			"Call-ID: probe-%d@test\r\nCSeq: 1 INVITE\r\nContact: <sip:prober@127.0.0.1:%d>\r\nContent-Length: 0\r\n\r\n",
			p.to, port, i, i, p.to, i, port)
		p.mu.Lock()
		p.sent = append(p.sent, time.Now())
		p.mu.Unlock()
		p.c.WriteToUDP([]byte(msg), p.to)
	}
}

var probeCallID = regexp.MustCompile(`(?mi)^Call-ID:\s*probe-(\d+)@`)

func (p *prober) read() {
	defer p.done.Done()
	buf := make([]byte, 65535)
	for {
		n, _, err := p.c.ReadFromUDP(buf)
		if err != nil {
			return
		}
		now := time.Now()
		msg := string(buf[:n])
		var code int
		if _, err := fmt.Sscanf(msg, "SIP/2.0 %d", &code); err != nil || code < 200 {
			continue
		}
		m := probeCallID.FindStringSubmatch(msg)
		if m == nil {
			continue
		}
		i, _ := strconv.Atoi(m[1])
		p.mu.Lock()
		if _, ok := p.final[i]; !ok {
			p.final[i] = probeAnswer{code, now}
		}
		p.mu.Unlock()
	}
}

// probeFigures are what the new sessions of a transition met.
type probeFigures struct {
	sent, refused, unanswered int
	// window is the longest time from a session refused or unanswered
	// (within 2 s) to the next one answered; slowest the longest a
	// session waited for its answer.
	window, slowest time.Duration
}

func (f probeFigures) String() string {
	return fmt.Sprintf("%d new sessions, %d refused, %d unanswered; refusal window %v, slowest answer %v",
		f.sent, f.refused, f.unanswered, f.window.Round(time.Millisecond), f.slowest.Round(time.Millisecond))
}

// finish stops sending, waits for the last answers and sums up.
func (p *prober) finish() probeFigures {
	close(p.stop)
	time.Sleep(2 * time.Second) // the last answers' time, bounded: what is unanswered by then counts as lost
	p.c.Close()
	p.done.Wait()
	p.mu.Lock()
	defer p.mu.Unlock()
	f := probeFigures{sent: len(p.sent)}
	var badSince time.Time
	for i, at := range p.sent {
		a, ok := p.final[i]
		good := ok && a.code != 503 && a.at.Sub(at) < 2*time.Second
		switch {
		case !ok:
			f.unanswered++
		case a.code == 503:
			f.refused++
		}
		if ok && a.code != 503 {
			f.slowest = max(f.slowest, a.at.Sub(at))
		}
		if !good && badSince.IsZero() {
			badSince = at
		}
		if good && !badSince.IsZero() {
			f.window = max(f.window, at.Sub(badSince))
			badSince = time.Time{}
		}
	}
	return f
}

// The refusal window of an upgrade beside that of a stop and start: new
// sessions (INVITEs, each sent once, 200 a second) keep coming while the
// node changes binary. Across an upgrade none is refused or lost; a stop
// and start refuses or loses those of its whole gap.
func TestUpgradeRefusalWindow(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("probes across an upgrade and a restart")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "sipvisor")
	install(t, harness.SipvisorBin, path)
	s := harness.StartBin(t, path, probeCfg)
	g := followGenerations(t, s)
	p := startProber(t, s.SIPAddr("udp"))
	time.Sleep(time.Second) // probes before the upgrade, for the figures: the window is measured against them
	prev := g.upgrade(2, "dev")
	time.Sleep(time.Second) // and after it
	up := p.finish()
	t.Logf("upgrade: %v", up)
	waitPidGone(t, prev, 30*time.Second)
	if up.refused != 0 || up.unanswered != 0 {
		t.Errorf("want no new session refused or lost across an upgrade, have %v", up)
	}

	// Stop and start, on the same port.
	s2 := harness.Start(t, probeCfg)
	p = startProber(t, s2.SIPAddr("udp"))
	time.Sleep(time.Second)
	pinned := s2.Pinned(probeCfg)
	s2.Stop()
	s3 := harness.Start(t, pinned)
	time.Sleep(time.Second)
	restart := p.finish()
	t.Logf("stop and start: %v", restart)
	s3.Stop()
	if restart.refused+restart.unanswered == 0 {
		t.Logf("a stop and start lost no new session: the machine was quick, or the measure is blind")
	}
}

// An upgrade under SIPp calls over TCP, one connection per call (-t tn)
// and one for all (-t t1): the old generation's draining TCP workers give
// their connections back at a message boundary, as on a scale-down, and the
// old supervisor passes each to the new one (its descriptor over the
// link), whose workers go on reading it. No call fails and sipvisor closes
// no connection.
func TestUpgradeKeepsTCPConnections(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("SIPp calls over TCP across an upgrade")
	}
	harness.NeedSIPp(t)
	for _, mode := range []string{"tn", "t1"} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			path := filepath.Join(dir, "sipvisor")
			install(t, harness.SipvisorBin, path)
			s := harness.StartBin(t, path, harness.ProxyCfg(harness.SIPpUAS(t).Port, "udp_workers = 1\ntcp_workers = 2\n"+handledLate))
			g := followGenerations(t, s)
			sipp := harness.StartSIPp(t, 150*time.Second, "-sn", "uac", s.SIPAddr("tcp"), "-t", mode, "-max_socket", "1000",
				"-i", "127.0.0.1", "-r", "20", "-m", "2400", "-d", "1000",
				"-timeout", "140", "-timeout_error", "-recv_timeout", "40000")
			s.AwaitMetricAtLeast(15, 60*time.Second, "sipvisor_frontdoor_sessions", `group="tcp"`)
			prev := g.upgrade(2, "dev")
			waitPidGone(t, prev, 60*time.Second)
			// Calls go on over the connections the new generation took.
			s.AwaitMetricAtLeast(15, 30*time.Second, "sipvisor_frontdoor_sessions", `group="tcp"`)
			sipp.Quit()
			r := sipp.Wait()
			if r.Exit != 0 || r.Created < 20 || r.Successful != r.Created || r.Failed != 0 {
				t.Fatalf("want every call placed across the upgrade successful and none failed, have %d placed, %d/%d (exit %d)\n%s\n%s",
					r.Created, r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 45), harness.Tail(s.Log.String(), 30))
			}
			if v := s.Metric("sipvisor_frontdoor_connections_handed_off_total"); v < 1 {
				t.Errorf("want the old generation's connections taken by the new one, have %v", v)
			}
			for _, reason := range []string{"idle", "message_timeout", "malformed", "worker_exit", "handoff_failed"} {
				if v := s.MetricAbsentAs0("sipvisor_frontdoor_connections_closed_total", `reason="`+reason+`"`); v != 0 {
					t.Errorf("connections closed by the new generation for %s: want 0, have %v", reason, v)
				}
			}
			for _, closed := range []string{"connection hand-off failed", "connection not passed to the new generation", "a connection of the previous generation is closed"} {
				if strings.Contains(s.Log.String(), closed) {
					t.Errorf("want no connection closed across the upgrade, have %q in the log\n%s", closed, harness.Tail(s.Log.String(), 30))
				}
			}
		})
	}
}

// An upgrade under calls over TLS (sipload callers, one connection each):
// the old generation's TCP workers give each TLS connection back with its
// record layer's state, as on a scale-down, and the new generation's
// workers go on with the calls up on them. Every call completes, its BYE
// included, and sipvisor closes no connection.
func TestUpgradeKeepsTLSConnections(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("calls over TLS across an upgrade")
	}
	pki := harness.NewPKI(t)
	pki.Issue("server", "sipvisor", 2)
	dir := t.TempDir()
	path := filepath.Join(dir, "sipvisor")
	install(t, harness.SipvisorBin, path)
	s := harness.StartBin(t, path, harness.ProxyCfg(harness.SIPpUAS(t).Port, fmt.Sprintf(`socket = tls:127.0.0.1:0
tls_certificate = "%s"
tls_private_key = "%s"
udp_workers = 1
tcp_workers = 2
`, pki.Path("server.pem"), pki.Path("server.key"))+handledLate))
	g := followGenerations(t, s)
	var callers []*harness.Proc
	for range 2 {
		callers = append(callers, harness.StartProc(t, harness.SiploadBin, s.SIPAddr("tls"), "-sn", "uac", "-t", "l1",
			"-i", "127.0.0.1", "-r", "5", "-m", "150", "-d", "1000", "-timeout", "120", "-q"))
	}
	s.AwaitMetricAtLeast(6, 60*time.Second, "sipvisor_frontdoor_sessions", `group="tcp"`)
	prev := g.upgrade(2, "dev")
	waitPidGone(t, prev, 60*time.Second)
	summary := regexp.MustCompile(`offered (\d+)  succeeded (\d+)  failed (\d+)`)
	for i, p := range callers {
		code, out := p.Wait(t, 100*time.Second)
		m := summary.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("caller %d: no summary (exit %d)\n%s", i, code, harness.Tail(out, 20))
		}
		if code != 0 || m[1] != "150" || m[2] != "150" {
			t.Errorf("caller %d over TLS: want 150 calls, all completed, have %s (exit %d)\n%s\n%s", i, m[0], code,
				harness.Tail(out, 20), harness.Tail(s.Log.String(), 30))
		}
	}
	if v := s.Metric("sipvisor_frontdoor_connections_handed_off_total"); v < 1 {
		t.Errorf("want the old generation's TLS connections taken by the new one, have %v", v)
	}
	for _, reason := range []string{"idle", "message_timeout", "malformed", "worker_exit", "handoff_failed", "handshake"} {
		if v := s.MetricAbsentAs0("sipvisor_frontdoor_connections_closed_total", `reason="`+reason+`"`); v != 0 {
			t.Errorf("connections closed by the new generation for %s: want 0, have %v", reason, v)
		}
	}
	for _, closed := range []string{"connection hand-off failed", "connection not passed to the new generation", "a connection of the previous generation is closed"} {
		if strings.Contains(s.Log.String(), closed) {
			t.Errorf("want no connection closed across the upgrade, have %q in the log\n%s", closed, harness.Tail(s.Log.String(), 30))
		}
	}
}

// SIGUSR2 upgrades as ctl upgrade does, as nginx and tableflip take it:
// the new generation serves the same control address, and the old one
// exits once drained.
func TestSIGUSR2Upgrades(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	path := filepath.Join(dir, "sipvisor")
	install(t, harness.SipvisorBin, path)
	// A TCP socket for a TCP worker, whose log line is looked for below.
	s := harness.StartBin(t, path, "socket = tcp:127.0.0.1:0\n"+probeCfg)
	g := followGenerations(t, s)
	old := s.Cmd.Process.Pid
	if err := s.Cmd.Process.Signal(syscall.SIGUSR2); err != nil {
		t.Fatal(err)
	}
	s.WaitLog(`msg="upgrade done"`, 30*time.Second)
	m := regexp.MustCompile(`msg="upgrade done" .*new_pid=(\d+) new_generation=2 `).FindStringSubmatch(s.Log.String())
	if m == nil {
		t.Fatalf("want the upgrade's new pid and generation 2 in the log\n%s", harness.Tail(s.Log.String(), 20))
	}
	pid, _ := strconv.Atoi(m[1])
	g.mu.Lock()
	g.pid = pid
	g.mu.Unlock()
	waitPidGone(t, old, 30*time.Second)
	if v := s.Metric("sipvisor_generation"); v != 2 {
		t.Errorf("want generation 2 serving after SIGUSR2, have %v", v)
	}
	p := startProber(t, s.SIPAddr("udp"))
	time.Sleep(200 * time.Millisecond) // a few probes, each answered by the new generation
	if f := p.finish(); f.sent == 0 || f.refused+f.unanswered != 0 {
		t.Errorf("want the new generation to answer every new session, have %v", f)
	}
	// The workers' own lines end with their generation too: a TCP worker
	// logs the script it reloads in place.
	if out, err := s.Ctl("reload"); err != nil {
		t.Fatalf("ctl reload: %v: %s", err, out)
	}
	s.WaitLog(`msg="script reloaded" group=tcp`, 30*time.Second)
	if !regexp.MustCompile(`msg="script reloaded" group=tcp worker=\d+ pid=\d+ .*generation=2\n`).MatchString(s.Log.String()) {
		t.Errorf("want the TCP worker's line to end with generation 2\n%s", harness.Tail(s.Log.String(), 10))
	}
}

// REGISTER refreshes at 100 a second across an upgrade: every refresh gets
// its 200 without a 503, and the new generation finds every binding (the
// location store is outside both).
func TestUpgradeLosesNoRegistration(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("REGISTER refreshes across an upgrade")
	}
	harness.NeedSIPp(t)
	dir := t.TempDir()
	path := filepath.Join(dir, "sipvisor")
	install(t, harness.SipvisorBin, path)
	s := harness.StartBin(t, path, harness.RegistrarCfg())
	g := followGenerations(t, s)
	const phones = 1000
	run := harness.NewID()
	register := func(rate, cseq int, port ...string) []string {
		return append([]string{"-sf", harness.Testdata("register_retry_uac.xml"), s.SIPAddr("udp"), "-i", "127.0.0.1",
			"-cid_str", "phone-%u-" + run + "@127.0.0.1", "-key", "expires", "3600", "-base_cseq", strconv.Itoa(cseq),
			"-m", strconv.Itoa(phones), "-l", strconv.Itoa(phones), "-r", strconv.Itoa(rate), "-timeout", "100", "-timeout_error"}, port...)
	}
	first := harness.RunSIPp(t, 120*time.Second, register(250, 1)...)
	if first.Exit != 0 || first.Successful != phones {
		t.Fatalf("want %d phones registered, have %d/%d (exit %d)\n%s", phones, first.Successful, first.Failed, first.Exit, harness.Tail(first.Out, 40))
	}
	// The refreshes come from the same port (the same contacts, a higher
	// CSeq) and take 10 s; the upgrade falls among them.
	sipp := harness.StartSIPp(t, 120*time.Second, register(100, 10, "-p", strconv.Itoa(first.Port))...)
	time.Sleep(3 * time.Second) // refreshes before the upgrade too: SIPp has no event to wait on, and 3 s is 300 of them
	prev := g.upgrade(2, "dev")
	r := sipp.Wait()
	waitPidGone(t, prev, 60*time.Second)
	if r.Exit != 0 || r.Successful != phones || r.Failed != 0 {
		t.Fatalf("want %d refreshes answered 200 across the upgrade, have %d/%d (exit %d)\n%s", phones, r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 40))
	}
	if row := harness.SIPpRow(r.Out, "503 <---"); len(row) > 0 && row[0] != 0 {
		t.Errorf("want no refresh refused across the upgrade, have %d 503s\n%s", row[0], harness.Tail(r.Out, 40))
	}
	if n := len(s.Bindings()); n != phones {
		t.Errorf("want the new generation to find the %d bindings, have %d", phones, n)
	}
}
