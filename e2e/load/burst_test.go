package load

import (
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// burstCfg answers OPTIONS itself after costUS of script time, with a fixed
// group of n UDP workers: a capacity of about n*1e6/costUS requests a
// second, whatever else the machine does.
func burstCfg(n, costUS int, extra string) string {
	return fmt.Sprintf(`
socket = udp:127.0.0.1:0
udp_workers = %d
tcp_workers = 1
http_listen = 127.0.0.1:0
%s
route {
	if (is_method("OPTIONS")) {
		usleep(%d);
		sl_send_reply(200, "OK");
		exit;
	}
	sl_send_reply(404, "Not Here");
}
`, n, extra, costUS)
}

// probeOptions sends n OPTIONS one after another from a plain socket and
// returns the slowest answer's wait.
func probeOptions(t *testing.T, sipPort, n int) time.Duration {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sipPort}
	buf := make([]byte, 65535)
	var worst time.Duration
	for i := range n {
		callID := fmt.Sprintf("probe-%d-%s", i, harness.NewID())
		msg := fmt.Sprintf("OPTIONS sip:127.0.0.1:%d SIP/2.0\r\nVia: SIP/2.0/UDP %s;branch=z9hG4bK-%s;rport\r\n"+
			"Max-Forwards: 70\r\nFrom: <sip:probe@127.0.0.1>;tag=p%d\r\nTo: <sip:127.0.0.1:%d>\r\nCall-ID: %s\r\n"+
			"CSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n", sipPort, c.LocalAddr(), callID, i, sipPort, callID)
		start := time.Now()
		if _, err := c.WriteToUDP([]byte(msg), to); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(start.Add(5 * time.Second))
		for {
			k, _, err := c.ReadFromUDP(buf)
			if err != nil {
				t.Fatalf("probe %d: no answer within 5 s: %v", i, err)
			}
			if strings.Contains(string(buf[:k]), callID) && strings.HasPrefix(string(buf[:k]), "SIP/2.0 200") {
				break
			}
		}
		worst = max(worst, time.Since(start))
	}
	return worst
}

// Overload as real clients cause it: steady OPTIONS from SIPp at 75 % of a
// fixed group's capacity, retransmitted as RFC 3261 says (SIPp's default),
// and a burst at twice the capacity for a few seconds near the start. The
// group must answer at least 99 % of the steady stream, and once the load
// has passed answer at once: a backlog of requests whose clients have
// retransmitted them, or given up, must not outlive the overload.
func TestBurstOverSteadyTraffic(t *testing.T) {
	if testing.Short() {
		t.Skip("a 25-second overload")
	}
	const (
		workers = 2
		costUS  = 10000
		capa    = workers * 1_000_000 / costUS // 200/s
		steady  = capa * 3 / 4
		secs    = 20
		burst   = 2 * capa
		burstS  = 3
	)
	s := harness.Start(t, burstCfg(workers, costUS, ""))
	scen := harness.Testdata("options_uac.xml")
	target := s.SIPAddr("udp")
	steadyRun := harness.StartSIPp(t, (secs+60)*time.Second, "-sf", scen, target, "-i", "127.0.0.1",
		"-r", strconv.Itoa(steady), "-m", strconv.Itoa(steady*secs), "-l", strconv.Itoa(steady*40))
	time.Sleep(2 * time.Second) // the burst starts into steady traffic, as in the field
	burstRun := harness.StartSIPp(t, (burstS+60)*time.Second, "-sf", scen, target, "-i", "127.0.0.1",
		"-r", strconv.Itoa(burst), "-m", strconv.Itoa(burst*burstS), "-l", strconv.Itoa(burst*40))
	rb, rs := burstRun.Wait(), steadyRun.Wait()
	worst := probeOptions(t, s.SIPPort("udp"), 20)
	absorbed := s.Metric("sipvisor_frontdoor_retransmissions_absorbed_total")
	stale := s.Metric("sipvisor_pool_stale_requests_dropped_total")
	t.Logf("steady: %d of %d answered; burst: %d of %d; absorbed %v retransmissions, dropped %v stale requests; slowest probe after the load %v",
		rs.Successful, steady*secs, rb.Successful, burst*burstS, absorbed, stale, worst)
	if rs.Successful*100 < steady*secs*99 {
		t.Errorf("steady traffic: want at least 99 %% of %d answered, have %d (%d failed)\n%s",
			steady*secs, rs.Successful, rs.Failed, harness.Tail(rs.Out, 30))
	}
	if worst > 100*time.Millisecond {
		t.Errorf("after the load: want every probe answered within 100 ms, slowest %v", worst)
	}
}
