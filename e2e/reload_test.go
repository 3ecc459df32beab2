package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A reload applies what changed in the file: a watermark (the server
// suspends), a limit (a second registration is refused), the throttle's
// threshold and auto_scaling_cycle (cycles come faster); ctl get shows
// each. A socket added to the file is reported, with its FILE:LINE, as
// taking a restart, in ctl reload's answer and in the log, while the rest
// applies. A SIGHUP does the same.
func TestReloadAppliesSettings(t *testing.T) {
	sip, other := freePort(t), freePort(t)
	base := withoutAuth(t, defaultCfgOn(t, sip))
	before := "auto_scaling_cycle = 1\nthrottle_rtt_threshold = 1s\n"
	s := startServer(t, strings.Replace(base, "route {", before+"route {", 1))
	base = strings.ReplaceAll(base, "127.0.0.1:HTTP_PORT", s.http)
	file := s.cmd.Args[len(s.cmd.Args)-1]
	so := ovServer{s}

	get := func(path string) string {
		t.Helper()
		out, err := s.ctl("get", path)
		if err != nil {
			t.Fatalf("ctl get %s: %v: %s", path, err, out)
		}
		return strings.TrimSpace(out)
	}
	for path, want := range map[string]string{
		"suspend_watermarks/system_memory_usage/high": "85", "limits/max_registrations": "0",
		"throttle/rtt_threshold": "1", "auto_scaling/cycle": "1",
	} {
		if have := get(path); have != path+" = "+want {
			t.Fatalf("before the reload: want %s = %s, have %q", path, want, have)
		}
	}
	out, err := s.ctl("set", "limits/max_calls", "10")
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
	cycles0 := s.metric("sipvisor_supervisor_cycle_duration_seconds_count")
	out, err = s.ctl("reload")
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
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(s.log.String(), logAt) {
		if time.Now().After(deadline) {
			t.Fatalf("want the log to name %q, have\n%s", logAt, tail(s.log.String(), 20))
		}
		time.Sleep(20 * time.Millisecond)
	}

	for path, want := range map[string]string{
		"suspend_watermarks/system_memory_usage/high": "1", "limits/max_registrations": "1",
		"limits/max_calls": "0", "throttle/rtt_threshold": "0.3", "auto_scaling/cycle": "0.1",
	} {
		if have := get(path); have != path+" = "+want {
			t.Errorf("after the reload: want %s = %s, have %q", path, want, have)
		}
	}
	// Behaviour. Cycles: ten within a few seconds, which one a second
	// would take ten seconds for.
	deadline = time.Now().Add(5 * time.Second)
	for s.metric("sipvisor_supervisor_cycle_duration_seconds_count") < cycles0+10 {
		if time.Now().After(deadline) {
			t.Fatalf("want cycles every 100ms after the reload, have %v in 5s", s.metric("sipvisor_supervisor_cycle_duration_seconds_count")-cycles0)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The throttle of each group weighs the new threshold.
	for _, th := range so.stats().Throttle {
		if th.ThresholdSeconds != 0.3 {
			t.Errorf("group %s: want the throttle's threshold 0.3 s, have %v", th.Group, th.ThresholdSeconds)
		}
	}
	// System memory is over 1%: suspended, new sessions and probes refused.
	so.awaitSuspended(true)
	ua := newOvUA(t, sip)
	ovWantRefused(t, "REGISTER while suspended", ua.register(ovID(), 1))

	// SIGHUP: the watermark back, the limit stays: one registration, and a
	// second refused.
	text = strings.Replace(text, "suspend_system_memory_usage_high = 1\nsuspend_system_memory_usage_low = 0\n", "", 1)
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	s.cmd.Process.Signal(syscall.SIGHUP)
	so.awaitSuspended(false)
	if m := ua.register(ovID(), 1); m.code != 200 {
		t.Fatalf("want the first registration admitted, have %d\n%s", m.code, m.raw)
	}
	// Registrations are counted once a cycle.
	deadline = time.Now().Add(5 * time.Second)
	for so.stats().Counters["registrations"] < 1 {
		if time.Now().After(deadline) {
			t.Fatal("want the registration counted")
		}
		time.Sleep(20 * time.Millisecond)
	}
	ua2 := newOvUA(t, sip)
	// Another binding would be a second registration: over max_registrations.
	id := ovID()
	ua2.send("REGISTER", "sip:example.com", id, 1, "<sip:bob@example.com>", "Expires: 3600")
	ovWantRefused(t, "a second registration over max_registrations = 1", ua2.final(id, "REGISTER"))
}
