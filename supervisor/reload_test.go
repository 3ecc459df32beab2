package supervisor

import (
	"reflect"
	"strings"
	"testing"

	"github.com/sipvisor/sipvisor/config"
)

const reloadBase = `socket = udp:127.0.0.1:5060
socket = tcp:127.0.0.1:5060
http_listen = 127.0.0.1:8888
auto_scaling_profile = P scale up to 4 on 70% for 2 cycles within 3
udp_workers = 2 use_auto_scaling_profile P
suspend_system_memory_usage_high = 85
max_calls = 100
route { exit; }
`

func loadText(t *testing.T, name, text string) *config.Config {
	t.Helper()
	c, err := config.Load(name, []byte(text))
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return c
}

func TestPlanReload(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name    string
		edit    func(string) string
		inForce func(*config.Config) // what ctl set changed in the running config
		changed []string
		restart []string // FILE:LINE: and a fragment of the message
	}{
		{name: "same file", edit: func(s string) string { return s }},
		{name: "watermark, limit, throttle, cycle, echo, flip threshold",
			edit: func(s string) string {
				s = strings.Replace(s, "suspend_system_memory_usage_high = 85", "suspend_system_memory_usage_high = 95", 1)
				s = strings.Replace(s, "max_calls = 100", "max_calls = 7", 1)
				return strings.Replace(s, "route {", "throttle_rtt_threshold = 300ms\nauto_scaling_cycle = 0.5\necho_interval = 2s\nflip_threshold = 3\nroute {", 1)
			},
			changed: []string{"auto_scaling_cycle", "suspend_system_memory_usage_high", "throttle_rtt_threshold", "echo_interval", "max_calls", "flip_threshold"}},
		{name: "a setting left out goes back to its default",
			edit:    func(s string) string { return strings.Replace(s, "max_calls = 100\n", "", 1) },
			changed: []string{"max_calls"}},
		{name: "a value set by ctl gives way to the file's",
			edit:    func(s string) string { return s },
			inForce: func(c *config.Config) { c.Limits.MaxCalls = 5; c.Suspend.HeapUsage.High = 99 },
			changed: []string{"suspend_heap_usage_high", "max_calls"}},
		{name: "a profile changes live",
			edit:    func(s string) string { return strings.Replace(s, "scale up to 4", "scale up to 6", 1) },
			changed: []string{"auto_scaling_profile P"}},
		{name: "a profile added and given to groups and a socket",
			edit: func(s string) string {
				s = strings.Replace(s, "udp_workers = 2 use_auto_scaling_profile P", "udp_workers = 2 use_auto_scaling_profile Q\ntcp_workers = 2 use_auto_scaling_profile Q", 1)
				s = strings.Replace(s, "socket = udp:127.0.0.1:5060", "socket = udp:127.0.0.1:5060 use_auto_scaling_profile P", 1)
				return strings.Replace(s, "route {", "auto_scaling_profile = Q scale up to 3 on 60% for 2 cycles\nroute {", 1)
			},
			changed: []string{"auto_scaling_profile Q", "udp_workers use_auto_scaling_profile", "tcp_workers use_auto_scaling_profile", "socket udp:127.0.0.1:5060 use_auto_scaling_profile"}},
		{name: "a cooldown is its own setting, not each profile's",
			edit:    func(s string) string { return strings.Replace(s, "route {", "auto_scaling_cooldown = 3\nroute {", 1) },
			changed: []string{"auto_scaling_cooldown"}},
		{name: "the script",
			edit:    func(s string) string { return strings.Replace(s, "route { exit; }", "route { drop; }", 1) },
			changed: []string{"script"}},
		{name: "the script moved by a comment is the same",
			edit: func(s string) string {
				return strings.Replace(s, "route { exit; }", "# the main route\nroute {\n\texit;\n}", 1)
			}},
		{name: "a socket added takes a restart, the rest applies",
			edit: func(s string) string {
				s = strings.Replace(s, "max_calls = 100", "max_calls = 50", 1)
				return strings.Replace(s, "socket = tcp:127.0.0.1:5060\n", "socket = tcp:127.0.0.1:5060\nsocket = udp:127.0.0.1:5062\n", 1)
			},
			changed: []string{"max_calls"},
			restart: []string{"new.cfg:3: socket udp:127.0.0.1:5062 added"}},
		{name: "a socket removed is pointed at where it was",
			edit:    func(s string) string { return strings.Replace(s, "socket = tcp:127.0.0.1:5060\n", "", 1) },
			restart: []string{"old.cfg:2: socket tcp:127.0.0.1:5060 is no longer in the file"}},
		{name: "control address, start size and token",
			edit: func(s string) string {
				s = strings.Replace(s, "http_listen = 127.0.0.1:8888", "http_listen = 127.0.0.1:9999\nhttp_token = s3cret", 1)
				return strings.Replace(s, "udp_workers = 2", "udp_workers = 3", 1)
			},
			restart: []string{"new.cfg:6: udp_workers 2 -> 3 takes a restart", "new.cfg:3: http_listen 127.0.0.1:8888 -> 127.0.0.1:9999", "new.cfg:4: http_token changed"}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cur := loadText(t, "old.cfg", reloadBase)
			next := loadText(t, "new.cfg", tt.edit(reloadBase))
			if tt.inForce != nil {
				tt.inForce(cur)
			}
			p := planReload(cur, next)
			if !reflect.DeepEqual(p.Changed, tt.changed) {
				t.Errorf("changed: want %v, have %v", tt.changed, p.Changed)
			}
			var have []string
			for _, r := range p.Restart {
				have = append(have, r.String())
			}
			if len(have) != len(tt.restart) {
				t.Fatalf("restart: want %d lines like %q, have %q", len(tt.restart), tt.restart, have)
			}
			for i, want := range tt.restart {
				if !strings.HasPrefix(have[i], want) {
					t.Errorf("restart line %d: want %q..., have %q", i, want, have[i])
				}
				if strings.Contains(have[i], "s3cret") {
					t.Errorf("restart line %d shows the token: %q", i, have[i])
				}
			}
		})
	}
}

// Every setting is either applied by a reload or reported as taking a
// restart, or is one that doReload handles by itself.
func TestReloadCoversEverySetting(t *testing.T) {
	t.Parallel()
	known := map[string]bool{"include_file": true, "socket": true, "listen": true, "auto_scaling_profile": true}
	for _, s := range liveSettings {
		known[s.name] = true
	}
	for _, s := range restartSettings {
		if known[s.name] {
			t.Errorf("%s is both live and restart", s.name)
		}
		known[s.name] = true
	}
	for _, n := range config.SettingNames() {
		if !known[n] {
			t.Errorf("setting %s: say whether a reload applies it (liveSettings) or it takes a restart (restartSettings)", n)
		}
	}
}
