package overload

import (
	"bufio"
	"net/http"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

const alertRules = "../../examples/sipvisor-alerts.yml"

// profileOnly are the series the rules read that only a group with a
// scaling profile has, and why their absence elsewhere loses no event:
// they are gauges compared, not counters increased.
var profileOnly = map[string]string{
	"sipvisor_profile_max_workers": "a group without a profile has no maximum to reach",
}

// selector is one series the rules read: a metric and the label values it
// must have (an alternative of a =~ matcher each).
type selector struct {
	name   string
	labels [][2]string
}

func (s selector) String() string {
	var b strings.Builder
	b.WriteString(s.name)
	for _, l := range s.labels {
		b.WriteString(" " + l[0] + "=" + l[1])
	}
	return b.String()
}

// ruleSelectors reads the series the alerting rules read: every metric
// name, and for each selector with matchers, one series per value (each
// alternative of a regular expression made of plain words and |).
func ruleSelectors(t *testing.T) []selector {
	t.Helper()
	b, err := os.ReadFile(alertRules)
	if err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	var out []selector
	add := func(s selector) {
		if !seen[s.String()] {
			seen[s.String()] = true
			out = append(out, s)
		}
	}
	matcher := regexp.MustCompile(`(\w+)\s*(=~|=)\s*"([^"]*)"`)
	for _, m := range regexp.MustCompile(`(sipvisor_[a-z0-9_]+)(\{[^}]*\})?`).FindAllStringSubmatch(string(b), -1) {
		add(selector{name: m[1]})
		for _, lm := range matcher.FindAllStringSubmatch(m[2], -1) {
			vals := []string{lm[3]}
			if lm[2] == "=~" {
				if !regexp.MustCompile(`^[\w|]+$`).MatchString(lm[3]) {
					t.Fatalf("%s: matcher %s is more than alternatives of words; teach this test to read it", alertRules, lm[0])
				}
				vals = strings.Split(lm[3], "|")
			}
			for _, v := range vals {
				add(selector{name: m[1], labels: [][2]string{{lm[1], v}}})
			}
		}
	}
	if len(out) < 10 {
		t.Fatalf("want the rules to name the series they read, have %v", out)
	}
	return out
}

// series is every sample line of /metrics: name, then its labels.
func series(t *testing.T, s *harness.Server) map[string][]string {
	t.Helper()
	resp, err := http.Get("http://" + s.HTTP + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		name, rest, _ := strings.Cut(line, "{")
		if i := strings.IndexByte(name, ' '); i >= 0 {
			name, rest = name[:i], ""
		}
		out[name] = append(out[name], rest)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return out
}

func (s selector) in(have map[string][]string) bool {
	for _, labels := range have[s.name] {
		ok := true
		for _, l := range s.labels {
			if !strings.Contains(labels, l[0]+`="`+l[1]+`"`) {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// Every series the shipped alerting rules read is on /metrics of a server
// just started, before any event: a counter whose series is born with its
// first event (a worker's crash, a refused registration) hides that event
// from increase(), and the alert would miss it. Both with and without a
// scaling profile; a profile's own gauges are there with one only.
func TestAlertSeriesExistFromStart(t *testing.T) {
	t.Parallel()
	sels := ruleSelectors(t)
	base := harness.Sockets0 + `
auto_scaling_cycle = 0.5
%s
route { exit; }
`
	for _, tc := range []struct {
		name, groups string
		profile      bool
	}{
		{name: "fixed groups", groups: "udp_workers = 1\ntcp_workers = 1\n"},
		{name: "scaling profiles", profile: true, groups: "auto_scaling_profile = P scale up to 3 on 70% for 2 cycles within 3\n" +
			"udp_workers = 1 use_auto_scaling_profile P\ntcp_workers = 1 use_auto_scaling_profile P\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := harness.Start(t, strings.Replace(base, "%s", tc.groups, 1))
			have := series(t, s)
			var missing, extra []string
			for _, sel := range sels {
				_, only := profileOnly[sel.name]
				switch in := sel.in(have); {
				case !in && (tc.profile || !only):
					missing = append(missing, sel.String())
				case in && only && !tc.profile:
					extra = append(extra, sel.String()+" ("+profileOnly[sel.name]+")")
				}
			}
			sort.Strings(missing)
			if len(missing) > 0 {
				t.Errorf("series the rules read that a server just started does not export:\n  %s", strings.Join(missing, "\n  "))
			}
			if len(extra) > 0 {
				t.Errorf("series exported without a profile: %v", extra)
			}
		})
	}
}
