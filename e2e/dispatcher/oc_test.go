package dispatcher

import (
	"encoding/csv"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// ocRow is one second of sipload's CSV, the columns -oc is about.
type ocRow struct {
	end                     float64 // elapsed_s
	offered, shed, feedback int
	loss                    int
	failed503               int
}

func readOCRows(t *testing.T, path string) []ocRow {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer f.Close()
	recs, _ := csv.NewReader(f).ReadAll() // the last row may be half written
	if len(recs) < 2 {
		return nil
	}
	col := map[string]int{}
	for i, n := range recs[0] {
		col[n] = i
	}
	var out []ocRow
	for _, r := range recs[1:] {
		if len(r) != len(recs[0]) {
			continue
		}
		n := func(name string) int { v, _ := strconv.Atoi(r[col[name]]); return v }
		end, _ := strconv.ParseFloat(r[col["elapsed_s"]], 64)
		out = append(out, ocRow{end: end, offered: n("offered"), shed: n("oc_shed"), feedback: n("oc_feedback"),
			loss: n("oc_loss_pct"), failed503: n("failed_503_retry_after")})
	}
	return out
}

var ocSummary = regexp.MustCompile(`RFC 7339 feedback in (\d+) responses, last loss (\d+)%, max (\d+)%  calls shed (\d+)`)

// TestSiploadFollowsFeedback: sipload -oc calls through a sipvisor that
// answers RFC 7339 feedback. While the server admits everything its loss
// is 0 and sipload sheds nothing; suspended, the server says 100, and from
// one oc-validity (plus the 250 ms the server takes to say it) after the
// suspension sipload places almost no call (one an oc-validity, whose
// refusal says 100 again); resumed, the loss steps down and sipload sheds
// less and less, nothing at the end.
func TestSiploadFollowsFeedback(t *testing.T) {
	t.Parallel()
	uas := harness.SiploadServe(t, "-sn", "uas", "-i", "127.0.0.1")
	s := harness.Start(t, harness.OverloadCfg(uas.Port, "oc_validity = 1s\n"))
	dir := t.TempDir()
	path := filepath.Join(dir, "oc.csv")
	const rate = 40
	start := time.Now()
	sl := harness.StartProc(t, harness.SiploadBin, s.SIPAddr("udp"), "-sn", "uac", "-oc", "-i", "127.0.0.1",
		"-schedule", strconv.Itoa(rate)+"/18s", "-d", "100", "-q", "--csv", path)
	awaitRow := func(at float64) {
		t.Helper()
		harness.WaitFor(t, "sipload's second "+strconv.FormatFloat(at, 'f', 0, 64), 30*time.Second, func() bool {
			rows := readOCRows(t, path)
			return len(rows) > 0 && rows[len(rows)-1].end >= at
		})
	}
	awaitRow(3)
	if out, err := s.Ctl("suspend"); err != nil {
		t.Fatalf("ctl suspend: %v: %s", err, out)
	}
	suspended := time.Since(start).Seconds()
	s.AwaitMetric(1, "sipvisor_overload_oc_loss_ratio")
	awaitRow(suspended + 5)
	if out, err := s.Ctl("resume"); err != nil {
		t.Fatalf("ctl resume: %v: %s", err, out)
	}
	resumed := time.Since(start).Seconds()
	code, out := sl.Wait(t, 40*time.Second)
	rows := readOCRows(t, path)
	t.Logf("suspended at %.2fs, resumed at %.2fs; sipload's seconds (end, offered, shed, feedback, loss%%):", suspended, resumed)
	for _, r := range rows {
		t.Logf("  %5.1f %3d %3d %3d %3d", r.end, r.offered, r.shed, r.feedback, r.loss)
	}
	// Exit 1: the calls placed while suspended were refused, as they
	// should be (503 with Retry-After), and nothing else failed.
	if code > 1 || !strings.Contains(out, "timeout 0  4xx 0  5xx 0") {
		t.Fatalf("sipload exit %d\n%s", code, harness.Tail(out, 15))
	}
	m := ocSummary.FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("sipload's summary has no overload control line\n%s", out)
	}
	if fb, _ := strconv.Atoi(m[1]); fb == 0 || m[3] != "100" {
		t.Errorf("summary: want feedback received and a max loss of 100%%, have %q", m[0])
	}

	validity := 1.0 + 0.25 // oc_validity, and the server's interval
	// The process started before sipload's clock: its seconds end a little
	// later than the test's clock says, by less than this.
	const skew = 0.3
	var before, during, after int
	var duringShed, duringDue int
	for _, r := range rows {
		from := r.end - 1
		switch {
		case r.end+skew < suspended:
			before++
			if r.shed != 0 || r.feedback == 0 {
				t.Errorf("second ending %.1f, before the suspension: want feedback and nothing shed, have %+v", r.end, r)
			}
		case from > suspended+validity+skew && r.end < resumed:
			during++
			duringShed += r.shed
			duringDue += r.shed + r.offered
			// A call is placed once the last feedback expired, and more
			// while its refusal is on its way: on a busy machine, a few.
			if share := float64(r.shed) / float64(r.shed+r.offered); share < 0.7 {
				t.Errorf("second ending %.1f, suspended for over an oc-validity: want most of the calls due shed, have %.0f%% (%+v)", r.end, 100*share, r)
			}
		case from > resumed+6:
			// 100 stepped down by 5 points every 250 ms: 0 within 5 s,
			// and a second to spare.
			after++
			if r.shed > r.offered/10 || r.loss > 0 {
				t.Errorf("second ending %.1f, 7 s after the resumption: want nearly nothing shed, have %+v", r.end, r)
			}
		}
	}
	if share := float64(duringShed) / float64(max(duringDue, 1)); share < 0.9 {
		t.Errorf("suspended for over an oc-validity: want 90%% of the calls due shed, have %.0f%%", 100*share)
	}
	if before < 2 || during < 2 || after < 1 {
		t.Errorf("want at least 2 seconds before, 2 during, 1 after; have %d, %d, %d", before, during, after)
	}
}

// slowBackend is a sipvisor proxying to a SIPp callee with one worker that
// blocks 40 ms on each INVITE, as a slow database would: about 25 calls a
// second; beyond, its admission refuses new calls (queue delay, the RTT
// throttle) with 503 and Retry-After.
func slowBackend(t *testing.T, dir string) (*harness.Server, *backend, *backend) {
	t.Helper()
	callee := startBackend(t, dir, "slow-callee")
	cfg := harness.ProxyConfig(callee.uri, "udp_workers = 1\nudp_direct_reads = no\n", false)
	const rr = `if (is_method("INVITE")) record_route();`
	if !strings.Contains(cfg, rr) {
		t.Fatalf("the proxy config lacks %q", rr)
	}
	cfg = strings.Replace(cfg, rr, `if (is_method("INVITE")) { record_route(); usleep(40000); }`, 1)
	s := harness.Start(t, cfg)
	return s, &backend{uri: "sip:" + s.SIPAddr("udp")}, callee
}

func refusedAll(s *harness.Server) float64 {
	var n float64
	for k, v := range s.Stats().Counters {
		if strings.HasPrefix(k, "refused_") {
			n += v
		}
	}
	return n
}

// TestFrontShedsToOtherBackend: a front over a slow sipvisor (first by
// priority) and a SIPp callee, offered about three times what the slow one
// takes. With RFC 7339 between the tiers the slow backend says how much to
// shed and the front sends that share to the other backend before the
// slow one sees it: the slow one refuses little, and serves calls all the
// way through. Without it, the slow one's refusals (503 with Retry-After,
// no oc) hold it out of the rotation for their Retry-After (RFC 3261),
// and it serves fewer calls.
func TestFrontShedsToOtherBackend(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("two runs of 900 SIPp calls through two tiers; skipped with -short")
	}
	harness.NeedSIPp(t)
	const n, rate = 900, 60
	type result struct {
		slowInvites, otherInvites int
		refused, shed             float64
		failed                    int
	}
	run := func(t *testing.T, oc bool) result {
		dir := t.TempDir()
		slow, sb, callee := slowBackend(t, dir)
		other := startBackend(t, dir, "other")
		// The front's own admission is not what is measured: on a shared
		// machine its worker waiting for the CPU would read as overload.
		probe := "ds_ping_interval = 1s\nqueue_delay_admission = 0\nthrottle_enable = no"
		if !oc {
			probe += "\nds_overload_control = no"
		}
		front := front(t, dir, 8, probe, []*backend{sb, other})
		r := calls(t, front, n, rate)
		ds := destinations(t, front)
		res := result{slowInvites: invites(callee.requests(t)), otherInvites: invites(other.requests(t)),
			refused: refusedAll(slow), shed: float64(ds[sb.uri].Shed), failed: r.Failed}
		t.Logf("RFC 7339 %v: calls %d ok %d failed; slow backend served %d, refused %.0f; front shed %.0f; other backend %d",
			oc, r.Successful, r.Failed, res.slowInvites, res.refused, res.shed, res.otherInvites)
		if r.Successful+r.Failed != n || r.Failed > n/50 {
			t.Errorf("want nearly all %d calls through, have %d successful and %d failed\n%s", n, r.Successful, r.Failed, harness.Tail(r.Out, 20))
		}
		return res
	}
	var with, without result
	t.Run("with RFC 7339", func(t *testing.T) {
		with = run(t, true)
		if with.shed == 0 {
			t.Fatalf("the front shed nothing from the slow backend")
		}
		// The front sheds most of the excess, which would all reach the
		// slow backend and be refused there without RFC 7339; the rest
		// is refused while the loss climbs to its level, and as it
		// wavers around it.
		if with.refused > 0.4*(with.refused+with.shed) {
			t.Errorf("of the calls over the slow backend's capacity, it refused %.0f and the front shed only %.0f", with.refused, with.shed)
		}
	})
	t.Run("without", func(t *testing.T) {
		without = run(t, false)
		if without.shed != 0 {
			t.Errorf("without ds_overload_control, the front shed %.0f", without.shed)
		}
	})
	if !t.Failed() && with.slowInvites <= without.slowInvites {
		t.Errorf("the slow backend served %d calls with RFC 7339, %d without: want more with", with.slowInvites, without.slowInvites)
	}
}
