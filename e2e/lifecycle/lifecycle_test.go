package lifecycle

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// procState reads the state letter and start time of a process from
// /proc/PID/stat; ok is false when there is no such process. The start time
// tells a worker from another process that reused its pid.
func procState(pid int) (state string, start string, ok bool) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return "", "", false
	}
	// The command name is in parentheses and may hold spaces; fields count
	// from the last ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return "", "", false
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 20 {
		return "", "", false
	}
	return f[0], f[19], true
}

// waitGone waits until none of pids runs, a zombie counting as gone, and
// fails the test at the deadline naming the ones still running.
func waitGone(t *testing.T, pids map[int]string, starts map[int]string, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		var alive []string
		for pid, group := range pids {
			state, start, ok := procState(pid)
			if ok && state != "Z" && start == starts[pid] {
				alive = append(alive, fmt.Sprintf("%d (%s, state %s)", pid, group, state))
			}
		}
		if len(alive) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("want no worker left within %v, have %s", within, strings.Join(alive, ", "))
		}
		time.Sleep(20 * time.Millisecond) // polling /proc, bounded by the deadline
	}
}

// liveStarts checks that every pid runs and records its start time.
func liveStarts(t *testing.T, pids map[int]string) map[int]string {
	t.Helper()
	starts := map[int]string{}
	for pid, group := range pids {
		state, start, ok := procState(pid)
		if !ok || state == "Z" {
			t.Fatalf("want worker %d of %s running, have state %q", pid, group, state)
		}
		starts[pid] = start
	}
	return starts
}

// lifecycleCfg has every kind of group, with a timer route so the timer
// group has work.
func lifecycleCfg(uasPort int, extra string) string {
	return harness.ProxyCfg(uasPort, extra+`
timer_route[tick, 1] {
	xlog("L_DBG", "tick");
}
`)
}

// SIGKILL leaves the supervisor no chance to stop its workers; they must go
// by themselves (Pdeathsig, or EOF on the control channel).
func TestSupervisorKilledLeavesNoWorker(t *testing.T) {
	t.Parallel()
	// No call is made: the callee is a socket that answers nothing.
	s := harness.Start(t, lifecycleCfg(harness.NewPeer(t).Port(), "udp_workers = 3\ntcp_workers = 2\ntimer_workers = 1"))
	pids := s.WorkerPids()
	if len(pids) != 6 {
		t.Fatalf("want 6 workers, have %d: %v", len(pids), pids)
	}
	starts := liveStarts(t, pids)

	if err := s.Cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	s.Wait(10 * time.Second)
	waitGone(t, pids, starts, 10*time.Second)
}

// A worker killed from outside is replaced at once (the first crash in a
// minute has no back-off), counted as a crash and a restart, and the group
// serves calls again.
func TestKilledWorkerReplaced(t *testing.T) {
	t.Parallel()
	s := harness.Start(t, harness.ProxyCfg(harness.SIPpUAS(t).Port, "udp_workers = 2\ntcp_workers = 1"))
	group := "udp:" + s.SIPAddr("udp")
	var victim int
	before := map[int]bool{}
	for pid, g := range s.WorkerPids() {
		before[pid] = true
		if g == group && victim == 0 {
			victim = pid
		}
	}
	if victim == 0 {
		t.Fatalf("want a worker in %s, have %v", group, s.PS())
	}
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}

	deadline := time.Now().Add(15 * time.Second)
	for {
		var ready, replaced int
		killedListed := false
		for _, g := range s.PS() {
			if g.Name != group {
				continue
			}
			for _, w := range g.Workers {
				if w.Pid == victim {
					killedListed = true
				}
				if w.State == "ready" {
					ready++
					if !before[w.Pid] {
						replaced++
					}
				}
			}
		}
		if ready == 2 && replaced == 1 && !killedListed {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("want 2 ready workers in %s, one of them new, and pid %d gone; have %d ready, %d new, killed listed %v\n%s",
				group, victim, ready, replaced, killedListed, harness.Tail(s.Log.String(), 20))
		}
		time.Sleep(50 * time.Millisecond) // polling ctl ps, bounded by the deadline
	}
	if v := s.Metric("sipvisor_pool_worker_exits_total", `reason="crash"`); v != 1 {
		t.Errorf("want sipvisor_pool_worker_exits_total{reason=\"crash\"} 1, have %v", v)
	}
	if v := s.Metric("sipvisor_pool_worker_restarts_total"); v != 1 {
		t.Errorf("want sipvisor_pool_worker_restarts_total 1, have %v", v)
	}

	r := harness.RunSIPp(t, 60*time.Second, "-sn", "uac", s.SIPAddr("udp"), "-i", "127.0.0.1",
		"-r", "20", "-m", "40", "-d", "100", "-timeout", "40", "-timeout_error")
	if r.Exit != 0 || r.Successful != 40 || r.Failed != 0 {
		t.Fatalf("want 40 successful calls after the replacement, have %d/%d (exit %d)\n%s", r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 40))
	}
}

// A worker killed while it holds calls loses none of them, with direct
// reads (the default): SIPp's calls are up on both workers when one is
// killed, and each still ends with its BYE answered. The calls' later
// messages reach the worker that takes the killed one's buckets, which
// relays them by their Route and Via, as any worker would; a transaction
// the killed worker held is retried by SIPp's retransmissions.
func TestKilledWorkerUnderCallsLosesNoCall(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("SIPp calls across a worker's crash")
	}
	crashUnderCalls(t, harness.SIPpUAS(t).Port, "-d", "2000")
}

// crashUnderCalls runs SIPp's UAC in its default mode at 20 calls/s, with
// extra flags, through a server of two UDP workers to a callee on port
// uasPort. Once 20 calls or more are in progress it kills the worker that
// holds the most, waits for its replacement and for 40 more calls
// admitted, ends SIPp, and fails the test unless every call it placed
// succeeded and there was the one crash.
func crashUnderCalls(t *testing.T, uasPort int, extra ...string) {
	t.Helper()
	s := harness.Start(t, harness.ProxyCfg(uasPort, "udp_workers = 2\ntcp_workers = 1"))
	group := "udp:" + s.SIPAddr("udp")
	// -m is more calls than the run places: it ends with Quit.
	sipp := harness.StartSIPp(t, 120*time.Second, append([]string{"-sn", "uac", s.SIPAddr("udp"), "-i", "127.0.0.1",
		"-r", "20", "-m", "2000", "-timeout", "100", "-timeout_error", "-recv_timeout", "40000"}, extra...)...)
	s.AwaitMetricAtLeast(20, 60*time.Second, "sipvisor_frontdoor_sessions", `kind="call"`)
	victim, held := 0, 0
	for _, g := range s.PS() {
		for _, w := range g.Workers {
			if g.Name == group && w.State == "ready" && w.Sessions > held {
				victim, held = w.Pid, w.Sessions
			}
		}
	}
	if victim == 0 {
		t.Fatalf("want a worker of %s holding calls, have %+v", group, s.PS())
	}
	t.Logf("killing worker %d, which holds %d sessions", victim, held)
	if err := syscall.Kill(victim, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	s.AwaitMetricAtLeast(1, 30*time.Second, "sipvisor_pool_worker_exits_total", `reason="crash"`)
	s.WaitWorkers(group, 2, 30*time.Second)
	// Calls placed after the replacement too.
	at := s.Metric("sipvisor_frontdoor_admitted_sessions_total", `kind="call"`)
	s.AwaitMetricAtLeast(at+40, 60*time.Second, "sipvisor_frontdoor_admitted_sessions_total", `kind="call"`)
	sipp.Quit()
	r := sipp.Wait()
	t.Logf("%d calls placed across the crash", r.Created)
	if float64(r.Created) < at+40 || r.Successful != r.Created || r.Failed != 0 {
		t.Errorf("want every call placed across the crash (%v or more) successful and none failed, have %d placed, %d/%d (exit %d)\n%s\n%s",
			at+40, r.Created, r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 60), harness.Tail(s.Log.String(), 40))
	}
	if v := s.Metric("sipvisor_pool_worker_exits_total", `reason="crash"`); v != 1 {
		t.Errorf("want one crash, have %v", v)
	}
}

// A worker killed while the INVITEs it relayed still wait for their
// answers loses none of those calls: SIPp's callee answers each INVITE a
// second and a half late, so the killed worker holds calls whose 180, 200,
// ACK and BYE are all still to come, and they reach the caller and the
// callee through the workers left, and then through the replacement.
// Before answers to a dead worker's branches were forwarded by their Via,
// this lost 10 calls of 62.
func TestKilledWorkerWithPendingAnswersLosesNoCall(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("SIPp calls across a worker's crash")
	}
	uas := harness.SIPpServe(t, "-sf", harness.Testdata("uas_slow_answer.xml"), "-i", "127.0.0.1")
	crashUnderCalls(t, uas.Port, "-d", "0")
}

// A callee's answer to an INVITE whose worker was killed after relaying
// it still reaches the caller: the answer comes to another worker, which
// has no transaction for it and whose branch names a worker that is gone,
// and it is forwarded by its Via, statelessly, as RFC 3261 (16.7) asks of
// a proxy for a response no transaction awaits. Before, it was passed to
// the branch's worker, found none, and was dropped with every
// retransmission: the caller, which had its 100 Trying, never learnt of the
// answer.
func TestAnswerAfterRelayingWorkerKilled(t *testing.T) {
	t.Parallel()
	caller, callee := harness.NewPeer(t), harness.NewPeer(t)
	s := harness.Start(t, harness.ProxyCfg(callee.Port(), "udp_workers = 2\ntcp_workers = 1"))
	group := "udp:" + s.SIPAddr("udp")
	proxy := harness.Local(s.SIPPort("udp"))
	invite := harness.Invite(caller, callee, fmt.Sprintf("kill-%d", time.Now().UnixNano()), "", 70)
	caller.Send(proxy, invite)
	caller.Expect(5*time.Second, "100 Trying", harness.IsStatus(100))
	inv, _ := callee.Expect(5*time.Second, "the INVITE at the callee", harness.IsMethod("INVITE"))
	// The relaying worker's pid is in its branch: z9hG4bK, 8 hex digits,
	// '-', the pid in base 36, '.'.
	branch := inv.Header("Via")
	_, branch, _ = strings.Cut(branch, "branch=z9hG4bK")
	pid36, _, _ := strings.Cut(branch[min(9, len(branch)):], ".")
	pid, err := strconv.ParseInt(pid36, 36, 32)
	if err != nil || len(branch) < 9 {
		t.Fatalf("want the relaying worker's pid in the branch, have Via %q", inv.Header("Via"))
	}
	if err := syscall.Kill(int(pid), syscall.SIGKILL); err != nil {
		t.Fatalf("kill the relaying worker %d: %v", pid, err)
	}
	s.AwaitMetricAtLeast(1, 30*time.Second, "sipvisor_pool_worker_exits_total", `reason="crash"`)
	s.WaitWorkers(group, 2, 30*time.Second)
	// The callee answers, and retransmits its 200 as a UAS does until
	// the caller has it.
	callee.Send(inv.From, harness.ReplyTo(inv, 180, "Ringing", "callee1"))
	ok := harness.ReplyTo(inv, 200, "OK", "callee1")
	for i := 0; ; i++ {
		callee.Send(inv.From, ok)
		if m, got := caller.Recv(500 * time.Millisecond); got && m.Status() == 200 {
			break
		} else if got && m.Status() != 180 {
			t.Errorf("want 180 and 200 at the caller, have %s", m)
		}
		if i == 8 {
			t.Fatalf("the callee's 200 never reached the caller after the relaying worker died\n%s", harness.Tail(s.Log.String(), 30))
		}
	}
}

// SIGTERM drains every group and exits 0, leaving no worker behind.
func TestSIGTERMExitsCleanly(t *testing.T) {
	t.Parallel()
	// No call is made: the callee is a socket that answers nothing.
	s := harness.Start(t, lifecycleCfg(harness.NewPeer(t).Port(), "udp_workers = 2\ntcp_workers = 1\ntimer_workers = 1"))
	pids := s.WorkerPids()
	starts := liveStarts(t, pids)
	if err := s.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	if err := s.Wait(30 * time.Second); err != nil {
		t.Fatalf("want exit 0 on SIGTERM, have %v\n%s", err, harness.Tail(s.Log.String(), 20))
	}
	waitGone(t, pids, starts, 10*time.Second)
	if log := s.Log.String(); strings.Contains(log, "level=ERROR") || strings.Contains(log, `"level":"ERROR"`) {
		t.Errorf("want no error logged on a clean stop, have\n%s", harness.Tail(s.Log.String(), 20))
	}
}

// A call whose INVITE is still waiting for the callee's answer when SIGTERM
// arrives completes: draining finishes the transactions a worker holds, so
// the front door keeps reading while workers drain, and the callee's 200
// still reaches the worker and goes on to the caller.
func TestSIGTERMFinishesCallInProgress(t *testing.T) {
	t.Parallel()
	caller, callee := harness.NewPeer(t), harness.NewPeer(t)
	s := harness.Start(t, harness.ProxyCfg(callee.Port(), "udp_workers = 1\ntcp_workers = 1"))
	proxy := harness.Local(s.SIPPort("udp"))
	invite := harness.Invite(caller, callee, fmt.Sprintf("term-%d", time.Now().UnixNano()), "", 70)
	// The caller retransmits its INVITE as a UAC does over UDP (RFC 3261
	// timer A) until the callee has it: one run in CI, with the package's
	// SIPp crash tests beside it, never saw a lone INVITE arrive.
	var inv harness.Msg
	for i, wait := 0, 500*time.Millisecond; ; i, wait = i+1, 2*wait {
		caller.Send(proxy, invite)
		if m, ok := callee.Recv(wait); ok && m.Method() == "INVITE" {
			inv = m
			break
		}
		if i == 4 {
			t.Fatalf("want the INVITE at the callee within 5 sends over 15 s, have none")
		}
	}
	callee.Send(inv.From, harness.ReplyTo(inv, 180, "Ringing", "callee1"))
	caller.Expect(5*time.Second, "180 Ringing", harness.IsStatus(180))

	if err := s.Cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	// The answer comes once the supervisor has acted on the signal.
	s.WaitLog("stopping: draining workers", 10*time.Second)
	callee.Send(inv.From, harness.ReplyTo(inv, 200, "OK", "callee1"))
	_, skipped := caller.Expect(10*time.Second, "the callee's 200 OK after SIGTERM", harness.IsStatus(200))
	for _, m := range skipped {
		if m.Status() >= 300 {
			t.Errorf("want no final reply but the 200, have %s", m)
		}
	}
	if err := s.Wait(50 * time.Second); err != nil {
		t.Fatalf("want exit 0 on SIGTERM, have %v", err)
	}
}
