package e2e

import (
	"bufio"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/ctl"
)

// live counts a group's workers that are spawning or ready: those that take
// new work.
func live(gs []ctl.Group, group string) (n int, all []string) {
	for _, g := range gs {
		if g.Name != group {
			continue
		}
		for _, w := range g.Workers {
			all = append(all, fmt.Sprintf("%d/%d:%s", w.ID, w.Pid, w.State))
			if w.State == "ready" || w.State == "spawning" {
				n++
			}
		}
	}
	return n, all
}

// waitWorkers polls `ctl ps` until the group has exactly want workers, all
// of them live (the drained ones have exited).
func (s *server) waitWorkers(group string, want int, within time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		n, all := live(s.ps(), group)
		if n == want && len(all) == want {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("want %d live workers in %s within %v, have %v\n%s", want, group, within, all, tail(s.log.String(), 30))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// While a group drains from 4 workers to 2 under a steady call load, no
// call fails: a draining worker keeps the messages of the calls it holds
// (their ACKs, BYEs and retransmissions) until its transactions end.
//
// The cooldown (25 cycles of 0.2 s) keeps the group at 4 until SIPp is
// well under way; 20 calls/s of 2 s each means about 40 calls are up when
// each worker is drained, and every call spans at least one drain.
func TestScaleDownUnderCallsLosesNoCall(t *testing.T) {
	t.Run("through the supervisor", func(t *testing.T) { testScaleDownUnderCalls(t, "") })
	// A draining worker's reply socket stays open until it exits: the
	// responses of the calls it holds still reach it.
	t.Run("reply sockets", func(t *testing.T) { testScaleDownUnderCalls(t, "worker_reply_sockets = yes") })
}

// A reload renews every UDP worker while SIPp calls are up: no call fails,
// each old worker finishes the calls it holds while the new ones take the
// new calls.
func TestReloadUnderCallsLosesNoCall(t *testing.T) {
	t.Run("through the supervisor", func(t *testing.T) { testReloadUnderCalls(t, "") })
	// An old worker keeps its reply socket until it exits: the responses
	// of the calls it holds still reach it.
	t.Run("reply sockets", func(t *testing.T) { testReloadUnderCalls(t, "worker_reply_sockets = yes") })
}

func testReloadUnderCalls(t *testing.T, extra string) {
	sip, uas, uac := freePort(t), freePort(t), freePort(t)
	s := startServer(t, proxyCfg(sip, uas, "udp_workers = 2\ntcp_workers = 1\n"+extra))
	group := "udp:127.0.0.1:" + strconv.Itoa(sip)
	sippUAS(t, uas)
	before := s.groupPids(group)
	if len(before) != 2 {
		t.Fatalf("want 2 workers before the reload, have %v", before)
	}
	reloaded := make(chan error, 1)
	go func() {
		// About 40 calls are up 3 s in.
		time.Sleep(3 * time.Second)
		out, err := s.ctl("reload")
		if err != nil {
			err = fmt.Errorf("ctl reload: %v: %s", err, out)
		}
		reloaded <- err
	}()
	r := runSIPp(t, 120*time.Second, "-sn", "uac", "127.0.0.1:"+strconv.Itoa(sip), "-i", "127.0.0.1", "-p", strconv.Itoa(uac),
		"-r", "20", "-m", "200", "-d", "2000", "-timeout", "100", "-timeout_error", "-recv_timeout", "40000")
	if err := <-reloaded; err != nil {
		t.Fatal(err)
	}
	s.waitRenewed(group, before, 30*time.Second)
	if r.Successful != 200 || r.Failed != 0 {
		t.Fatalf("want 200 successful calls and 0 failed across the reload, have %d/%d\n%s", r.Successful, r.Failed, tail(r.Out, 30))
	}
	if n := strings.Count(s.log.String(), `msg="worker renewed" group=`+group+" "); n != 2 {
		t.Errorf("want the group's 2 workers renewed, have %d\n%s", n, tail(s.log.String(), 20))
	}
	s.stopDrained()
}

func testScaleDownUnderCalls(t *testing.T, extra string) {
	sip, uas, uac := freePort(t), freePort(t), freePort(t)
	s := startServer(t, proxyCfg(sip, uas, `
auto_scaling_profile = P
	scale up to 4 on 50% for 2 cycles within 3
	scale down to 2 on 30% for 3 cycles
auto_scaling_cycle = 0.2
auto_scaling_cooldown = 25
udp_workers = 4 use_auto_scaling_profile P
tcp_workers = 1
`+extra))
	group := "udp:127.0.0.1:" + strconv.Itoa(sip)
	sippUAS(t, uas)
	if n, all := live(s.ps(), group); n != 4 {
		t.Fatalf("want 4 workers before the load, have %v", all)
	}
	if v := s.metric("sipvisor_profile_scalings_total", `direction="down"`); v != 0 {
		t.Fatalf("want no scale-down before the calls start, have %v: the machine is too slow for this test's cooldown", v)
	}

	// Watch the draining workers: the messages they handle after their drain
	// began (ACKs, BYEs, replies of the calls they hold) are what a drain
	// that dropped them would lose.
	stop := make(chan struct{})
	watched := make(chan map[int][2]uint64, 1)
	go func() {
		seen := map[int][2]uint64{} // pid: handled when first seen draining, and last
		defer func() { watched <- seen }()
		for {
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
			out, err := s.ctl("ps", "--json")
			if err != nil {
				continue
			}
			var gs []ctl.Group
			if json.Unmarshal([]byte(out), &gs) != nil {
				continue
			}
			for _, g := range gs {
				for _, w := range g.Workers {
					if g.Name != group || w.State != "draining" {
						continue
					}
					h, ok := seen[w.Pid]
					if !ok {
						h[0] = w.Handled
					}
					h[1] = w.Handled
					seen[w.Pid] = h
				}
			}
		}
	}()
	r := runSIPp(t, 120*time.Second, "-sn", "uac", "127.0.0.1:"+strconv.Itoa(sip), "-i", "127.0.0.1", "-p", strconv.Itoa(uac),
		"-r", "20", "-m", "400", "-d", "2000", "-timeout", "100", "-timeout_error", "-recv_timeout", "40000")
	close(stop)
	seen := <-watched
	log := s.log.String()
	var afterDrain uint64
	for _, h := range seen {
		afterDrain += h[1] - h[0]
	}
	t.Logf("messages handled by draining workers after their drain began: %d (workers seen draining: %d)", afterDrain, len(seen))
	if afterDrain == 0 {
		t.Errorf("want draining workers to handle the messages of calls they hold, have none handled after the drain began (seen %v)", seen)
	}
	if r.Successful != 400 || r.Failed != 0 {
		t.Errorf("want 400 successful calls and 0 failed across the scale-down, have %d/%d (exit %d)\n%s\n%s",
			r.Successful, r.Failed, r.Exit, tail(r.Out, 60), scalingLines(log))
	}
	if v := s.metric("sipvisor_profile_scalings_total", `direction="down"`); v != 2 {
		t.Errorf("want 2 scale-downs (4 to 2), have %v\n%s", v, scalingLines(log))
	}
	if v := s.metric("sipvisor_profile_scalings_total", `direction="up"`); v != 0 {
		t.Errorf("want no scale-up at this load, have %v\n%s", v, scalingLines(log))
	}
	s.waitWorkers(group, 2, 30*time.Second)
	if v := s.metric("sipvisor_pool_worker_exits_total", `reason="clean"`); v != 2 {
		t.Errorf("want 2 clean exits of drained workers, have %v\n%s", v, scalingLines(s.log.String()))
	}
	for _, reason := range []string{"killed", "crash"} {
		if v := s.metric("sipvisor_pool_worker_exits_total", `reason="`+reason+`"`); v != 0 {
			t.Errorf("want no %s exit, have %v\n%s", reason, v, scalingLines(s.log.String()))
		}
	}
	if v := s.metric("sipvisor_frontdoor_admitted_sessions_total", `kind="call"`); v != 400 {
		t.Errorf("want 400 calls admitted at the front door, have %v", v)
	}
}

// scalingLines keeps the log lines about scaling and worker exits, for
// failure messages.
func scalingLines(log string) string {
	var keep []string
	for _, line := range strings.Split(log, "\n") {
		if strings.Contains(line, "scaling") || strings.Contains(line, "exited") || strings.Contains(line, "drain") ||
			strings.Contains(line, "level=WARN") || strings.Contains(line, "level=ERROR") {
			keep = append(keep, line)
		}
	}
	return strings.Join(keep, "\n")
}

// reloadCfg is a config whose script answers OPTIONS with the given reason
// phrase, so that a test can tell which script a worker runs.
func reloadCfg(sipPort int, profile, reason string) string {
	return `
socket = udp:127.0.0.1:` + strconv.Itoa(sipPort) + `
http_listen = 127.0.0.1:HTTP_PORT
auto_scaling_profile = P ` + profile + `
auto_scaling_cycle = 0.2
auto_scaling_cooldown = 5
udp_workers = 3 use_auto_scaling_profile P
tcp_workers = 1
` + optionsRoute(reason)
}

// optionsRoute answers OPTIONS with reason as its reason phrase, and
// everything else 403.
func optionsRoute(reason string) string {
	return `
route {
	if (is_method("OPTIONS")) {
		sl_send_reply(200, "` + reason + `");
		exit;
	}
	sl_send_reply(403, "Forbidden");
}
`
}

// optionsReason sends an OPTIONS and returns the reason phrase of the 200.
func optionsReason(t *testing.T, p *peer, sipPort int) string {
	t.Helper()
	p.send(&net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sipPort}, options(p.port(), "reload-"+strconv.FormatInt(time.Now().UnixNano(), 36), ""))
	m, _ := p.expect(10*time.Second, "200 for OPTIONS", isStatus(200))
	_, reason, _ := strings.Cut(strings.TrimPrefix(m.first, "SIP/2.0 "), " ")
	return reason
}

// groupPids is the pids of the group's workers now.
func (s *server) groupPids(group string) map[int]bool {
	pids := map[int]bool{}
	for pid, g := range s.workerPids() {
		if g == group {
			pids[pid] = true
		}
	}
	return pids
}

// waitRenewed waits until none of the old workers is left in the group and
// the group has a ready worker.
func (s *server) waitRenewed(group string, old map[int]bool, within time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(within)
	for {
		left, ready := 0, 0
		for _, g := range s.ps() {
			for _, w := range g.Workers {
				if g.Name != group {
					continue
				}
				if old[w.Pid] {
					left++
				} else if w.State == "ready" {
					ready++
				}
			}
		}
		if left == 0 && ready > 0 {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("want the workers of %s renewed within %v, have %d old left and %d new ready\n%s", group, within, left, ready, tail(s.log.String(), 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// replaceWorkers kills every worker of the group and waits for as many
// replacements, which run the script of the config in force.
func (s *server) replaceWorkers(group string, want int) {
	s.t.Helper()
	old := map[int]bool{}
	for pid, g := range s.workerPids() {
		if g == group {
			old[pid] = true
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		fresh := 0
		stale := false
		for _, g := range s.ps() {
			for _, w := range g.Workers {
				if g.Name != group {
					continue
				}
				if old[w.Pid] {
					stale = true
				} else if w.State == "ready" {
					fresh++
				}
			}
		}
		if !stale && fresh == want {
			return
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("want %d new ready workers in %s, have %d (old ones listed: %v)\n%s", want, group, fresh, stale, tail(s.log.String(), 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// SIGHUP reloads the file: a profile with a scale-down part lets an idle
// group shrink to its new floor, and the workers are renewed, so the new
// script is in force without a restart. A file with errors changes nothing
// and says so in sipvisor_config_last_reload_successful.
func TestSIGHUPReloadsProfile(t *testing.T) {
	sip := freePort(t)
	// Without a scale-down part the group never shrinks, however idle.
	s := startServer(t, reloadCfg(sip, "scale up to 3 on 90% for 2 cycles", "v1"))
	group := "udp:127.0.0.1:" + strconv.Itoa(sip)
	p := newPeer(t)
	path := s.cmd.Args[len(s.cmd.Args)-1]
	if filepath.Ext(path) != ".cfg" {
		t.Fatalf("want the config path as sipvisor's last argument, have %v", s.cmd.Args)
	}
	httpPort := s.http[strings.LastIndexByte(s.http, ':')+1:]
	write := func(text string) {
		t.Helper()
		if err := os.WriteFile(path, []byte(strings.ReplaceAll(text, "HTTP_PORT", httpPort)), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	hup := func(wantOK float64, wantReloads string) {
		t.Helper()
		if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(10 * time.Second)
		for s.metric("sipvisor_config_reloads_total", wantReloads) < 1 {
			if time.Now().After(deadline) {
				t.Fatalf("want a reload counted as %s within 10s\n%s", wantReloads, tail(s.log.String(), 20))
			}
			time.Sleep(20 * time.Millisecond)
		}
		if v := s.metric("sipvisor_config_last_reload_successful"); v != wantOK {
			t.Fatalf("want sipvisor_config_last_reload_successful %v, have %v\n%s", wantOK, v, tail(s.log.String(), 20))
		}
	}

	// Many idle cycles: the group is still at 3.
	deadline := time.Now().Add(10 * time.Second)
	for s.metric("sipvisor_profile_decisions_total", `decision="hold"`) < 20 {
		if time.Now().After(deadline) {
			t.Fatalf("want 20 hold decisions within 10s, have %v", s.metric("sipvisor_profile_decisions_total", `decision="hold"`))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if n, all := live(s.ps(), group); n != 3 || len(all) != 3 {
		t.Fatalf("want 3 workers without a scale-down part, have %v", all)
	}
	if have := optionsReason(t, p, sip); have != "v1" {
		t.Fatalf("want the v1 script, have %q", have)
	}

	before := s.groupPids(group)
	write(reloadCfg(sip, "scale up to 3 on 90% for 2 cycles scale down to 1 on 50% for 2 cycles", "v2"))
	hup(1, `result="success"`)
	s.waitWorkers(group, 1, 20*time.Second)
	// The renewal briefly doubles the group, and a scale-down in between
	// drains an old worker first: at least the 2 from 3 to 1.
	if v := s.metric("sipvisor_profile_scalings_total", `direction="down"`); v < 2 {
		t.Errorf("want at least 2 scale-downs after the reload, have %v", v)
	}
	s.waitRenewed(group, before, 20*time.Second)
	if have := optionsReason(t, p, sip); have != "v2" {
		t.Errorf("want the workers renewed by the reload to run the v2 script, have %q", have)
	}

	// A profile whose floor is over its ceiling: the whole file is refused.
	write(reloadCfg(sip, "scale up to 3 on 90% for 2 cycles scale down to 5 on 50% for 2 cycles", "v3"))
	hup(0, `result="failure"`)
	if !strings.Contains(s.log.String(), "reload failed") {
		t.Errorf("want the failed reload logged, have\n%s", tail(s.log.String(), 10))
	}
	if have := optionsReason(t, p, sip); have != "v2" {
		t.Errorf("want the v2 script still in force after a failed reload, have %q", have)
	}
	if n, all := live(s.ps(), group); n != 1 || len(all) != 1 {
		t.Errorf("want the group still at 1 worker, have %v", all)
	}
}

// A reload reaches the TCP worker in place: a client's connection, open
// across the reload, is answered by the new script, from the same worker.
func TestReloadReachesTCPWorkerInPlace(t *testing.T) {
	sip := freePort(t)
	cfg := func(reason string) string {
		return `
socket = udp:127.0.0.1:` + strconv.Itoa(sip) + `
socket = tcp:127.0.0.1:` + strconv.Itoa(sip) + `
http_listen = 127.0.0.1:HTTP_PORT
udp_workers = 1
tcp_workers = 1
` + optionsRoute(reason)
	}
	s := startServer(t, cfg("v1"))
	tcpPids := func() map[int]bool {
		pids := map[int]bool{}
		for pid, g := range s.workerPids() {
			if strings.HasPrefix(g, "tcp") {
				pids[pid] = true
			}
		}
		return pids
	}
	before := tcpPids()
	if len(before) != 1 {
		t.Fatalf("want 1 TCP worker, have %v", before)
	}

	c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(sip), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	r := bufio.NewReader(c)
	port := c.LocalAddr().(*net.TCPAddr).Port
	n := 0
	ask := func() string {
		t.Helper()
		n++
		msg := strings.Replace(options(port, "tcp-reload-"+strconv.Itoa(n), ""), "SIP/2.0/UDP", "SIP/2.0/TCP", 1)
		c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := c.Write([]byte(msg)); err != nil {
			t.Fatalf("write on the open connection: %v", err)
		}
		first := ""
		for {
			line, err := r.ReadString('\n')
			if err != nil {
				t.Fatalf("read on the open connection: %v (have %q)", err, first)
			}
			if first == "" {
				first = strings.TrimSpace(line)
			}
			if line == "\r\n" {
				break
			}
		}
		if !strings.HasPrefix(first, "SIP/2.0 200 ") {
			t.Fatalf("want a 200 for OPTIONS, have %q", first)
		}
		return strings.TrimPrefix(first, "SIP/2.0 200 ")
	}
	if have := ask(); have != "v1" {
		t.Fatalf("want the v1 script, have %q", have)
	}

	path := s.cmd.Args[len(s.cmd.Args)-1]
	httpPort := s.http[strings.LastIndexByte(s.http, ':')+1:]
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(cfg("v2"), "HTTP_PORT", httpPort)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := s.ctl("reload"); err != nil {
		t.Fatalf("ctl reload: %v: %s", err, out)
	}
	deadline := time.Now().Add(10 * time.Second)
	for ask() != "v2" {
		if time.Now().After(deadline) {
			t.Fatalf("want the v2 script on the open connection within 10 s\n%s", tail(s.log.String(), 20))
		}
		time.Sleep(50 * time.Millisecond)
	}
	if after := tcpPids(); len(after) != 1 || !maps.Equal(after, before) {
		t.Errorf("want the same TCP worker after the reload, have %v before and %v after", before, after)
	}
}

// A worker started after a failed reload runs the config in force, not the
// broken file on disk: were it to load the file itself, every replacement
// would exit at start with the file's error and the group would crash-loop
// down to no worker at all.
func TestWorkerAfterFailedReloadRunsConfigInForce(t *testing.T) {
	sip := freePort(t)
	s := startServer(t, reloadCfg(sip, "scale up to 3 on 90% for 2 cycles", "v1"))
	group := "udp:127.0.0.1:" + strconv.Itoa(sip)
	p := newPeer(t)
	path := s.cmd.Args[len(s.cmd.Args)-1]
	httpPort := s.http[strings.LastIndexByte(s.http, ':')+1:]
	broken := reloadCfg(sip, "scale up to 3 on 90% for 2 cycles scale down to 5 on 50% for 2 cycles", "v3")
	if err := os.WriteFile(path, []byte(strings.ReplaceAll(broken, "HTTP_PORT", httpPort)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := s.cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for s.metric("sipvisor_config_reloads_total", `result="failure"`) < 1 {
		if time.Now().After(deadline) {
			t.Fatalf("want a failed reload counted within 10s\n%s", tail(s.log.String(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.replaceWorkers(group, 3)
	if have := optionsReason(t, p, sip); have != "v1" {
		t.Errorf("want the v1 script still in force after a failed reload, have %q", have)
	}
}
