package loadgen

import (
	"bytes"
	"context"
	"encoding/csv"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

type result struct {
	st  Stats
	err error
}

// startUAS runs sipload's uas on 127.0.0.1 port 0 and returns its address and
// where its result arrives.
func startUAS(t *testing.T, o Options) (netip.AddrPort, <-chan result) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	o.Scenario = "uas"
	o.LocalIP = "127.0.0.1"
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	addr := make(chan netip.AddrPort, 1)
	o.OnListen = func(a netip.AddrPort) { addr <- a }
	res := make(chan result, 1)
	go func() {
		st, err := Run(ctx, o)
		res <- result{st, err}
	}()
	t.Cleanup(cancel)
	select {
	case a := <-addr:
		return a, res
	case r := <-res:
		t.Fatalf("uas did not start: %v", r.err)
	case <-time.After(10 * time.Second):
		t.Fatal("uas did not start within 10s")
	}
	return netip.AddrPort{}, nil
}

func wait(t *testing.T, res <-chan result, what string) Stats {
	t.Helper()
	select {
	case r := <-res:
		if r.err != nil {
			t.Fatalf("%s: %v", what, r.err)
		}
		return r.st
	case <-time.After(60 * time.Second):
		t.Fatalf("%s did not end within 60s", what)
	}
	return Stats{}
}

func runClient(t *testing.T, o Options) Stats {
	t.Helper()
	o.LocalIP = "127.0.0.1"
	if o.Timeout == 0 {
		o.Timeout = 30 * time.Second
	}
	res := make(chan result, 1)
	go func() {
		st, err := Run(context.Background(), o)
		res <- result{st, err}
	}()
	return wait(t, res, o.Scenario)
}

func TestUACAgainstUAS(t *testing.T) {
	t.Parallel()
	for _, tp := range []string{"u1", "t1"} {
		t.Run(tp, func(t *testing.T) {
			addr, res := startUAS(t, Options{Transport: tp, MaxCalls: 20})
			c := runClient(t, Options{Scenario: "uac", Target: addr.String(), Transport: tp,
				Schedule: Constant(50), MaxCalls: 20, Hold: 20 * time.Millisecond})
			s := wait(t, res, "uas")
			for _, tc := range []struct {
				name       string
				want, have int64
			}{
				{"uac offered", 20, c.Offered},
				{"uac succeeded", 20, c.Succeeded},
				{"uac failed", 0, c.Failed},
				{"uas offered", 20, s.Offered},
				{"uas succeeded", 20, s.Succeeded},
				{"uas failed", 0, s.Failed},
			} {
				if tc.want != tc.have {
					t.Errorf("%s: want %v, have %v", tc.name, tc.want, tc.have)
				}
			}
			if c.SetupP50 <= 0 {
				t.Errorf("setup p50: want > 0, have %v", c.SetupP50)
			}
			var rows int64
			for _, r := range c.Rows {
				rows += r.Offered
			}
			if rows != c.Offered || c.Rows[len(c.Rows)-1].Total.Offered != c.Offered {
				t.Errorf("rows: want offered summing to %d, have %d (last total %d)", c.Offered, rows, c.Rows[len(c.Rows)-1].Total.Offered)
			}
		})
	}
}

func TestRejectedCallsCountAs503RetryAfter(t *testing.T) {
	t.Parallel()
	addr, res := startUAS(t, Options{MaxCalls: 20, RejectEvery: 4})
	c := runClient(t, Options{Scenario: "uac", Target: addr.String(), Schedule: Constant(100), MaxCalls: 20})
	s := wait(t, res, "uas")
	for _, tc := range []struct {
		name       string
		want, have int64
	}{
		{"uac succeeded", 15, c.Succeeded},
		{"uac failed", 5, c.Failed},
		{"uac 503+Retry-After", 5, c.Failed503RetryAfter},
		{"uac 5xx", 0, c.Failed5xx},
		{"uas failed", 5, s.Failed},
	} {
		if tc.want != tc.have {
			t.Errorf("%s: want %v, have %v", tc.name, tc.want, tc.have)
		}
	}
}

func TestRegisterRefreshesUsers(t *testing.T) {
	t.Parallel()
	addr, res := startUAS(t, Options{MaxCalls: 12})
	c := runClient(t, Options{Scenario: "register", Target: addr.String(), Schedule: Constant(40), MaxCalls: 12, Users: 4})
	s := wait(t, res, "uas")
	if c.Succeeded != 12 || s.Succeeded != 12 {
		t.Errorf("want 12 registrations on both sides, have uac %d uas %d", c.Succeeded, s.Succeeded)
	}
}

func TestOptions(t *testing.T) {
	t.Parallel()
	addr, res := startUAS(t, Options{MaxCalls: 10})
	c := runClient(t, Options{Scenario: "options", Target: addr.String(), Schedule: Constant(40), MaxCalls: 10, Transport: "u1"})
	wait(t, res, "uas")
	if c.Succeeded != 10 || c.Failed != 0 {
		t.Errorf("want 10 succeeded 0 failed, have %d %d", c.Succeeded, c.Failed)
	}
}

// A server that reads and never answers: every call must end as a timeout,
// after RFC 3261 retransmissions, and the run must still end by itself.
func TestSilentServerTimesOut(t *testing.T) {
	t.Parallel()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	got := make(chan int, 1)
	go func() {
		n := 0
		buf := make([]byte, 65535)
		for {
			pc.SetReadDeadline(time.Now().Add(3 * time.Second))
			if _, _, err := pc.ReadFrom(buf); err != nil {
				got <- n
				return
			}
			n++
		}
	}()
	c := runClient(t, Options{Scenario: "uac", Target: pc.LocalAddr().String(), Schedule: Constant(50),
		MaxCalls: 5, T1: 10 * time.Millisecond})
	if c.Failed != 5 || c.FailedTimeout != 5 || c.Succeeded != 0 {
		t.Errorf("want 5 timeouts, have failed %d timeout %d succeeded %d", c.Failed, c.FailedTimeout, c.Succeeded)
	}
	// Timer A doubles from T1; as SIPp, an INVITE is sent again 5 times.
	if c.Retransmissions != 25 {
		t.Errorf("retransmissions: want 25, have %d", c.Retransmissions)
	}
	select {
	case n := <-got:
		if n != 30 {
			t.Errorf("datagrams at the server: want 30, have %d", n)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("server reader did not stop")
	}
}

func TestLimitSkipsCalls(t *testing.T) {
	t.Parallel()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	c := runClient(t, Options{Scenario: "uac", Target: pc.LocalAddr().String(), Schedule: Schedule{{100, 200 * time.Millisecond}},
		Limit: 3, T1: 10 * time.Millisecond, NoRetrans: true})
	if c.Offered != 3 || c.Limited != 17 {
		t.Errorf("want 3 offered and 17 limited, have %d %d", c.Offered, c.Limited)
	}
}

func TestMainExitCodesAndCSV(t *testing.T) {
	t.Parallel()
	addr, _ := startUAS(t, Options{RejectEvery: 5})
	dir := t.TempDir()
	csvName := filepath.Join(dir, "run.csv")
	svg := filepath.Join(dir, "run.svg")
	var out, errb bytes.Buffer
	args := []string{addr.String(), "-sn", "uac", "-i", "127.0.0.1", "-r", "20", "-m", "10", "--csv", csvName, "--plot", svg, "-timeout", "20"}
	if code := Main(context.Background(), args, &out, &errb); code != ExitFailed {
		t.Errorf("2 of 10 rejected, no budget: want exit %d, have %d\n%s%s", ExitFailed, code, out.String(), errb.String())
	}
	if !strings.Contains(out.String(), "503+Retry-After 2") || !strings.Contains(out.String(), "failed by  503 Service Unavailable (Retry-After) 2\n") {
		t.Errorf("summary: want 503+Retry-After 2 and the status line, have\n%s", out.String())
	}
	out.Reset()
	if code := Main(context.Background(), append(args, "--max-failed", "2"), &out, &errb); code != ExitOK {
		t.Errorf("within budget: want exit %d, have %d\n%s%s", ExitOK, code, out.String(), errb.String())
	}
	f, err := os.Open(csvName)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if len(recs) < 2 || strings.Join(recs[0], ",") != strings.Join(csvColumns, ",") {
		t.Fatalf("csv: want header %v and rows, have %v", csvColumns, recs)
	}
	last := recs[len(recs)-1]
	if last[19] != "10" || last[20] != "8" || last[21] != "2" {
		t.Errorf("csv totals: want 10 8 2, have %v %v %v", last[19], last[20], last[21])
	}
	byReason := 0
	for _, r := range recs[1:] {
		if v, ok := strings.CutPrefix(r[len(csvColumns)-1], "503 Service Unavailable (Retry-After)="); ok {
			n, _ := strconv.Atoi(v)
			byReason += n
		} else if r[len(csvColumns)-1] != "" {
			t.Errorf("csv failed_by_reason: want only 503s, have %q", r[len(csvColumns)-1])
		}
	}
	if byReason != 2 {
		t.Errorf("csv failed_by_reason: want 2 refusals over the rows, have %d", byReason)
	}
	if b, err := os.ReadFile(svg); err != nil || !bytes.Contains(b, []byte("<svg")) {
		t.Errorf("plot: want an SVG file, have %v", err)
	}
	for _, tc := range []struct {
		args []string
		msg  string
	}{
		{[]string{"-sn", "bogus", "127.0.0.1:5060"}, "unknown scenario"},
		{[]string{"-sn", "uac"}, "needs a target"},
		{[]string{"127.0.0.1", "--schedule", "10/x"}, "schedule step 1"},
		{[]string{"127.0.0.1", "-t", "l2"}, "transport"},
		{[]string{"127.0.0.1", "--plot", "x.jpg"}, ".svg or .png"},
		{[]string{"a:1", "b:2"}, "more than one target"},
		{[]string{"a:1", "-r", "x"}, "invalid value"},
	} {
		errb.Reset()
		if code := Main(context.Background(), tc.args, &out, &errb); code != ExitUsage || !strings.Contains(errb.String(), tc.msg) {
			t.Errorf("%v: want exit %d with %q, have %d %q", tc.args, ExitUsage, tc.msg, code, errb.String())
		}
	}
}

func TestPlotPNG(t *testing.T) {
	t.Parallel()
	name := filepath.Join(t.TempDir(), "run.png")
	rows := []Row{
		{Elapsed: time.Second, TargetCPS: 10, Counts: Counts{Offered: 10, Succeeded: 9}, Groups: []GroupSample{{"udp:127.0.0.1:5060", .1, 4}}},
		{Elapsed: 2 * time.Second, TargetCPS: 350, Counts: Counts{Offered: 350, Succeeded: 350}, Groups: []GroupSample{{"udp:127.0.0.1:5060", .7, 7}}},
	}
	if err := Plot(name, rows); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(name)
	if err != nil || !bytes.HasPrefix(b, []byte("\x89PNG")) {
		t.Fatalf("want a PNG file, have %v", err)
	}
	if err := Plot(name, nil); err == nil {
		t.Error("no rows: want an error, have nil")
	}
}

// A retransmitted OPTIONS is answered again but is not a new call.
func TestUASCountsRetransmittedOptionsOnce(t *testing.T) {
	t.Parallel()
	// Not -m 1: that would end the uas before the retransmission arrives.
	addr, res := startUAS(t, Options{Timeout: 2 * time.Second})
	c, err := net.Dial("udp", addr.String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	req := "OPTIONS sip:service@" + addr.String() + " SIP/2.0\r\nVia: SIP/2.0/UDP " + c.LocalAddr().String() +
		";branch=z9hG4bK-1\r\nFrom: <sip:a@h>;tag=1\r\nTo: <sip:b@h>\r\nCall-ID: opt-1\r\nCSeq: 7 OPTIONS\r\nContent-Length: 0\r\n\r\n"
	buf := make([]byte, 65535)
	for i := 0; i < 2; i++ {
		if _, err := c.Write([]byte(req)); err != nil {
			t.Fatal(err)
		}
		c.SetReadDeadline(time.Now().Add(10 * time.Second))
		n, err := c.Read(buf)
		if err != nil {
			t.Fatalf("answer %d: %v", i+1, err)
		}
		if !bytes.HasPrefix(buf[:n], []byte("SIP/2.0 200 OK\r\n")) {
			t.Fatalf("answer %d: want 200 OK, have %q", i+1, buf[:n])
		}
	}
	s := wait(t, res, "uas")
	if s.Offered != 1 || s.RetransReceived != 1 {
		t.Errorf("want 1 call and 1 retransmission, have %d %d", s.Offered, s.RetransReceived)
	}
}

func TestMetricsCountOutcomes(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	addr, res := startUAS(t, Options{MaxCalls: 10, RejectEvery: 5})
	runClient(t, Options{Scenario: "uac", Target: addr.String(), Schedule: Constant(50), MaxCalls: 10, Metrics: m})
	wait(t, res, "uas")
	want := `
# HELP sipvisor_loadgen_requests_total Calls (INVITE dialogs) or REGISTER/OPTIONS transactions sipload ended, by outcome.
# TYPE sipvisor_loadgen_requests_total counter
sipvisor_loadgen_requests_total{method="INVITE",result="4xx"} 0
sipvisor_loadgen_requests_total{method="INVITE",result="503_retry_after"} 2
sipvisor_loadgen_requests_total{method="INVITE",result="5xx"} 0
sipvisor_loadgen_requests_total{method="INVITE",result="other"} 0
sipvisor_loadgen_requests_total{method="INVITE",result="succeeded"} 8
sipvisor_loadgen_requests_total{method="INVITE",result="timeout"} 0
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want), "sipvisor_loadgen_requests_total"); err != nil {
		t.Error(err)
	}
	if n := testutil.CollectAndCount(reg, "sipvisor_loadgen_response_duration_seconds"); n != 1 {
		t.Errorf("response duration series: want 1, have %d", n)
	}
}
