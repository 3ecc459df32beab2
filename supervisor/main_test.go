package supervisor

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func runMain(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = Main(context.Background(), args, &o, &e)
	return code, o.String(), e.String()
}

// The scaling lines of the OpenSIPS blog post, pasted unchanged with a
// socket (examples/scaling.cfg), pass the check.
func TestCheckAcceptsSeedScalingLines(t *testing.T) {
	t.Parallel()
	code, out, errs := runMain("-c", "-f", "../examples/scaling.cfg")
	if code != 0 || strings.TrimSpace(out) != "ok" {
		t.Fatalf("want ok and exit 0, have %q %q exit %d", out, errs, code)
	}
	src, _ := os.ReadFile("../examples/scaling.cfg")
	for _, line := range []string{
		"auto_scaling_profile = PROFILE_A",
		"     scale up to 6 on 70% for 4 cycles within 5",
		"     scale down to 2 on 18% for 10 cycles",
	} {
		if !bytes.Contains(src, []byte(line)) {
			t.Errorf("examples/scaling.cfg lacks the seed's line %q", line)
		}
	}
}

// Every problem is printed as FILE:LINE:COL: message, and the check fails.
func TestCheckPrintsPositionedErrors(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "bad.cfg")
	os.WriteFile(path, []byte("socket = udp:127.0.0.1:5060\nudp_workerz = 2\nauto_scaling_profile = P scale up to 1000 on 70% for 4 cycles\nroute { exit; }\n"), 0o644)
	code, out, errs := runMain("-c", "-f", path)
	if code != 1 || out != "" {
		t.Fatalf("want exit 1 and nothing on stdout, have %d %q", code, out)
	}
	for _, want := range []string{path + ":2:1: ", "udp_workers", path + ":3:"} {
		if !strings.Contains(errs, want) {
			t.Errorf("want %q in the errors, have:\n%s", want, errs)
		}
	}
}

func TestCommandLine(t *testing.T) {
	t.Parallel()
	if code, out, _ := runMain("-print-default-config"); code != 0 || !strings.Contains(out, "route {") {
		t.Errorf("-print-default-config: want the built-in config, have exit %d", code)
	}
	if code, out, _ := runMain("version"); code != 0 || !strings.HasPrefix(out, "sipvisor ") {
		t.Errorf("version: have %q exit %d", out, code)
	}
	if code, _, errs := runMain("-h"); code != 0 || !strings.Contains(errs, "Usage:") {
		t.Errorf("-h: want usage and exit 0, have %d", code)
	}
	if code, _, errs := runMain("-nosuchflag"); code != 2 || !strings.Contains(errs, "nosuchflag") {
		t.Errorf("bad flag: want exit 2 naming it, have %d %q", code, errs)
	}
	if code, _, errs := runMain("stray"); code != 2 || !strings.Contains(errs, "stray") {
		t.Errorf("stray argument: want exit 2 naming it, have %d %q", code, errs)
	}
	if code, _, errs := runMain("-f", "/nonexistent/x.cfg"); code != 1 || !strings.Contains(errs, "/nonexistent/x.cfg") {
		t.Errorf("missing file: want exit 1 naming it, have %d %q", code, errs)
	}
	if code, _, errs := runMain("-log-format", "xml"); code != 2 || !strings.Contains(errs, "-log-format") {
		t.Errorf("bad log format: want exit 2 naming the flag, have %d %q", code, errs)
	}
}

// A Kamailio config's first lines, checked: every mistake comes out at
// once, one FILE:LINE:COL: message a line, in the config's words.
func TestCheckKamailioStyleConfig(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "kamailio.cfg")
	src := "#!KAMAILIO\nloadmodule \"tm.so\"\nchildren=4\nsocket = udp:127.0.0.1:5060\n" +
		"request_route {\n\tif (!mf_process_maxfwd_header(\"10\")) {\n\t\tsl_send_reply(\"483\", \"Too Many Hops\");\n\t\texit;\n\t}\n" +
		"\tif (is_method(\"INVITE\") {\n\t\tt_relay()\n\t\texit;\n\t}\n}\n"
	os.WriteFile(path, []byte(src), 0o644)
	code, out, errs := runMain("-c", "-f", path)
	if code != 1 || out != "" {
		t.Fatalf("want exit 1 and nothing on stdout, have %d %q", code, out)
	}
	want := []string{
		path + ":2:1: sipvisor has no modules to load",
		path + ":3:1: unknown setting \"children\": sipvisor calls it udp_workers",
		path + ":5:1: request_route is written route here",
		path + ":10:26: missing \")\" to close the \"(\" at 10:5",
		path + ":11:12: missing \";\" at the end of the statement",
	}
	lines := strings.Split(strings.TrimSpace(errs), "\n")
	if len(lines) != len(want) {
		t.Fatalf("want %d lines, have:\n%s", len(want), errs)
	}
	for i, w := range want {
		if !strings.HasPrefix(lines[i], w) {
			t.Errorf("line %d: want %q..., have %q", i+1, w, lines[i])
		}
	}
}
