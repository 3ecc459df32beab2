package loadgen

import (
	"io"
	"net"
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseArgs(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		args   []string
		target string
		port   int
		sched  Schedule
		hold   time.Duration
		csv    string
	}{
		{"SIPp order, default port", []string{"10.0.0.1", "-sn", "uac", "-r", "5"}, "10.0.0.1:5060", 0, Constant(5), 0, ""},
		{"target last", []string{"-r", "10", "-rp", "5s", "h:5080"}, "h:5080", 0, Constant(2), 0, ""},
		{"-rp in ms", []string{"h:1", "-r", "3", "-rp", "500"}, "h:1", 0, Constant(6), 0, ""},
		{"-d in ms or a duration", []string{"h:1", "-d", "1500"}, "h:1", 0, Constant(10), 1500 * time.Millisecond, ""},
		{"-d 2s", []string{"h:1", "-d", "2s"}, "h:1", 0, Constant(10), 2 * time.Second, ""},
		{"uas listens on 5060", []string{"-sn", "uas"}, "", 5060, Constant(10), 0, ""},
		{"uas -p", []string{"-sn", "uas", "-p", "0"}, "", 0, Constant(10), 0, ""},
		{"ramp", []string{"h:1", "-r", "10", "-rate_increase", "10", "-rate_interval", "2", "-rate_max", "30"}, "h:1", 0,
			Schedule{{10, 2 * time.Second}, {20, 2 * time.Second}, {30, 2 * time.Second}}, 0, ""},
		{"ramp interval defaults to -fd", []string{"h:1", "-r", "10", "-rate_increase", "5", "-rate_max", "15", "-fd", "5"}, "h:1", 0,
			Schedule{{10, 5 * time.Second}, {15, 5 * time.Second}}, 0, ""},
		{"--schedule", []string{"h:1", "--schedule", "10/20s,350/1m"}, "h:1", 0, Schedule{{10, 20 * time.Second}, {350, time.Minute}}, 0, ""},
		{"-trace_stat -stf", []string{"h:1", "-trace_stat", "-stf", "x.csv", "-fd", "1", "-nostdin"}, "h:1", 0, Constant(10), 0, "x.csv"},
	} {
		cfg, err := parseArgs(tc.args, io.Discard)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if cfg.Target != tc.target || cfg.LocalPort != tc.port || cfg.Hold != tc.hold || cfg.csv != tc.csv {
			t.Errorf("%s: want target %q port %d hold %v csv %q, have %q %d %v %q", tc.name, tc.target, tc.port, tc.hold, tc.csv,
				cfg.Target, cfg.LocalPort, cfg.Hold, cfg.csv)
		}
		if len(cfg.Schedule) != len(tc.sched) {
			t.Errorf("%s: want schedule %v, have %v", tc.name, tc.sched, cfg.Schedule)
			continue
		}
		for i := range tc.sched {
			if cfg.Schedule[i] != tc.sched[i] {
				t.Errorf("%s: want schedule %v, have %v", tc.name, tc.sched, cfg.Schedule)
			}
		}
	}
}

// The offered load follows the schedule, not the server: against a server
// that never answers, every scheduled call is still placed.
func TestOpenLoopAgainstSilentServer(t *testing.T) {
	t.Parallel()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	c := runClient(t, Options{Scenario: "uac", Target: pc.LocalAddr().String(),
		Schedule: Schedule{{50, time.Second}, {0, 500 * time.Millisecond}, {100, time.Second}}, T1: 10 * time.Millisecond, NoRetrans: true})
	if c.Offered != 150 || c.FailedTimeout != 150 {
		t.Errorf("want 150 offered and 150 timeouts, have %d %d", c.Offered, c.FailedTimeout)
	}
	var target float64
	for _, r := range c.Rows {
		target += r.TargetCPS
	}
	if target == 0 {
		t.Error("want rows to carry the target rate, have none")
	}
}

func FuzzParseMetrics(f *testing.F) {
	f.Add(metricsText)
	f.Add("x{a=\"\\\"\"} 1 2\n")
	f.Fuzz(func(t *testing.T, s string) {
		ss, _ := parseMetrics(s)
		groupSamples(ss)
	})
}

func TestParseUDPDrops(t *testing.T) {
	t.Parallel()
	const table = `   sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops
  123: 0100007F:13C4 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 31337 2 0000000000000000 17
  124: 0100007F:13C5 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 31338 2 0000000000000000 5
`
	for _, tc := range []struct {
		port int
		want int64
	}{{5060, 17}, {5061, 5}, {5062, -1}} {
		if have := parseUDPDrops(table, tc.port); have != tc.want {
			t.Errorf("port %d: want %v, have %v", tc.port, tc.want, have)
		}
	}
}

// A run cut short by -timeout leaves its open calls aborted, not failed, so
// they do not count against the failure budget.
func TestTimeoutAbortsOpenCalls(t *testing.T) {
	t.Parallel()
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	c := runClient(t, Options{Scenario: "uac", Target: pc.LocalAddr().String(), Schedule: Constant(50), Timeout: 300 * time.Millisecond})
	if c.Offered == 0 || c.Aborted != c.Offered || c.Failed != 0 {
		t.Errorf("want every offered call aborted and none failed, have offered %d aborted %d failed %d", c.Offered, c.Aborted, c.Failed)
	}
}

func TestUDPDropsFindsOwnSocket(t *testing.T) {
	t.Parallel()
	if _, err := os.Stat("/proc/net/udp"); err != nil {
		t.Skip("no /proc/net/udp on this system")
	}
	pc, err := net.ListenPacket("udp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer pc.Close()
	if have := udpDrops(pc.LocalAddr().(*net.UDPAddr).Port); have != 0 {
		t.Errorf("fresh socket: want 0 drops, have %d", have)
	}
}

// Every flag is documented in docs/SIPLOAD.md.
func TestFlagsDocumented(t *testing.T) {
	t.Parallel()
	doc, err := os.ReadFile("../docs/SIPLOAD.md")
	if err != nil {
		t.Fatal(err)
	}
	var usage strings.Builder
	if _, err := parseArgs([]string{"-h"}, &usage); err == nil {
		t.Fatal("-h: want flag.ErrHelp, have nil")
	}
	n := 0
	for _, l := range strings.Split(usage.String(), "\n") {
		if !strings.HasPrefix(l, "  -") {
			continue
		}
		name := strings.Fields(l)[0]
		n++
		if !strings.Contains(string(doc), "`"+name) && !strings.Contains(string(doc), "`-"+name) {
			t.Errorf("flag %s: want it in docs/SIPLOAD.md, have none", name)
		}
	}
	if n < 20 {
		t.Errorf("want the usage to list at least 20 flags, have %d", n)
	}
	if !strings.Contains(usage.String(), "\n  -key NAME VALUE\n") {
		t.Errorf("want -key NAME VALUE in the usage, have\n%s", usage.String())
	}
}
