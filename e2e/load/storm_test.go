package load

import (
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// stormCfg is a registrar with a fixed group of n UDP workers whose
// REGISTER costs costUS of script time: a capacity of about n*1e6/costUS
// REGISTERs a second, whatever else the machine does. OPTIONS are answered
// at once, so that a probe measures the wait in the queue and nothing else.
func stormCfg(n, costUS int) string {
	return fmt.Sprintf(`
socket = udp:127.0.0.1:0
udp_workers = %d
tcp_workers = 1
http_listen = 127.0.0.1:0
retry_after = 2-6
route {
	if (is_method("REGISTER")) {
		usleep(%d);
		save("location");
		exit;
	}
	if (is_method("OPTIONS")) {
		sl_send_reply(200, "OK");
		exit;
	}
	sl_send_reply(404, "Not Here");
}
`, n, costUS)
}

// sippCreatedAll reads SIPp's statistics file (-trace_stat -stf) and returns
// when the run started and when it had created n calls: how long it took to
// send the first request of each.
func sippCreatedAll(t *testing.T, path string, n int) (start, done time.Time) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("SIPp statistics: %v", err)
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	col := map[string]int{}
	for i, name := range strings.Split(lines[0], ";") {
		col[name] = i
	}
	// StartTime and CurrentTime read "date<TAB>time<TAB>unix seconds".
	epoch := func(field string) time.Time {
		f := strings.Split(field, "\t")
		s, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err != nil {
			t.Fatalf("SIPp statistics: time %q: %v", field, err)
		}
		return time.Unix(0, int64(s*1e9))
	}
	for _, l := range lines[1:] {
		f := strings.Split(l, ";")
		if len(f) <= col["OutgoingCall(C)"] {
			continue
		}
		if c, _ := strconv.Atoi(f[col["OutgoingCall(C)"]]); c >= n {
			return epoch(f[col["StartTime"]]), epoch(f[col["CurrentTime"]])
		}
	}
	t.Fatalf("SIPp statistics: never %d calls created\n%s", n, harness.Tail(string(b), 5))
	return
}

// stormProbe sends one OPTIONS from c and waits up to limit for its 200;
// ok is false when none came (a probe that waited too long in a queue is
// dropped like any other request, and a probe does not retransmit).
func stormProbe(c *net.UDPConn, to *net.UDPAddr, limit time.Duration) (rtt time.Duration, ok bool) {
	callID := "probe-" + harness.NewID()
	msg := fmt.Sprintf("OPTIONS sip:%s SIP/2.0\r\nVia: SIP/2.0/UDP %s;branch=z9hG4bK-%s;rport\r\n"+
		"Max-Forwards: 70\r\nFrom: <sip:probe@127.0.0.1>;tag=%s\r\nTo: <sip:%s>\r\nCall-ID: %s\r\n"+
		"CSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n", to, c.LocalAddr(), callID, callID[6:14], to, callID)
	start := time.Now()
	if _, err := c.WriteToUDP([]byte(msg), to); err != nil {
		return 0, false
	}
	buf := make([]byte, 65535)
	c.SetReadDeadline(start.Add(limit))
	for {
		n, _, err := c.ReadFromUDP(buf)
		if err != nil {
			return 0, false
		}
		if m, err := harness.Parse(buf[:n]); err == nil && m.Code == 200 && m.Header("Call-ID") == callID {
			return time.Since(start), true
		}
	}
}

type stormSample struct {
	at  time.Time
	rtt time.Duration
	ok  bool
}

// stormSampler probes the group every interval until stop is closed and
// then sends what it saw on the returned channel.
func stormSampler(t *testing.T, sipPort int, interval time.Duration, stop <-chan struct{}) <-chan []stormSample {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sipPort}
	out := make(chan []stormSample, 1)
	go func() {
		defer c.Close()
		var ss []stormSample
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				out <- ss
				return
			case <-tick.C:
				at := time.Now()
				rtt, ok := stormProbe(c, to, 2*time.Second)
				ss = append(ss, stormSample{at, rtt, ok})
			}
		}
	}()
	return out
}

// A registration storm: every phone re-registers at once, as after an
// outage, at several times the group's capacity. 3,000 phones register
// under capacity with a short Expires; then all of them refresh at once
// (same Call-ID and contact, CSeq + 1, Expires 3600) at about five times
// the capacity, over UDP with SIPp's retransmissions, retrying a 503 after its
// Retry-After and a timed-out transaction after a few seconds. Refreshes of
// live bindings pass the session guards, but the waiting-time bound
// (max_queue_wait) applies to them: the group drops what waited too long
// and the clients' retransmissions bring it back. Every binding must be
// live again once the first registrations' expiry has passed, and the
// group must answer promptly within 10 s of the storm's end.
func TestRegistrationStorm(t *testing.T) {
	if testing.Short() {
		t.Skip("a one-minute registration storm")
	}
	const (
		users     = 3000
		workers   = 2
		costUS    = 5000
		capa      = workers * 1_000_000 / costUS // 400 REGISTERs/s
		regRate   = capa * 3 / 4
		stormRate = 5 * capa
		shortExp  = 40 // seconds, phase 1
		prompt    = 100 * time.Millisecond
		recovery  = 10 * time.Second
	)
	s := harness.Start(t, stormCfg(workers, costUS))
	sip := s.SIPPort("udp")
	scen := harness.Testdata("register_retry_uac.xml")
	target := s.SIPAddr("udp")
	// Call N of either run has the Call-ID storm-N-RUN: the storm refreshes
	// the bindings of the first run, from the same address and contact, the
	// port the first run took.
	cid := "storm-%u-" + harness.NewID() + "@127.0.0.1"
	var uac []string
	phone := func(expires, baseCSeq, rate int, extra ...string) []string {
		args := append([]string{"-sf", scen, target, "-i", "127.0.0.1",
			"-cid_str", cid, "-key", "expires", strconv.Itoa(expires), "-base_cseq", strconv.Itoa(baseCSeq),
			"-m", strconv.Itoa(users), "-l", strconv.Itoa(users), "-r", strconv.Itoa(rate),
			"-timeout", "150", "-timeout_error"}, uac...)
		return append(args, extra...)
	}

	// A control binding that nothing refreshes: it must be gone at the end,
	// which shows that the wait below passed the first registrations' expiry.
	ua := harness.NewUA(t, sip)
	ctlID := harness.NewID() + "@control"
	ua.Send("REGISTER", "sip:example.com", ctlID, 1, "<sip:alice@example.com>", "Expires: "+strconv.Itoa(shortExp))
	if m := ua.Final(ctlID, "REGISTER"); m.Code != 200 {
		t.Fatalf("control REGISTER: want 200, have %d\n%s", m.Code, m.Raw)
	}

	// Phase 1: every phone registers, under capacity.
	p1Start := time.Now()
	r1 := harness.RunSIPp(t, 180*time.Second, phone(shortExp, 1, regRate)...)
	p1End := time.Now()
	uac = []string{"-p", strconv.Itoa(r1.Port)}
	if r1.Exit != 0 || r1.Successful != users || r1.Failed != 0 {
		t.Fatalf("phase 1: want %d registrations and none failed, have %d/%d (exit %d)\n%s",
			users, r1.Successful, r1.Failed, r1.Exit, harness.Tail(r1.Out, 40))
	}
	sent1 := harness.SIPpRow(r1.Out, "REGISTER ---")
	refused1 := harness.SIPpRow(r1.Out, "503 <---")
	t.Logf("phase 1: %d phones registered at %d/s in %v: %v REGISTERs sent (messages, retransmissions, timeouts), %v 503s",
		users, regRate, p1End.Sub(p1Start).Round(time.Millisecond), sent1, refused1)
	// The supervisor counts the bindings and learns their Call-IDs once a
	// cycle: from then on the storm's REGISTERs are refreshes.
	s.AwaitResource("max_registrations", users+1)
	bs := s.Bindings()
	if len(bs) != users+1 {
		t.Fatalf("after phase 1: want %d bindings, have %d", users+1, len(bs))
	}

	// A phone's CSeq in phase 1 was 1 plus its retries; a refresh goes one
	// higher than any of them.
	retries1 := 0
	if len(sent1) > 0 {
		retries1 = sent1[0] - users
	}
	baseCSeq := 2 + retries1

	quiet, ok := stormProbe(harness.UDP(t), &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sip}, time.Second)
	if !ok {
		t.Fatal("no answer to an OPTIONS before the storm")
	}
	stale0 := s.Metric("sipvisor_pool_stale_requests_dropped_total")
	absorbed0 := s.Metric("sipvisor_frontdoor_retransmissions_absorbed_total")
	refused0 := s.Metric("sipvisor_frontdoor_refused_sessions_total")
	forwarded0 := s.Metric("sipvisor_frontdoor_datagrams_forwarded_total")

	// Phase 2: the storm.
	stats := filepath.Join(t.TempDir(), "storm.csv")
	stop := make(chan struct{})
	samples := stormSampler(t, sip, 250*time.Millisecond, stop)
	stormStart := time.Now()
	r2 := harness.RunSIPp(t, 180*time.Second, phone(3600, baseCSeq, stormRate, "-trace_stat", "-stf", stats, "-fd", "100ms")...)
	stormEnd := time.Now()
	close(stop)
	during := <-samples

	sent2 := harness.SIPpRow(r2.Out, "REGISTER ---")
	refused2 := harness.SIPpRow(r2.Out, "503 <---")
	stale := s.Metric("sipvisor_pool_stale_requests_dropped_total") - stale0
	absorbed := s.Metric("sipvisor_frontdoor_retransmissions_absorbed_total") - absorbed0
	refused := s.Metric("sipvisor_frontdoor_refused_sessions_total") - refused0
	forwarded := s.Metric("sipvisor_frontdoor_datagrams_forwarded_total") - forwarded0
	sippStart, sentAll := sippCreatedAll(t, stats, users)
	offered := float64(users) / sentAll.Sub(sippStart).Seconds()
	t.Logf("storm: %d refreshes offered at %.0f/s (%.1f × capacity %d/s) over %v; SIPp done after %v: %d successful, %d failed; "+
		"REGISTER (messages, retransmissions, timeouts) %v, 503s %v; server: %v stale requests dropped, %v retransmissions absorbed, %v sessions refused",
		users, offered, offered/capa, capa, sentAll.Sub(sippStart).Round(time.Millisecond), stormEnd.Sub(stormStart).Round(time.Millisecond),
		r2.Successful, r2.Failed, sent2, refused2, stale, absorbed, refused)

	// What the probes saw during the storm: the worst wait, and when the
	// group last answered slowly or not at all. A probe is not
	// retransmitted, so one that waited too long is dropped unanswered.
	var worst time.Duration
	var answered int
	var lastSlow time.Time
	for _, p := range during {
		if p.ok {
			answered++
			worst = max(worst, p.rtt)
		}
		if !p.ok || p.rtt >= prompt {
			lastSlow = p.at
		}
	}
	// What the workers handled: what the door forwarded less what they
	// dropped as stale, less the probes (those answered; the others were
	// dropped as stale).
	handled := int(forwarded-stale) - answered
	t.Logf("workers handled %d REGISTERs for %d refreshes; probes before the storm %v, during it %d: %d unanswered, slowest answer %v",
		handled, users, quiet.Round(time.Microsecond), len(during), len(during)-answered, worst.Round(time.Millisecond))
	if !lastSlow.IsZero() {
		t.Logf("last slow or unanswered probe %v after the storm's last new REGISTER, %v before SIPp was done",
			lastSlow.Sub(sentAll).Round(time.Millisecond), stormEnd.Sub(lastSlow).Round(time.Millisecond))
	}

	if r2.Exit != 0 || r2.Successful != users || r2.Failed != 0 {
		t.Errorf("storm: want all %d phones registered again and none failed, have %d/%d (exit %d)\n%s",
			users, r2.Successful, r2.Failed, r2.Exit, harness.Tail(r2.Out, 40))
	}
	if offered < 3*capa {
		t.Errorf("storm: want the refreshes offered at 3 × capacity (%d/s) or more, have %.0f/s: the machine could not make a storm", 3*capa, offered)
	}
	if len(refused2) > 0 && refused2[0] > 0 || refused > 0 {
		t.Errorf("storm: want no refresh of a live binding refused, have %v 503s at SIPp and %v refused sessions at the server", refused2, refused)
	}
	if stale == 0 {
		t.Errorf("storm: want the waiting-time bound to have dropped requests that waited too long, have none: no overload")
	}

	// Recovery: within 10 s of the storm's end, probes are answered
	// promptly again, five in a row.
	c := harness.UDP(t)
	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sip}
	var after []string
	for inRow := 0; inRow < 5; {
		if time.Since(stormEnd) > recovery {
			t.Fatalf("want five probes in a row answered within %v by %v after the storm's end, have %v", prompt, recovery, after)
		}
		rtt, ok := stormProbe(c, to, time.Second)
		if ok && rtt < prompt {
			inRow++
			after = append(after, rtt.Round(time.Microsecond).String())
		} else {
			inRow = 0
			after = append(after, fmt.Sprintf("slow(%v,%v)", rtt.Round(time.Millisecond), ok))
		}
	}
	t.Logf("after the storm: prompt again %v after its end; probes %v", time.Since(stormEnd).Round(time.Millisecond), after)

	// Every binding must be live once the first registrations have expired:
	// only the refresh keeps it. The passing time is what is tested.
	time.Sleep(time.Until(p1End.Add(shortExp*time.Second + 2*time.Second))) // the passing time is what is tested: the first registrations' expiry
	bs = s.Bindings()
	now := time.Now()
	live := map[string]int{}
	var stale1 []string // bindings still at their phase-1 expiry, or the control
	for _, b := range bs {
		if harness.UserOf(b.AOR) == "alice" || b.Expires.Sub(now) < 3000*time.Second {
			stale1 = append(stale1, fmt.Sprintf("%s %s in %v", b.AOR, b.Contact, b.Expires.Sub(now).Round(time.Second)))
			continue
		}
		live[harness.UserOf(b.AOR)]++
	}
	var missing []string
	for i := 1; i <= users; i++ {
		if aor := "storm" + strconv.Itoa(i); live[aor] != 1 {
			missing = append(missing, fmt.Sprintf("%s×%d", aor, live[aor]))
		}
	}
	if len(missing) > 0 || len(stale1) > 0 || len(bs) != users {
		t.Errorf("%v after phase 1: want each of the %d phones bound once, refreshed to 3600 s, and the control gone; "+
			"have %d bindings, %d phones not bound once (first %v), %d bindings not refreshed (first %v)",
			time.Since(p1End).Round(time.Second), users, len(bs), len(missing), missing[:min(10, len(missing))],
			len(stale1), stale1[:min(10, len(stale1))])
	}
	s.AwaitResource("max_registrations", users)
	t.Logf("%v after phase 1 (Expires %d s): %d phones bound, each refreshed to 3600 s", time.Since(p1End).Round(time.Second), shortExp, len(live))
}
