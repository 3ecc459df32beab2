package scaledown

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// sippTrace is where a SIPp run writes the messages it sent and received
// (-trace_shortmsg) and those it did not expect (-trace_err).
type sippTrace struct{ short, errs string }

func newSIPpTrace(t *testing.T, name string) (sippTrace, []string) {
	dir := t.TempDir()
	tr := sippTrace{short: filepath.Join(dir, name+"-messages.csv"), errs: filepath.Join(dir, name+"-errors.log")}
	return tr, []string{"-trace_shortmsg", "-shortmessage_file", tr.short, "-trace_err", "-error_file", tr.errs}
}

// calls is the trace of the calls whose Call-IDs are among ids: each
// message SIPp sent or received, in order.
func (tr sippTrace) calls(ids map[string]string) string {
	b, _ := os.ReadFile(tr.short)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		for id := range ids {
			if strings.Contains(l, id) {
				out = append(out, "  "+l)
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// failedCalls is the Call-IDs of the calls SIPp failed, each with how:
// "refused" for a call answered 503 (sipvisor's admission refused it),
// "unanswered" for one whose trace ends before the 200 to its BYE.
func (tr sippTrace) failedCalls() map[string]string {
	// Short messages, tab-separated: date, time, epoch, S or R, Call-ID,
	// CSeq, first line.
	m, _ := os.ReadFile(tr.short)
	bye, done, refused := map[string]bool{}, map[string]bool{}, map[string]bool{}
	var order []string
	for _, l := range strings.Split(string(m), "\n") {
		f := strings.Split(l, "\t")
		if len(f) < 7 {
			continue
		}
		id, dir, cseq, first := f[4], f[3], f[5], f[6]
		if _, seen := bye[id]; !seen {
			order = append(order, id)
			bye[id] = false
		}
		switch {
		case dir == "S" && strings.HasPrefix(first, "BYE "):
			bye[id] = true
		case dir == "R" && bye[id] && strings.HasSuffix(cseq, "BYE") && strings.HasPrefix(first, "SIP/2.0 200"):
			done[id] = true
		case dir == "R" && strings.HasPrefix(first, "SIP/2.0 503"):
			refused[id] = true
		}
	}
	ids := map[string]string{}
	for _, id := range order {
		switch {
		case refused[id]:
			ids[id] = "refused"
		case !done[id]:
			ids[id] = "unanswered"
		}
	}
	return ids
}

// how counts the failed calls by how they failed.
func how(failed map[string]string) map[string]int {
	n := map[string]int{}
	for _, h := range failed {
		n[h]++
	}
	return n
}

// The TCP group scales down from 4 workers to 2 under SIPp calls over
// TCP, one connection per call (-t tn), round after round: no call fails,
// sipvisor closes no connection. Every other round the machine starves the
// TCP workers for 3.5 s as the drain begins (they are stopped), as a
// loaded 2-core machine does to them now and then. A failed round shows
// the failed calls' messages as SIPp sent and received them, the counters
// of refusals, and sipvisor's log.
func TestTCPScaleDownStress(t *testing.T) {
	t.Parallel()
	rounds := harness.StressRounds(t, 1)
	// The first round stalls the workers as a loaded machine does (the
	// plain scale-down is TestTCPScaleDownKeepsConnections'); more rounds
	// alternate.
	for r := range rounds {
		if !tcpScaleDownRound(t, r, rounds, r%2 == 0) {
			return
		}
	}
}

func tcpScaleDownRound(t *testing.T, r, rounds int, stall bool) bool {
	uasTrace, uasArgs := newSIPpTrace(t, "uas")
	uas := harness.SIPpUAS(t, uasArgs...).Port
	cfg := func(cooldown int) string {
		return harness.ProxyCfg(uas, fmt.Sprintf(`
auto_scaling_profile = P
	scale up to 4 on 90%% for 2 cycles within 3
	scale down to 2 on 30%% for 3 cycles
auto_scaling_cycle = 0.2
auto_scaling_cooldown = %d
udp_workers = 1
tcp_workers = 4 use_auto_scaling_profile P
log_level = debug
`+handOffOnly, cooldown))
	}
	s := harness.Start(t, cfg(3000))
	uacTrace, uacArgs := newSIPpTrace(t, "uac")
	sipp := harness.StartSIPp(t, 150*time.Second, append([]string{"-sn", "uac", s.SIPAddr("tcp"), "-t", "tn", "-max_socket", "1000",
		"-i", "127.0.0.1", "-r", "20", "-m", "2400", "-d", "1000",
		"-timeout", "140", "-timeout_error", "-recv_timeout", "40000"}, uacArgs...)...)
	s.AwaitMetricAtLeast(15, 60*time.Second, "sipvisor_frontdoor_sessions", `group="tcp"`)
	var tcpPids []int
	for pid, group := range s.WorkerPids() {
		if group == "tcp" {
			tcpPids = append(tcpPids, pid)
		}
	}
	s.Rewrite(cfg(1))
	if out, err := s.Ctl("reload"); err != nil {
		t.Fatalf("ctl reload: %v: %s", err, out)
	}
	if stall {
		for _, pid := range tcpPids {
			syscall.Kill(pid, syscall.SIGSTOP)
		}
		time.Sleep(3500 * time.Millisecond) // the stall itself, not a wait for an outcome
		for _, pid := range tcpPids {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	s.AwaitMetricAtLeast(2, 60*time.Second, "sipvisor_pool_worker_exits_total", `group="tcp"`, `reason="clean"`)
	sipp.Quit()
	res := sipp.Wait()
	closed := map[string]float64{}
	for _, reason := range []string{"idle", "message_timeout", "malformed", "worker_exit", "handoff_failed"} {
		if v := s.MetricAbsentAs0("sipvisor_frontdoor_connections_closed_total", `reason="`+reason+`"`); v != 0 {
			closed[reason] = v
		}
	}
	if res.Failed == 0 && res.Successful == res.Created && len(closed) == 0 {
		t.Logf("round %d of %d (stall %v): %d calls across the scale-down, none failed; %v connections handed off", r+1, rounds, stall, res.Created,
			s.Metric("sipvisor_frontdoor_connections_handed_off_total"))
		s.Stop()
		return true
	}
	failed := uacTrace.failedCalls()
	t.Errorf("round %d of %d (stall %v): %d calls placed, %d successful, %d failed %v; connections closed by sipvisor: %v\n"+
		"the failed calls at the caller (SIPp uac):\n%s\nat the callee (SIPp uas):\n%s\nSIPp's screen:\n%s\ncounters:\n%s\nsipvisor's log:\n%s",
		r+1, rounds, stall, res.Created, res.Successful, res.Failed, how(failed), closed,
		uacTrace.calls(failed), uasTrace.calls(failed), harness.Tail(res.Out, 60), s.MetricLines("refused", "passed", "handed", "closed", "dropped", "stale", "throttle"), s.Log.String())
	return false
}
