package supervisor

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/config"
)

// examples/sipvisor.service stops gracefully and reloads by upgrade: systemd
// signals the supervisor alone and waits longer than the drain, hears
// READY=1 and MAINPID= from the supervisor (Type=notify, NotifyAccess=all,
// as an upgraded process is not the main one when it speaks), and systemctl
// reload runs ctl upgrade; its command lines are ones sipvisor accepts.
// systemd-analyze verifies it where it is installed.
func TestSystemdUnit(t *testing.T) {
	t.Parallel()
	const unit = "../examples/sipvisor.service"
	text := readFile(t, unit)
	keys := map[string][]string{}
	for _, l := range strings.Split(text, "\n") {
		if k, v, ok := strings.Cut(strings.TrimSpace(l), "="); ok && !strings.HasPrefix(l, "#") {
			keys[k] = append(keys[k], v)
		}
	}
	one := func(k string) string {
		if len(keys[k]) != 1 {
			t.Fatalf("%s: want one %s=, have %q", unit, k, keys[k])
		}
		return keys[k][0]
	}
	stop, err := time.ParseDuration(one("TimeoutStopSec"))
	if err != nil {
		t.Fatal(err)
	}
	if drain := config.Default().Workers.DrainTimeout; stop < drain+10*time.Second {
		t.Errorf("TimeoutStopSec=%v: want at least worker_drain_timeout (%v) plus 10 s, so that calls in progress finish", stop, drain)
	}
	if k := one("KillMode"); k != "mixed" {
		t.Errorf("KillMode=%s: want mixed, so that SIGTERM goes to the supervisor alone and workers drain", k)
	}
	if r := one("ExecReload"); r != "/usr/local/bin/sipvisor ctl upgrade" {
		t.Errorf("ExecReload=%s: want /usr/local/bin/sipvisor ctl upgrade", r)
	}
	if ty, na := one("Type"), one("NotifyAccess"); ty != "notify" || na != "all" {
		t.Errorf("Type=%s NotifyAccess=%s: want notify and all, so that the upgraded process's MAINPID= is heard", ty, na)
	}

	// The command lines parse: the check and the run flags, and ctl's.
	cfg := filepath.Join(t.TempDir(), "sipvisor.cfg")
	if err := os.WriteFile(cfg, []byte(config.DefaultText), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"ExecStartPre", "ExecStart"} {
		for _, line := range keys[k] {
			f := strings.Fields(strings.TrimPrefix(line, "-"))
			if f[0] != "/usr/local/bin/sipvisor" {
				continue
			}
			args := append([]string{"-c"}, f[1:]...)
			for i, a := range args {
				if a == "/etc/sipvisor/sipvisor.cfg" {
					args[i] = cfg
				}
			}
			var out bytes.Buffer
			if code := Main(context.Background(), dedupe(args), &out, &out); code != 0 {
				t.Errorf("%s=%s: sipvisor %v exits %d: %s", k, line, args, code, out.String())
			}
		}
	}
	// ctl parses the reload line: with nothing listening it says where it
	// could not reach, not that the command is unknown.
	reload := strings.Fields(one("ExecReload"))
	var out bytes.Buffer
	args := append([]string{"ctl", "-addr", "127.0.0.1:1"}, reload[2:]...)
	if code := Main(context.Background(), args, &out, &out); code != 1 || !strings.Contains(out.String(), "cannot reach") {
		t.Errorf("ExecReload: want ctl upgrade to try 127.0.0.1:1 and give up (exit 1), have exit %d: %s", code, out.String())
	}

	if _, err := exec.LookPath("systemd-analyze"); err != nil {
		t.Skip("systemd-analyze not installed: the unit's syntax is not verified (apt-get install systemd)")
	}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	unitCopy := filepath.Join(t.TempDir(), "sipvisor.service")
	if err := os.WriteFile(unitCopy, []byte(strings.ReplaceAll(text, "/usr/local/bin/sipvisor", exe)), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("systemd-analyze", "verify", unitCopy).CombinedOutput(); err != nil || len(bytes.TrimSpace(out)) > 0 {
		t.Errorf("systemd-analyze verify: %v\n%s", err, out)
	}
}

// dedupe drops a second -c, for the ExecStartPre line that has its own.
func dedupe(args []string) []string {
	var out []string
	seen := false
	for _, a := range args {
		if a == "-c" {
			if seen {
				continue
			}
			seen = true
		}
		out = append(out, a)
	}
	return out
}
