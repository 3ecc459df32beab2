package ctl

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// ctl runs Main against srv's address and returns its exit code and output.
func ctl(t *testing.T, addr string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out, errb bytes.Buffer
	code := Main(ctx, append([]string{"-addr", addr}, args...), &out, &errb)
	return code, out.String(), errb.String()
}

// Not parallel: it sets the package's clock.
func TestMainGolden(t *testing.T) {
	defer func(f func() time.Time) { now = f }(now)
	now = func() time.Time { return testNow }
	suspend := func(b *testBackend) { b.Suspend() }
	tests := []struct {
		name string
		args []string
		prep func(*testBackend)
	}{
		{"ps", []string{"ps"}, nil},
		{"sockets", []string{"sockets"}, nil},
		{"sockets_json", []string{"sockets", "--json"}, nil},
		{"stats", []string{"stats"}, nil},
		{"get_leaf", []string{"get", memHigh}, nil},
		{"get_subtree", []string{"get", "suspend_watermarks"}, nil},
		{"get_all", []string{"get"}, nil},
		{"set", []string{"set", memHigh, "90"}, nil},
		{"set_bool", []string{"set", "throttle/enable", "off"}, nil},
		{"suspend", []string{"suspend"}, nil},
		{"resume", []string{"resume"}, suspend},
		{"stats_suspended", []string{"stats"}, suspend},
		{"resource_monitor", []string{"resource-monitor"}, nil},
		{"reload", []string{"reload"}, nil},
		{"ul_show", []string{"ul", "show"}, nil},
		{"ul_show_aor", []string{"ul", "show", "sip:alice@example.com"}, nil},
		{"ul_show_none", []string{"ul", "show", "sip:carol@example.com"}, nil},
		{"ps_json", []string{"ps", "--json"}, nil},
		{"bans", []string{"bans"}, nil},
		{"ban_rm", []string{"ban", "rm", "192.0.2.1"}, nil},
		{"unban", []string{"unban", "192.0.2.1"}, nil},
		{"get_json", []string{"-json", "get", "suspend_watermarks/system_memory_usage"}, nil},
		{"set_duration", []string{"set", "throttle/rtt_threshold", "1500ms"}, nil},
		{"get_duration_json", []string{"get", "throttle/rtt_threshold", "--json"}, nil},
		{"get_flags_after", []string{"get", "throttle", "-timeout", "5s", "-json"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTestBackend()
			srv := serve(t, b, "")
			if tt.prep != nil {
				tt.prep(b)
			}
			code, out, errs := ctl(t, srv.URL, tt.args...)
			if code != 0 || errs != "" {
				t.Fatalf("exit: want 0, have %v (%s)", code, errs)
			}
			golden(t, tt.name, out)
		})
	}
}

func golden(t *testing.T, name, have string) {
	t.Helper()
	file := filepath.Join("testdata", name+".golden")
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(file, []byte(have), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if have != string(want) {
		t.Fatalf("output differs from %s:\nwant:\n%s\nhave:\n%s", file, want, have)
	}
}

// TestMainPSJSON checks what scripts rely on: every worker's pid.
func TestMainPSJSON(t *testing.T) {
	t.Parallel()
	srv := serve(t, newTestBackend(), "")
	code, out, _ := ctl(t, srv.URL, "ps", "--json")
	var gs []Group
	if err := json.Unmarshal([]byte(out), &gs); err != nil || code != 0 {
		t.Fatalf("want JSON and exit 0, have %v %v: %s", code, err, out)
	}
	var pids []int
	for _, g := range gs {
		for _, w := range g.Workers {
			pids = append(pids, w.Pid)
		}
	}
	if want := []int{4101, 4102, 4377, 4103}; !equalInts(pids, want) {
		t.Fatalf("pids: want %v, have %v", want, pids)
	}
	if age := gs[0].Workers[0].Age; age != 2*time.Hour+5*time.Minute {
		t.Fatalf("age: want 2h5m0s, have %v", age)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func TestMainErrors(t *testing.T) {
	t.Parallel()
	const token = "t0ken"
	tests := []struct {
		name  string
		args  []string
		token bool // send the right token
		code  int
		err   string // substring of stderr
	}{
		{"no command", nil, true, 2, "no command given"},
		{"unknown command", []string{"stat"}, true, 2, `unknown command "stat" (did you mean "stats"?)`},
		{"get two args", []string{"get", "a", "b"}, true, 2, "get: want get [PATH]"},
		{"set one arg", []string{"set", memHigh}, true, 2, "set: want set PATH VALUE"},
		{"set empty path", []string{"set", "/", "1"}, true, 2, "set: PATH is empty"},
		{"ps with arg", []string{"ps", "x"}, true, 2, "ps: want no arguments"},
		{"ul without show", []string{"ul"}, true, 2, "ul: want ul show [AOR] or ul rm AOR [CONTACT]"},
		{"bad flag", []string{"-bogus", "ps"}, true, 2, "flag provided but not defined: -bogus"},
		{"flag after without value", []string{"wait-ready", "-timeout"}, true, 2, "flag needs an argument: -timeout"},
		{"flag after with bad value", []string{"wait-ready", "--timeout=soon"}, true, 2, `invalid value "soon" for flag -timeout`},
		{"unknown path", []string{"set", "suspend_watermarks/system_memory_usage/hgh", "90"}, true, 1, `did you mean "` + memHigh + `"?`},
		{"bad value", []string{"set", memHigh, "ninety"}, true, 1, memHigh + `: "ninety" is not a number`},
		{"negative count", []string{"set", "suspend_watermarks/number_of_sessions/low", "-5"}, true, 1, "count must be 0 or more, not -5"},
		{"low over high", []string{"set", "suspend_watermarks/system_memory_usage/low", "90"}, true, 1, "low watermark 90 must be under high watermark 85"},
		{"prefix", []string{"set", "suspend_watermarks", "90"}, true, 1, "is a group of settings"},
		{"no token", []string{"set", memHigh, "90"}, false, 1, "refused the token"},
		{"resume not suspended", []string{"resume"}, true, 1, "resume: not suspended by the operator"},
		{"reload fails", []string{"reload"}, true, 1, "reload: test.cfg:3:1: unknown setting"},
		{"ban without rm", []string{"ban", "192.0.2.1"}, true, 2, "ban: want ban rm ADDR"},
		{"unban not banned", []string{"unban", "192.0.2.2"}, true, 1, "192.0.2.2 is not banned"},
		{"unban no address", []string{"unban", "bogus"}, true, 1, "ban rm: not an address"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTestBackend()
			b.reloadErr = errors.New("test.cfg:3:1: unknown setting")
			srv := serve(t, b, token)
			args := tt.args
			if tt.token {
				args = append([]string{"-token", token}, args...)
			}
			code, out, errs := ctl(t, srv.URL, args...)
			if code != tt.code {
				t.Errorf("exit: want %v, have %v", tt.code, code)
			}
			if !strings.Contains(errs, tt.err) {
				t.Errorf("stderr: want %q in it, have %q", tt.err, errs)
			}
			if out != "" {
				t.Errorf("stdout: want nothing, have %q", out)
			}
			if v, _ := b.Params().Get(memHigh); v != 85.0 {
				t.Errorf("%s: want 85, have %v", memHigh, v)
			}
			if v, _ := b.Params().Get("suspend_watermarks/system_memory_usage/low"); v != 70.0 {
				t.Errorf("low: want 70, have %v", v)
			}
		})
	}
}

func TestMainConnectionRefused(t *testing.T) {
	t.Parallel()
	// A port that was just free: listen, note it, close.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	code, _, errs := ctl(t, addr, "ps")
	if code != 1 {
		t.Errorf("exit: want 1, have %v", code)
	}
	if want := "cannot reach http://" + addr + ": connection refused"; !strings.Contains(errs, want) {
		t.Errorf("stderr: want %q in it, have %q", want, errs)
	}
}

func TestMainEnvironment(t *testing.T) {
	srv := serve(t, newTestBackend(), "envtoken")
	t.Setenv("SIPVISOR_CTL_ADDR", strings.TrimPrefix(srv.URL, "http://"))
	t.Setenv("SIPVISOR_CTL_TOKEN", "envtoken")
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if code := Main(ctx, []string{"get", memHigh}, &out, &errb); code != 0 || out.String() != memHigh+" = 85\n" {
		t.Fatalf("want exit 0 and the value, have %v %q %q", code, out.String(), errb.String())
	}
}

func TestMainBadAddr(t *testing.T) {
	t.Parallel()
	for _, addr := range []string{"ftp://127.0.0.1:1", "http://", "http://[::1"} {
		code, _, errs := ctl(t, addr, "ps")
		if code != 2 || !strings.Contains(errs, "-addr") {
			t.Errorf("%s: want exit 2 naming -addr, have %v %q", addr, code, errs)
		}
	}
}

func TestMainHelp(t *testing.T) {
	t.Parallel()
	var out, errb bytes.Buffer
	if code := Main(context.Background(), []string{"-h"}, &out, &errb); code != 0 || !strings.Contains(out.String(), "resource-monitor") {
		t.Fatalf("want usage and exit 0, have %v %q", code, out.String())
	}
}

// TestUsageListsEachCommandOnce reads the commands of the usage text: each
// is listed once.
func TestUsageListsEachCommandOnce(t *testing.T) {
	t.Parallel()
	_, cmds, _ := strings.Cut(usage, "commands:\n")
	cmds, _, _ = strings.Cut(cmds, "\nflags:")
	seen := map[string]bool{}
	for _, line := range strings.Split(cmds, "\n") {
		if !strings.HasPrefix(line, "  ") || strings.HasPrefix(line, "   ") {
			continue // a continuation line
		}
		cmd, _, _ := strings.Cut(strings.TrimSpace(line), "  ")
		if seen[cmd] {
			t.Errorf("usage lists %q twice", cmd)
		}
		seen[cmd] = true
	}
	if len(seen) < 10 {
		t.Errorf("want the commands read from the usage, have %v", seen)
	}
}
