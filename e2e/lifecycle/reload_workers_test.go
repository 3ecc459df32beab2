package lifecycle

import (
	"bufio"
	"maps"
	"net"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// A reload renews every UDP worker while SIPp calls are up: no call fails,
// each old worker finishes the calls it holds while the new ones take the
// new calls.
func TestReloadUnderCallsLosesNoCall(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("400 SIPp calls across two reloads")
	}
	t.Run("through the supervisor", func(t *testing.T) { t.Parallel(); testReloadUnderCalls(t, "") })
	// An old worker keeps its reply socket until it exits: the responses
	// of the calls it holds still reach it.
	t.Run("reply sockets", func(t *testing.T) { t.Parallel(); testReloadUnderCalls(t, "worker_reply_sockets = yes") })
}

func testReloadUnderCalls(t *testing.T, extra string) {
	s := harness.Start(t, harness.ProxyCfg(harness.SIPpUAS(t).Port, "udp_workers = 2\ntcp_workers = 1\n"+extra))
	group := "udp:" + s.SIPAddr("udp")
	before := s.GroupPids(group)
	if len(before) != 2 {
		t.Fatalf("want 2 workers before the reload, have %v", before)
	}
	sipp := harness.StartSIPp(t, 120*time.Second, "-sn", "uac", s.SIPAddr("udp"), "-i", "127.0.0.1",
		"-r", "20", "-m", "200", "-d", "2000", "-timeout", "100", "-timeout_error", "-recv_timeout", "40000")
	// The reload comes with calls up in both workers: at 20 calls a second
	// of 2 s each, about 40 once SIPp is under way.
	s.AwaitMetricAtLeast(30, 30*time.Second, "sipvisor_frontdoor_sessions", `kind="call"`)
	if out, err := s.Ctl("reload"); err != nil {
		t.Fatalf("ctl reload: %v: %s", err, out)
	}
	r := sipp.Wait()
	s.WaitRenewed(group, before, 30*time.Second)
	if r.Successful != 200 || r.Failed != 0 {
		t.Fatalf("want 200 successful calls and 0 failed across the reload, have %d/%d\n%s", r.Successful, r.Failed, harness.Tail(r.Out, 30))
	}
	if n := strings.Count(s.Log.String(), `msg="worker renewed" group=`+group+" "); n != 2 {
		t.Errorf("want the group's 2 workers renewed, have %d\n%s", n, harness.Tail(s.Log.String(), 20))
	}
	s.StopDrained()
}

// reloadCfg is a config whose script answers OPTIONS with the given reason
// phrase, so that a test can tell which script a worker runs.
func reloadCfg(profile, reason string) string {
	return `
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
auto_scaling_profile = P ` + profile + `
auto_scaling_cycle = 0.2
auto_scaling_cooldown = 5
udp_workers = 3 use_auto_scaling_profile P
tcp_workers = 1
` + harness.OptionsRoute(reason)
}

// optionsReason sends an OPTIONS and returns the reason phrase of the 200.
func optionsReason(t *testing.T, p *harness.Peer, sipPort int) string {
	t.Helper()
	p.Send(&net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sipPort}, harness.Options(p.Port(), "reload-"+strconv.FormatInt(time.Now().UnixNano(), 36), ""))
	m, _ := p.Expect(10*time.Second, "200 for OPTIONS", harness.IsStatus(200))
	_, reason, _ := strings.Cut(strings.TrimPrefix(m.First, "SIP/2.0 "), " ")
	return reason
}

// SIGHUP reloads the file: a profile with a scale-down part lets an idle
// group shrink to its new floor, and the workers are renewed, so the new
// script is in force without a restart. A file with errors changes nothing
// and says so in sipvisor_config_last_reload_successful.
func TestSIGHUPReloadsProfile(t *testing.T) {
	t.Parallel()
	// Without a scale-down part the group never shrinks, however idle.
	s := harness.Start(t, reloadCfg("scale up to 3 on 90% for 2 cycles", "v1"))
	sip := s.SIPPort("udp")
	group := "udp:" + s.SIPAddr("udp")
	p := harness.NewPeer(t)
	write := s.Rewrite
	hup := func(wantOK float64, wantReloads string) {
		t.Helper()
		if err := s.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
			t.Fatal(err)
		}
		s.AwaitMetricAtLeast(1, 10*time.Second, "sipvisor_config_reloads_total", wantReloads)
		if v := s.Metric("sipvisor_config_last_reload_successful"); v != wantOK {
			t.Fatalf("want sipvisor_config_last_reload_successful %v, have %v\n%s", wantOK, v, harness.Tail(s.Log.String(), 20))
		}
	}

	// Many idle cycles: the group is still at 3.
	s.AwaitMetricAtLeast(20, 10*time.Second, "sipvisor_profile_decisions_total", `decision="hold"`)
	if n, all := harness.Live(s.PS(), group); n != 3 || len(all) != 3 {
		t.Fatalf("want 3 workers without a scale-down part, have %v", all)
	}
	if have := optionsReason(t, p, sip); have != "v1" {
		t.Fatalf("want the v1 script, have %q", have)
	}

	before := s.GroupPids(group)
	write(reloadCfg("scale up to 3 on 90% for 2 cycles scale down to 1 on 50% for 2 cycles", "v2"))
	hup(1, `result="success"`)
	s.WaitWorkers(group, 1, 20*time.Second)
	// The renewal briefly doubles the group, and a scale-down in between
	// drains an old worker first: at least the 2 from 3 to 1.
	if v := s.Metric("sipvisor_profile_scalings_total", `direction="down"`); v < 2 {
		t.Errorf("want at least 2 scale-downs after the reload, have %v", v)
	}
	s.WaitRenewed(group, before, 20*time.Second)
	if have := optionsReason(t, p, sip); have != "v2" {
		t.Errorf("want the workers renewed by the reload to run the v2 script, have %q", have)
	}

	// A profile whose floor is over its ceiling: the whole file is refused.
	write(reloadCfg("scale up to 3 on 90% for 2 cycles scale down to 5 on 50% for 2 cycles", "v3"))
	hup(0, `result="failure"`)
	if !strings.Contains(s.Log.String(), "reload failed") {
		t.Errorf("want the failed reload logged, have\n%s", harness.Tail(s.Log.String(), 10))
	}
	if have := optionsReason(t, p, sip); have != "v2" {
		t.Errorf("want the v2 script still in force after a failed reload, have %q", have)
	}
	if n, all := harness.Live(s.PS(), group); n != 1 || len(all) != 1 {
		t.Errorf("want the group still at 1 worker, have %v", all)
	}
}

// A reload reaches the TCP worker in place: a client's connection, open
// across the reload, is answered by the new script, from the same worker.
func TestReloadReachesTCPWorkerInPlace(t *testing.T) {
	t.Parallel()
	cfg := func(reason string) string {
		return harness.Sockets0 + `udp_workers = 1
tcp_workers = 1
` + harness.OptionsRoute(reason)
	}
	s := harness.Start(t, cfg("v1"))
	tcpPids := func() map[int]bool {
		pids := map[int]bool{}
		for pid, g := range s.WorkerPids() {
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

	c, err := net.DialTimeout("tcp", s.SIPAddr("tcp"), 5*time.Second)
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
		msg := strings.Replace(harness.Options(port, "tcp-reload-"+strconv.Itoa(n), ""), "SIP/2.0/UDP", "SIP/2.0/TCP", 1)
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

	s.Rewrite(cfg("v2"))
	if out, err := s.Ctl("reload"); err != nil {
		t.Fatalf("ctl reload: %v: %s", err, out)
	}
	harness.WaitFor(t, "the v2 script on the open connection", 10*time.Second, func() bool { return ask() == "v2" })
	if after := tcpPids(); len(after) != 1 || !maps.Equal(after, before) {
		t.Errorf("want the same TCP worker after the reload, have %v before and %v after", before, after)
	}
}

// A worker started after a failed reload runs the config in force, not the
// broken file on disk: were it to load the file itself, every replacement
// would exit at start with the file's error and the group would crash-loop
// down to no worker at all.
func TestWorkerAfterFailedReloadRunsConfigInForce(t *testing.T) {
	t.Parallel()
	s := harness.Start(t, reloadCfg("scale up to 3 on 90% for 2 cycles", "v1"))
	sip := s.SIPPort("udp")
	group := "udp:" + s.SIPAddr("udp")
	p := harness.NewPeer(t)
	s.Rewrite(reloadCfg("scale up to 3 on 90% for 2 cycles scale down to 5 on 50% for 2 cycles", "v3"))
	if err := s.Cmd.Process.Signal(syscall.SIGHUP); err != nil {
		t.Fatal(err)
	}
	s.AwaitMetricAtLeast(1, 10*time.Second, "sipvisor_config_reloads_total", `result="failure"`)
	s.ReplaceWorkers(group, 3)
	if have := optionsReason(t, p, sip); have != "v1" {
		t.Errorf("want the v1 script still in force after a failed reload, have %q", have)
	}
}
