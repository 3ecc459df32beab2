package supervisor

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/sipvisor/sipvisor/internal/testkit"
)

const (
	alertRules = "../examples/sipvisor-alerts.yml"
	alertTests = "../examples/sipvisor-alerts.test.yml"
)

// promtool finds promtool (Debian's prometheus package ships it). Outside
// CI a machine without it skips; under CI it must be there (.ci/run
// installs it).
func promtool(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "" {
			t.Skip("promtool not installed (apt-get install -y prometheus); CI runs this")
		}
		t.Fatal("promtool not installed, and CI needs it: .ci/run installs the prometheus package")
	}
	return p
}

// The alerting rules pass promtool's checks and their unit tests, and every
// alert has a test case in which it fires.
func TestAlertRulesPromtool(t *testing.T) {
	t.Parallel()
	bin := promtool(t)
	for _, args := range [][]string{{"check", "rules", filepath.Base(alertRules)}, {"test", "rules", filepath.Base(alertTests)}} {
		cmd := exec.Command(bin, args...)
		cmd.Dir = filepath.Dir(alertRules)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	rules, tests := readFile(t, alertRules), readFile(t, alertTests)
	firing := map[string]bool{}
	var current string
	for _, l := range strings.Split(tests, "\n") {
		l = strings.TrimSpace(l)
		if name, ok := strings.CutPrefix(l, "alertname:"); ok {
			current = strings.TrimSpace(name)
		}
		if strings.HasPrefix(l, "- exp_labels:") && current != "" {
			firing[current] = true
		}
	}
	for _, m := range regexp.MustCompile(`(?m)^\s*- alert: (\S+)`).FindAllStringSubmatch(rules, -1) {
		if !firing[m[1]] {
			t.Errorf("alert %s has no test case in which it fires in %s", m[1], alertTests)
		}
	}
}

// Every metric the rules name, in expressions and annotations, is one
// that a running supervisor exports.
func TestAlertRulesNameRealMetrics(t *testing.T) {
	t.Parallel()
	st := startSupervisor(t, cfgf(`
socket = udp:127.0.0.1:0
socket = tcp:127.0.0.1:0
http_listen = 127.0.0.1:0
auto_scaling_cycle = 0.1
echo_interval = 0.1
auto_scaling_profile = P scale up to 3 on 70%% for 2 cycles within 3
udp_workers = 2 use_auto_scaling_profile P
route { exit; }
`), costWorker(0), nil)
	names := func() map[string]bool {
		st.s.healthy() // the flip counts are published when health is asked
		out := map[string]bool{}
		for _, mf := range mustGather(t, st.s) {
			out[mf.GetName()] = true
		}
		return out
	}
	testkit.WaitFor(t, patience, "a sampled group", func() bool {
		n := names()
		return n["sipvisor_profile_max_workers"] && n["sipvisor_overload_throttle_refused_ratio"] && n["sipvisor_overload_echo_rtt_seconds"]
	})
	// No worker has exited: the exits counter is there at 0 all the same
	// (e2e/overload TestAlertSeriesExistFromStart checks every series the
	// rules read, on a server just started).
	have := names()
	used := map[string]bool{}
	for _, m := range regexp.MustCompile(`sipvisor_[a-z0-9_]+`).FindAllString(readFile(t, alertRules), -1) {
		used[m] = true
	}
	var missing []string
	for m := range used {
		if !have[m] {
			missing = append(missing, m)
		}
	}
	sort.Strings(missing)
	if len(missing) > 0 {
		t.Fatalf("%s names metrics sipvisor does not export: %v", alertRules, missing)
	}
	if len(used) < 6 {
		t.Fatalf("want the rules to name the metrics they use, have %v", used)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}
