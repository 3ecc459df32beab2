package lifecycle

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// A reload applies what changed in the file: a watermark (the server
// suspends), a limit (a second registration is refused), the throttle's
// threshold and auto_scaling_cycle (cycles come faster); ctl get shows
// each. A socket added to the file is reported, with its FILE:LINE, as
// taking a restart, in ctl reload's answer and in the log, while the rest
// applies. A SIGHUP does the same.
func TestReloadAppliesSettings(t *testing.T) {
	t.Parallel()
	// The socket the reload adds is never bound: a reload says that a new
	// socket takes a restart.
	const other = 5999
	base := harness.WithoutAuth(t, harness.DefaultCfg0(t))
	before := "auto_scaling_cycle = 1\nthrottle_rtt_threshold = 1s\n"
	s := harness.Start(t, strings.Replace(base, "route {", before+"route {", 1))
	file := s.ConfigPath()

	get := func(path string) string {
		t.Helper()
		out, err := s.Ctl("get", path)
		if err != nil {
			t.Fatalf("ctl get %s: %v: %s", path, err, out)
		}
		return strings.TrimSpace(out)
	}
	for path, want := range map[string]string{
		"suspend_watermarks/system_memory_usage/high": "85", "limits/max_registrations": "0",
		"throttle/rtt_threshold": "1s", "auto_scaling/cycle": "1s",
	} {
		if have := get(path); have != path+" = "+want {
			t.Fatalf("before the reload: want %s = %s, have %q", path, want, have)
		}
	}
	out, err := s.Ctl("set", "limits/max_calls", "10")
	if err != nil || !strings.Contains(out, "until the next restart or reload; to keep it, set max_calls in the config file") {
		t.Fatalf("ctl set: want the note on how long it lasts, have %v: %s", err, out)
	}

	// The socket line goes in as the file's third line.
	text := strings.Replace(base, "socket = tcp:", "socket = udp:127.0.0.1:"+strconv.Itoa(other)+"\nsocket = tcp:", 1)
	after := "auto_scaling_cycle = 0.1\nthrottle_rtt_threshold = 300ms\nmax_registrations = 1\n" +
		"suspend_system_memory_usage_high = 1\nsuspend_system_memory_usage_low = 0\n"
	text = strings.Replace(text, "route {", after+"route {", 1)
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	line := 0
	for i, l := range strings.Split(text, "\n") {
		if strings.HasPrefix(l, "socket = udp:127.0.0.1:"+strconv.Itoa(other)) {
			line = i + 1
		}
	}
	cycles0 := s.Metric("sipvisor_supervisor_cycle_duration_seconds_count")
	out, err = s.Ctl("reload")
	if err != nil {
		t.Fatalf("ctl reload: %v: %s", err, out)
	}
	at := filepath.Base(file) + ":" + strconv.Itoa(line) + ": socket udp:127.0.0.1:" + strconv.Itoa(other) + " added"
	if !strings.Contains(out, at) {
		t.Fatalf("ctl reload: want %q among the lines that take a restart, have\n%s", at, out)
	}
	for _, name := range []string{"auto_scaling_cycle", "suspend_system_memory_usage_high", "throttle_rtt_threshold", "max_calls", "max_registrations"} {
		if !strings.Contains(out, name) {
			t.Errorf("ctl reload: want %s among the changed settings, have\n%s", name, out)
		}
	}
	logAt := "at=" + file + ":" + strconv.Itoa(line) + ` change="socket udp:127.0.0.1:` + strconv.Itoa(other) + " added"
	s.WaitLog(logAt, 10*time.Second)

	for path, want := range map[string]string{
		"suspend_watermarks/system_memory_usage/high": "1", "limits/max_registrations": "1",
		"limits/max_calls": "0", "throttle/rtt_threshold": "300ms", "auto_scaling/cycle": "100ms",
	} {
		if have := get(path); have != path+" = "+want {
			t.Errorf("after the reload: want %s = %s, have %q", path, want, have)
		}
	}
	// Behaviour. Cycles: twenty within ten seconds, which one a second
	// would take twenty seconds for.
	s.AwaitMetricAtLeast(cycles0+20, 10*time.Second, "sipvisor_supervisor_cycle_duration_seconds_count")
	// The throttle of each group weighs the new threshold.
	for _, th := range s.Stats().Throttle {
		if th.ThresholdSeconds != 0.3 {
			t.Errorf("group %s: want the throttle's threshold 0.3 s, have %v", th.Group, th.ThresholdSeconds)
		}
	}
	// System memory is over 1%: suspended, new sessions and probes refused.
	s.AwaitSuspended(true)
	ua := harness.NewUA(t, s.SIPPort("udp"))
	harness.WantRefused(t, "REGISTER while suspended", ua.Register(harness.NewID(), 1))

	// SIGHUP: the watermark back, the limit stays: one registration, and a
	// second refused.
	text = strings.Replace(text, "suspend_system_memory_usage_high = 1\nsuspend_system_memory_usage_low = 0\n", "", 1)
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	s.Cmd.Process.Signal(syscall.SIGHUP)
	s.AwaitSuspended(false)
	if m := ua.Register(harness.NewID(), 1); m.Code != 200 {
		t.Fatalf("want the first registration admitted, have %d\n%s", m.Code, m.Raw)
	}
	// Registrations are counted once a cycle.
	harness.WaitFor(t, "the registration counted", 5*time.Second, func() bool { return s.Stats().Counters["registrations"] >= 1 })
	ua2 := harness.NewUA(t, s.SIPPort("udp"))
	// Another binding would be a second registration: over max_registrations.
	id := harness.NewID()
	ua2.Send("REGISTER", "sip:example.com", id, 1, "<sip:bob@example.com>", "Expires: 3600")
	harness.WantRefused(t, "a second registration over max_registrations = 1", ua2.Final(id, "REGISTER"))
}
