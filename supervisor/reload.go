package supervisor

import (
	"encoding/json"
	"fmt"
	"net"
	"reflect"
	"sort"
	"strconv"
	"strings"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/script"
)

// reloadPlan is what a reload does with a new config: the settings whose
// value changes and that take effect at once, and the lines whose change
// takes a restart, their old value staying in force meanwhile.
type reloadPlan struct {
	// Changed names each setting that a reload applies and whose value
	// differs from the one in force, in the order of the settings
	// reference.
	Changed []string
	// Restart lists the lines whose change takes a restart.
	Restart []restartLine
}

// restartLine is a change a running sipvisor cannot make: a socket to bind
// or close, a control address, the size a group starts with.
type restartLine struct {
	At  script.Pos
	Msg string
}

// String is FILE:LINE: message, the form an editor jumps to.
func (r restartLine) String() string {
	return r.At.File + ":" + strconv.Itoa(r.At.Line) + ": " + r.Msg
}

func (p reloadPlan) changed(name string) bool {
	for _, n := range p.Changed {
		if n == name {
			return true
		}
	}
	return false
}

// liveSettings are the settings a reload applies at once, each with the
// value it reads. Profiles and use_auto_scaling_profile are applied per
// group (doReload), the script by renewing the workers.
var liveSettings = []struct {
	name string
	get  func(c *config.Config) any
}{
	{"auto_scaling_cycle", func(c *config.Config) any { return c.AutoScalingCycle }},
	{"auto_scaling_cooldown", func(c *config.Config) any { return c.AutoScalingCooldown }},
	{"worker_ready_timeout", func(c *config.Config) any { return c.Workers.ReadyTimeout }},
	{"worker_drain_timeout", func(c *config.Config) any { return c.Workers.DrainTimeout }},
	{"upgrade_timeout", func(c *config.Config) any { return c.Workers.UpgradeTimeout }},
	{"worker_memory_limit", func(c *config.Config) any { return c.Workers.MemoryLimit }},
	{"worker_reply_sockets", func(c *config.Config) any { return c.Workers.ReplySockets }},
	// Connections: the supervisor reads the limits at each accept; TCP
	// workers reload in place and give new connections the new timeouts
	// and certificates, while those up keep theirs.
	// Workers read these on a reload (renewed or in place).
	{"domain", func(c *config.Config) any { return fmt.Sprint(c.Domains) }},
	{"aor_keep_port", func(c *config.Config) any { return c.AORKeepPort }},
	// The supervisor plans the keep-alive job anew; timer workers reload.
	{"nat_keepalive_interval", func(c *config.Config) any { return c.NAT.KeepaliveInterval }},
	{"nat_keepalive_method", func(c *config.Config) any { return c.NAT.KeepaliveMethod }},
	{"nonce_expire", func(c *config.Config) any { return c.Auth.NonceExpire }},
	{"auth_algorithms", func(c *config.Config) any { return fmt.Sprint(c.Auth.Algorithms) }},
	{"tcp_max_connections", func(c *config.Config) any { return c.Conn.Max }},
	{"tcp_max_connections_per_ip", func(c *config.Config) any { return c.Conn.MaxPerIP }},
	{"tcp_connection_lifetime", func(c *config.Config) any { return c.Conn.Lifetime }},
	{"tcp_message_timeout", func(c *config.Config) any { return c.Conn.MessageTimeout }},
	{"tls_handshake_timeout", func(c *config.Config) any { return c.Conn.HandshakeTimeout }},
	{"tls_certificate", func(c *config.Config) any { return c.TLS.Certificate }},
	{"tls_private_key", func(c *config.Config) any { return c.TLS.PrivateKey }},
	{"tls_ca_list", func(c *config.Config) any { return c.TLS.CAList }},
	{"tls_verify_client", func(c *config.Config) any { return c.TLS.VerifyClient }},
	{"tls_verify_server", func(c *config.Config) any { return c.TLS.VerifyServer }},
	{"ws_allowed_origins", func(c *config.Config) any { return fmt.Sprint(c.WSAllowedOrigins) }},
	// The supervisor's prober and every worker read the destinations
	// and their probing from the config in force.
	{"ds_list_file", func(c *config.Config) any { return c.Dispatcher.ListFile + fmt.Sprint(c.Dispatcher.Dests) }},
	{"ds_ping_interval", func(c *config.Config) any { return c.Dispatcher.PingInterval }},
	{"ds_probing_threshold", func(c *config.Config) any { return c.Dispatcher.ProbingThreshold }},
	{"ds_inactive_threshold", func(c *config.Config) any { return c.Dispatcher.InactiveThreshold }},
	{"ds_ping_reply_codes", func(c *config.Config) any { return c.Dispatcher.PingReplyCodes }},
	{"ds_ping_from", func(c *config.Config) any { return c.Dispatcher.PingFrom }},
	{"ds_overload_control", func(c *config.Config) any { return c.Dispatcher.OverloadControl }},
	{"suspend_enable", func(c *config.Config) any { return c.Suspend.Enable }},
	{"suspend_event_queue_usage_high", func(c *config.Config) any { return c.Suspend.EventQueueUsage.High }},
	{"suspend_event_queue_usage_low", func(c *config.Config) any { return c.Suspend.EventQueueUsage.Low }},
	{"suspend_heap_usage_high", func(c *config.Config) any { return c.Suspend.HeapUsage.High }},
	{"suspend_heap_usage_low", func(c *config.Config) any { return c.Suspend.HeapUsage.Low }},
	{"suspend_number_of_sessions_high", func(c *config.Config) any { return c.Suspend.NumberOfSessions.High }},
	{"suspend_number_of_sessions_low", func(c *config.Config) any { return c.Suspend.NumberOfSessions.Low }},
	{"suspend_system_memory_usage_high", func(c *config.Config) any { return c.Suspend.SystemMemory.High }},
	{"suspend_system_memory_usage_low", func(c *config.Config) any { return c.Suspend.SystemMemory.Low }},
	{"throttle_enable", func(c *config.Config) any { return c.Throttle.Enable }},
	{"throttle_rtt_threshold", func(c *config.Config) any { return c.Throttle.RTTThreshold }},
	{"throttle_count", func(c *config.Config) any { return c.Throttle.Count }},
	{"throttle_step", func(c *config.Config) any { return c.Throttle.StepPercent }},
	{"echo_interval", func(c *config.Config) any { return c.Throttle.EchoInterval }},
	{"max_sessions", func(c *config.Config) any { return c.Limits.MaxSessions }},
	{"max_sessions_per_group", func(c *config.Config) any { return c.Limits.MaxSessionsPerGroup }},
	{"max_sessions_per_socket", func(c *config.Config) any { return c.Limits.MaxSessionsPerSocket }},
	{"max_registrations", func(c *config.Config) any { return c.Limits.MaxRegistrations }},
	{"max_calls", func(c *config.Config) any { return c.Limits.MaxCalls }},
	{"max_call_duration", func(c *config.Config) any { return c.Limits.MaxCallDuration }},
	{"max_subscriptions", func(c *config.Config) any { return c.Limits.MaxSubscriptions }},
	{"queue_admission_threshold", func(c *config.Config) any { return c.Limits.QueueAdmission }},
	{"queue_delay_admission", func(c *config.Config) any { return c.Limits.QueueDelay }},
	{"max_queue_wait", func(c *config.Config) any { return c.Limits.MaxQueueWait }},
	{"retry_after", func(c *config.Config) any { return c.RetryAfter }},
	{"oc_feedback", func(c *config.Config) any { return c.OC.Feedback }},
	{"oc_validity", func(c *config.Config) any { return c.OC.Validity }},
	{"slow_start_mode", func(c *config.Config) any { return c.SlowStart.Mode }},
	{"slow_start_unit", func(c *config.Config) any { return c.SlowStart.Unit }},
	{"slow_start_value", func(c *config.Config) any { return c.SlowStart.Value }},
	{"slow_start_interval", func(c *config.Config) any { return c.SlowStart.Interval }},
	{"slow_start_increment", func(c *config.Config) any { return c.SlowStart.Increment }},
	{"flip_window", func(c *config.Config) any { return c.FlipHealth.Window }},
	{"flip_threshold", func(c *config.Config) any { return c.FlipHealth.Threshold }},
	{"log_level", func(c *config.Config) any { return c.LogLevel }},
	// The supervisor holds the bans and sends workers how to count.
	{"pike_requests", func(c *config.Config) any { return c.Bans.PikeRequests }},
	{"pike_window", func(c *config.Config) any { return c.Bans.PikeWindow }},
	{"auth_failures_per_source", func(c *config.Config) any { return c.Bans.AuthFailuresPerSource }},
	{"auth_failures_per_user", func(c *config.Config) any { return c.Bans.AuthFailuresPerUser }},
	{"auth_failure_window", func(c *config.Config) any { return c.Bans.AuthFailureWindow }},
	{"ban_time", func(c *config.Config) any { return c.Bans.BanTime }},
	{"ban_action", func(c *config.Config) any { return c.Bans.Action }},
	{"ban_exempt", func(c *config.Config) any { return fmt.Sprint(c.Bans.Exempt) }},
}

// restartSettings are the settings whose change takes a restart: the
// control address is a socket bound at start-up, the token is part of the
// control server, and a group's worker count is the size it starts with
// (a profile scales it from there, and a fixed group keeps its size).
var restartSettings = []struct {
	name, why string
	get       func(c *config.Config) any
}{
	{"udp_workers", "the size UDP groups start with", func(c *config.Config) any { return c.UDPWorkers.Workers }},
	{"tcp_workers", "the size the TCP group starts with", func(c *config.Config) any { return c.TCPWorkers.Workers }},
	{"timer_workers", "the size the timer group starts with", func(c *config.Config) any { return c.TimerWorkers.Workers }},
	{"http_listen", "the control address is bound at start-up", func(c *config.Config) any { return c.HTTPListen }},
	{"http_token", "the control server takes its token at start-up", func(c *config.Config) any { return c.HTTPToken }},
	{"udp_direct_reads", "the SIP sockets are bound for it at start-up", func(c *config.Config) any { return c.Workers.DirectReads }},
	{"log_format", "every process logs in the format the server started with", func(c *config.Config) any { return c.LogFormat }},
	// A reload that moves the store is refused whole (doReload): workers
	// renewed by it would open the new store and the others keep the old.
	{"location_store", "every worker opens the store at start-up", func(c *config.Config) any { return c.LocationStore }},
}

// planReload compares the config in force (the file as loaded, with the
// values `ctl set` changed since) with a new one. It does no I/O.
func planReload(cur, next *config.Config) reloadPlan {
	var p reloadPlan
	for _, s := range liveSettings {
		if !reflect.DeepEqual(s.get(cur), s.get(next)) {
			p.Changed = append(p.Changed, s.name)
		}
	}
	for _, s := range restartSettings {
		a, b := s.get(cur), s.get(next)
		if reflect.DeepEqual(a, b) {
			continue
		}
		msg := fmt.Sprintf("%s %v -> %v takes a restart (%s); %v stays in force until then", s.name, shown(a), shown(b), s.why, shown(a))
		if s.name == "http_token" {
			msg = "http_token changed: it takes a restart (" + s.why + "); the old token stays in force until then"
		}
		p.Restart = append(p.Restart, restartLine{At: settingAt(cur, next, s.name), Msg: msg})
	}
	p.Changed = append(p.Changed, profileChanges(cur, next)...)
	if !sameScript(cur.Script, next.Script) {
		p.Changed = append(p.Changed, "script")
	}
	p.Restart = append(p.Restart, socketChanges(cur.Sockets, next.Sockets)...)
	return p
}

// profileChanges names the profiles defined, changed or removed, and the
// groups and sockets given another profile: doReload applies each at once.
func profileChanges(cur, next *config.Config) []string {
	var out []string
	keys := map[string]bool{}
	for k := range cur.Profiles {
		keys[k] = true
	}
	for k := range next.Profiles {
		keys[k] = true
	}
	var names []string
	for k := range keys {
		a, inCur := cur.Profiles[k]
		b, inNext := next.Profiles[k]
		// The cooldown is auto_scaling_cooldown's, listed by its own name.
		a.Cooldown, b.Cooldown = 0, 0
		if inCur != inNext || a != b {
			name := b.Name
			if !inNext {
				name = a.Name
			}
			names = append(names, "auto_scaling_profile "+name)
		}
	}
	sort.Strings(names)
	out = append(out, names...)
	for _, g := range []struct {
		name string
		a, b config.Group
	}{
		{"udp_workers", cur.UDPWorkers, next.UDPWorkers},
		{"tcp_workers", cur.TCPWorkers, next.TCPWorkers},
		{"timer_workers", cur.TimerWorkers, next.TimerWorkers},
	} {
		if g.a.Profile != g.b.Profile {
			out = append(out, g.name+" use_auto_scaling_profile")
		}
	}
	old := map[string]config.Socket{}
	for _, s := range cur.Sockets {
		old[socketKey(s)] = s
	}
	for _, s := range next.Sockets {
		if o, ok := old[socketKey(s)]; ok && o.Profile != s.Profile {
			out = append(out, "socket "+socketKey(s)+" use_auto_scaling_profile")
		}
	}
	return out
}

// sameScript compares two scripts as they run: a line moved, or a comment
// added, changes positions only.
func sameScript(a, b *script.Script) bool {
	if a == nil || b == nil {
		return a == b
	}
	return reflect.DeepEqual(withoutPos(a), withoutPos(b))
}

func withoutPos(sc *script.Script) any {
	raw, err := json.Marshal(sc)
	if err != nil {
		return err.Error()
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return err.Error()
	}
	var strip func(v any)
	strip = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if strings.EqualFold(k, "pos") {
					delete(v, k)
					continue
				}
				strip(x)
			}
		case []any:
			for _, x := range v {
				strip(x)
			}
		}
	}
	strip(v)
	return v
}

// shown hides a token's value.
func shown(v any) any {
	if s, ok := v.(string); ok && s == "" {
		return `""`
	}
	return v
}

// settingAt is where a setting is written in the new file, or where it was
// written in the old one when the new file leaves it out (its default
// applies).
func settingAt(cur, next *config.Config, name string) script.Pos {
	if p, ok := next.At[name]; ok {
		return p
	}
	if p, ok := cur.At[name]; ok {
		return p
	}
	return script.Pos{File: next.File, Line: 1}
}

func socketKey(s config.Socket) string {
	return s.Proto + ":" + net.JoinHostPort(s.Host, strconv.Itoa(s.Port))
}

// socketChanges lists the sockets added, removed, or given another worker
// count. A socket's profile is no restart matter: doReload applies it.
func socketChanges(cur, next []config.Socket) []restartLine {
	var out []restartLine
	old := map[string]config.Socket{}
	for _, s := range cur {
		old[socketKey(s)] = s
	}
	seen := map[string]bool{}
	for _, s := range next {
		k := socketKey(s)
		seen[k] = true
		o, ok := old[k]
		switch {
		case !ok:
			out = append(out, restartLine{At: s.At, Msg: "socket " + k + " added: it is bound at the next restart"})
		case o.Workers != s.Workers && s.Proto == "udp":
			out = append(out, restartLine{At: s.At, Msg: fmt.Sprintf("socket %s use_workers %d -> %d takes a restart (the size its group starts with)", k, o.Workers, s.Workers)})
		}
	}
	for _, s := range cur {
		if k := socketKey(s); !seen[k] {
			out = append(out, restartLine{At: s.At, Msg: "socket " + k + " is no longer in the file (it was on this line when sipvisor started): it stays bound until the next restart"})
		}
	}
	return out
}
