package load

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// stressRounds is how many times a transition test repeats its
// transition: a few by default, cheap enough for every run of the suite,
// SIPVISOR_STRESS_ROUNDS more to hunt a loss that shows once in many.
func stressRounds(t *testing.T, def int) int {
	t.Helper()
	if testing.Short() {
		t.Skip("a transition stress test: not under -short")
	}
	if v := os.Getenv("SIPVISOR_STRESS_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SIPVISOR_STRESS_ROUNDS=%q: want a count of at least 1", v)
		}
		return n
	}
	return def
}

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
func (tr sippTrace) calls(ids map[string]bool) string {
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

// failedCalls is the Call-IDs of the calls SIPp failed: those of its
// unexpected messages, and those of the calls whose last message in the
// trace is no 200 to the BYE.
func (tr sippTrace) failedCalls() map[string]bool {
	ids := map[string]bool{}
	b, _ := os.ReadFile(tr.errs)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "Call-ID:"); ok {
			ids[strings.TrimSpace(v)] = true
		} else if v, ok := strings.CutPrefix(strings.TrimSpace(l), "i:"); ok {
			ids[strings.TrimSpace(v)] = true
		}
	}
	// Short messages: "time;elapsed;call index;Call-ID;S/R;first line".
	last := map[string]string{}
	m, _ := os.ReadFile(tr.short)
	for _, l := range strings.Split(string(m), "\n") {
		f := strings.Split(l, ";")
		if len(f) < 6 {
			continue
		}
		last[f[3]] = f[4] + " " + f[5]
	}
	for id, l := range last {
		if !strings.HasPrefix(l, "R SIP/2.0 200") || !bye200(tr.short, id) {
			ids[id] = true
		}
	}
	return ids
}

// bye200 reports whether the call's trace ends with its BYE answered.
func bye200(file, id string) bool {
	b, _ := os.ReadFile(file)
	bye := false
	for _, l := range strings.Split(string(b), "\n") {
		if !strings.Contains(l, id) {
			continue
		}
		bye = strings.Contains(l, ";S;BYE ") || bye && strings.Contains(l, ";R;SIP/2.0 200")
	}
	return bye
}

// The TCP group scales down from 4 workers to 2 under SIPp calls over
// TCP, one connection per call (-t tn), round after round: no call fails,
// sipvisor closes no connection. A failed round shows the failed calls'
// messages as SIPp sent and received them, and sipvisor's log.
func TestTCPScaleDownStress(t *testing.T) {
	// One round by default: TestTCPScaleDownKeepsConnections makes another.
	rounds := stressRounds(t, 1)
	for r := range rounds {
		if !tcpScaleDownRound(t, r, rounds) {
			return
		}
	}
}

func tcpScaleDownRound(t *testing.T, r, rounds int) bool {
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
`, cooldown))
	}
	s := harness.Start(t, cfg(3000))
	uacTrace, uacArgs := newSIPpTrace(t, "uac")
	sipp := harness.StartSIPp(t, 150*time.Second, append([]string{"-sn", "uac", s.SIPAddr("tcp"), "-t", "tn", "-max_socket", "1000",
		"-i", "127.0.0.1", "-r", "20", "-m", "2400", "-d", "1000",
		"-timeout", "140", "-timeout_error", "-recv_timeout", "40000"}, uacArgs...)...)
	s.AwaitMetricAtLeast(15, 60*time.Second, "sipvisor_frontdoor_sessions", `group="tcp"`)
	s.Rewrite(cfg(1))
	if out, err := s.Ctl("reload"); err != nil {
		t.Fatalf("ctl reload: %v: %s", err, out)
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
		t.Logf("round %d of %d: %d calls across the scale-down, none failed; %v connections handed off", r+1, rounds, res.Created,
			s.Metric("sipvisor_frontdoor_connections_handed_off_total"))
		s.Stop()
		return true
	}
	failed := uacTrace.failedCalls()
	t.Errorf("round %d of %d: %d calls placed, %d successful, %d failed; connections closed by sipvisor: %v\n"+
		"the failed calls at the caller (SIPp uac):\n%s\nat the callee (SIPp uas):\n%s\nSIPp's screen:\n%s\ncounters:\n%s\nsipvisor's log:\n%s",
		r+1, rounds, res.Created, res.Successful, res.Failed, closed,
		uacTrace.calls(failed), uasTrace.calls(failed), harness.Tail(res.Out, 60), wayCounters(s), s.Log.String())
	return false
}

// wayCounters is the lines of the server's metrics that say which way
// messages and connections went: refused, passed, handed off, closed,
// dropped.
func wayCounters(s *harness.Server) string {
	resp, err := http.Get("http://" + s.HTTP + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var keep []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		for _, w := range []string{"refused", "passed", "handed", "closed", "dropped", "stale", "throttle"} {
			if strings.Contains(l, w) {
				keep = append(keep, "  "+l)
				break
			}
		}
	}
	return strings.Join(keep, "\n")
}
