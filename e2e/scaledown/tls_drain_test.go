package scaledown

import (
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// The TCP group scales from 3 workers to 1 under calls over TLS: three
// sipload callers, one TLS connection each, which the workers take in
// turn. The draining workers hand their TLS connections over with the
// record layer's state, and the last worker goes on with the calls up on
// them: every call placed completes, its BYE included, and sipvisor closes
// no connection. Before, a draining worker kept its TLS connections until
// they were idle or its drain timed out, and killing it cut their calls.
func TestTLSScaleDownKeepsConnections(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("scales a group down under calls")
	}
	pki := harness.NewPKI(t)
	pki.Issue("server", "sipvisor", 2)
	uas := harness.SIPpUAS(t).Port
	cfg := func(cooldown int) string {
		return harness.ProxyCfg(uas, fmt.Sprintf(`socket = tls:127.0.0.1:0
tls_certificate = "%s"
tls_private_key = "%s"
auto_scaling_profile = P
	scale up to 3 on 90%% for 2 cycles within 3
	scale down to 1 on 30%% for 3 cycles
auto_scaling_cycle = 0.2
auto_scaling_cooldown = %d
udp_workers = 1
tcp_workers = 3 use_auto_scaling_profile P
`+handOffOnly, pki.Path("server.pem"), pki.Path("server.key"), cooldown))
	}
	s := harness.Start(t, cfg(3000))
	if n, all := harness.Live(s.PS(), "tcp"); n != 3 {
		t.Fatalf("want 3 TCP workers before the load, have %v", all)
	}
	// 30 s of calls from each caller, 1 s long, 5 a second.
	var callers []*harness.Proc
	for range 3 {
		callers = append(callers, harness.StartProc(t, harness.SiploadBin, s.SIPAddr("tls"), "-sn", "uac", "-t", "l1",
			"-i", "127.0.0.1", "-r", "5", "-m", "150", "-d", "1000", "-timeout", "120", "-q"))
	}
	s.AwaitMetricAtLeast(8, 60*time.Second, "sipvisor_frontdoor_sessions", `group="tcp"`)
	s.Rewrite(cfg(1))
	if out, err := s.Ctl("reload"); err != nil {
		t.Fatalf("ctl reload: %v: %s", err, out)
	}
	s.AwaitMetricAtLeast(2, 60*time.Second, "sipvisor_pool_worker_exits_total", `group="tcp"`, `reason="clean"`)
	if n, all := harness.Live(s.PS(), "tcp"); n != 1 {
		t.Errorf("want the TCP group scaled down to 1 during the calls, have %v", all)
	}
	summary := regexp.MustCompile(`offered (\d+)  succeeded (\d+)  failed (\d+)`)
	for i, p := range callers {
		code, out := p.Wait(t, 100*time.Second)
		m := summary.FindStringSubmatch(out)
		if m == nil {
			t.Fatalf("caller %d: no summary (exit %d)\n%s", i, code, harness.Tail(out, 20))
		}
		offered, _ := strconv.Atoi(m[1])
		ok, _ := strconv.Atoi(m[2])
		if code != 0 || offered != 150 || ok != 150 {
			t.Errorf("caller %d over TLS: want 150 calls, all completed, have %s (exit %d)\n%s\n%s", i, m[0], code,
				harness.Tail(out, 20), harness.Tail(s.Log.String(), 30))
		}
	}
	for _, reason := range []string{"idle", "message_timeout", "malformed", "worker_exit", "handoff_failed", "handshake"} {
		if v := s.MetricAbsentAs0("sipvisor_frontdoor_connections_closed_total", `reason="`+reason+`"`); v != 0 {
			t.Errorf("connections closed by sipvisor for %s: want 0, have %v", reason, v)
		}
	}
	// Three connections taken in turn by three workers, two of which
	// drained: two moved. A connection caught at a boundary where it cannot
	// move (a read that filled the reader's buffer from a batch of
	// messages in one record) moves at a later one, not when idle: it
	// counts here too (worker/engine TestTLSDrainMovesAfterAFullRead).
	if handed := s.Metric("sipvisor_frontdoor_connections_handed_off_total"); handed < 2 {
		t.Errorf("want the draining workers' two TLS connections handed off, have %v", handed)
	}
}
