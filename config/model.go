// Package config reads an opensips.cfg-style file into a validated Config.
//
// Two stages: grammar.go holds participle structs that mirror the file, each node
// keeping its position; load.go turns that tree into the plain types below and
// validates them, reporting every problem as FILE:LINE:COL: message. No parser
// type escapes this package.
//
// It lives apart from supervisor/ because the worker processes load the same
// file to run its routing script, and they must not import the supervisor.
package config

import (
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/sipvisor/sipvisor/overload/fliphealth"
	"github.com/sipvisor/sipvisor/overload/pike"
	"github.com/sipvisor/sipvisor/overload/slowstart"
	"github.com/sipvisor/sipvisor/overload/throttle"
	"github.com/sipvisor/sipvisor/overload/watermark"
	"github.com/sipvisor/sipvisor/profile"
	"github.com/sipvisor/sipvisor/script"
)

// Config is a loaded, validated configuration. Each field names the config
// keyword that sets it.
type Config struct {
	// File is the path the config was read from ("<default>" for the built-in one).
	File string `json:"-"`

	// AutoScalingCycle: auto_scaling_cycle = SECONDS (default 1).
	AutoScalingCycle time.Duration `json:"auto_scaling_cycle"`
	// AutoScalingCooldown: auto_scaling_cooldown = CYCLES (default 0, meaning
	// OpenSIPS's 10 × scale-down cycles); copied into every profile's Cooldown.
	AutoScalingCooldown int `json:"auto_scaling_cooldown"`
	// Profiles: auto_scaling_profile = NAME scale up to ..., keyed by lower-case name.
	Profiles map[string]profile.Profile `json:"profiles"`

	// Sockets: socket = proto:host:port ... (listen = as an alias), in file order.
	Sockets []Socket `json:"sockets"`
	// UDPWorkers: udp_workers = N [use_auto_scaling_profile NAME]; the default
	// for every UDP socket that has no use_workers of its own.
	UDPWorkers Group `json:"udp_workers"`
	// TCPWorkers: tcp_workers = N [use_auto_scaling_profile NAME]; one group for
	// all TCP sockets.
	TCPWorkers Group `json:"tcp_workers"`
	// TimerWorkers: timer_workers = N [use_auto_scaling_profile NAME].
	TimerWorkers Group `json:"timer_workers"`

	// HTTPListen: http_listen = IP:PORT, the control/metrics address
	// (default 127.0.0.1:8888).
	HTTPListen string `json:"http_listen"`
	// HTTPToken: http_token = "secret"; required when HTTPListen is not loopback.
	HTTPToken string `json:"http_token,omitempty"`

	// Workers holds process-level settings of all groups.
	Workers WorkerSettings `json:"workers"`
	// Suspend holds the auto-suspend watermarks.
	Suspend Suspend `json:"suspend"`
	// Throttle holds the RTT load throttle settings.
	Throttle Throttle `json:"throttle"`
	// Limits holds session limits and queue admission.
	Limits Limits `json:"limits"`
	// SlowStart holds the ramp-in settings of new workers.
	SlowStart SlowStart `json:"slow_start"`
	// FlipHealth holds the flapping-health settings.
	FlipHealth FlipHealth `json:"flip_health"`
	// RetryAfter: retry_after = SECONDS or MIN-MAX, sent with every 503 that
	// admission control answers.
	RetryAfter RetryAfter `json:"retry_after"`
	// OC holds RFC 7339 overload control toward the clients that ask.
	OC OC `json:"oc"`
	// TLS holds the certificates of the tls: sockets and of connections
	// opened to TLS next hops.
	TLS TLS `json:"tls"`
	// Conn holds the bounds on TCP and TLS connections.
	Conn ConnLimits `json:"connections"`
	// WSAllowedOrigins: ws_allowed_origins = "https://a.example ...", the
	// web origins (scheme://host[:port], lower-case) whose pages may open
	// a WebSocket to the ws: and wss: sockets; empty allows any.
	WSAllowedOrigins []string `json:"ws_allowed_origins,omitempty"`

	// LocationStore: location_store = URL, where registrations live, as
	// written (default sqlite:location.db); Store resolves it.
	LocationStore string `json:"location_store"`
	// Domains: domain = "a.example b.example", the served SIP domains,
	// lower-case.
	Domains []string `json:"domains,omitempty"`
	// AORKeepPort: aor_keep_port = yes files an AOR with the port of its
	// URI (sip:user@host:port), as sipvisor did before; the default drops
	// it, as Kamailio's usrloc does.
	AORKeepPort bool `json:"aor_keep_port,omitempty"`

	// Auth holds digest authentication's settings.
	Auth Auth `json:"auth"`
	// Bans holds the flood and guessing protection: which sources are
	// banned, for how long, and how a banned source is refused.
	Bans Bans `json:"bans"`

	// NAT holds the keep-alives to phones behind NAT.
	NAT NAT `json:"nat"`

	// Dispatcher holds the destination sets (ds_list_file) and their
	// probing (ds_*).
	Dispatcher Dispatcher `json:"dispatcher"`

	// LogLevel: log_level = debug|info|warn|error (default info).
	LogLevel string `json:"log_level"`
	// LogFormat: log_format = text|json (default text).
	LogFormat string `json:"log_format"`

	// Params holds every global `name = value` line as written, for the script
	// and for diagnostics.
	Params map[string]string `json:"-"`
	// At is where each global setting set in the file was set (its value),
	// by name, so that a reload can point at the lines it cannot apply.
	// Sockets and profiles keep their own positions.
	At map[string]script.Pos `json:"-"`

	// Script holds the routing blocks.
	Script *script.Script `json:"script"`

	// sources is the text of every file read, for Snapshot.
	sources map[string][]byte
}

// Socket is one socket= (or listen=) line.
type Socket struct {
	Proto string `json:"proto"` // "udp", "tcp", "tls", "ws" or "wss"
	Host  string `json:"host"`
	Port  int    `json:"port"`
	// Workers: use_workers N; 0 means udp_workers applies.
	Workers int `json:"workers,omitempty"`
	// Profile: use_auto_scaling_profile NAME (udp only), lower-case; "" for none.
	Profile string `json:"profile,omitempty"`
	// At is where the socket line's address is.
	At script.Pos `json:"-"`
}

// Group is the initial worker count and optional scaling profile of a group.
type Group struct {
	Workers int `json:"workers"`
	// Profile is the lower-case profile name, "" for a fixed-size group.
	Profile string `json:"profile,omitempty"`
}

// WorkerSettings are process-level settings shared by all groups.
type WorkerSettings struct {
	// ReadyTimeout: worker_ready_timeout (default 5s).
	ReadyTimeout time.Duration `json:"ready_timeout"`
	// DrainTimeout: worker_drain_timeout (default 160s, longer than a
	// ringing INVITE's transaction may live).
	DrainTimeout time.Duration `json:"drain_timeout"`
	// MemoryLimit: worker_memory_limit in bytes (default 256 MiB); the Go
	// memory limit of each worker and the base of heap_usage.
	MemoryLimit int64 `json:"memory_limit"`
	// ReplySockets: worker_reply_sockets (default no).
	ReplySockets bool `json:"reply_sockets"`
	// DirectReads: udp_direct_reads (default yes).
	DirectReads bool `json:"direct_reads"`
	// UpgradeTimeout: upgrade_timeout (default 30s), how long a new
	// binary started by an upgrade may take to be ready before it is
	// stopped and the running one keeps serving.
	UpgradeTimeout time.Duration `json:"upgrade_timeout"`
}

// Watermark is a high/low pair of one monitor.
type Watermark = watermark.Pair

// Suspend holds auto-suspend: suspend_enable and
// suspend_<monitor>_high / suspend_<monitor>_low.
type Suspend struct {
	Enable           bool      `json:"enable"`
	EventQueueUsage  Watermark `json:"event_queue_usage"`
	HeapUsage        Watermark `json:"heap_usage"`
	NumberOfSessions Watermark `json:"number_of_sessions"`
	SystemMemory     Watermark `json:"system_memory_usage"`
}

// Watermarks are the pairs as auto-suspend takes them.
func (s Suspend) Watermarks() watermark.Watermarks {
	return watermark.Watermarks{
		watermark.EventQueueUsage:   s.EventQueueUsage,
		watermark.HeapUsage:         s.HeapUsage,
		watermark.NumberOfSessions:  s.NumberOfSessions,
		watermark.SystemMemoryUsage: s.SystemMemory,
	}
}

// Throttle holds the RTT load throttle: throttle_enable, throttle_rtt_threshold,
// throttle_count, throttle_step, echo_interval.
type Throttle struct {
	Enable       bool          `json:"enable"`
	RTTThreshold time.Duration `json:"rtt_threshold"`
	Count        int           `json:"count"`
	StepPercent  float64       `json:"step_percent"`
	EchoInterval time.Duration `json:"echo_interval"`
}

// Config is the throttle of one group as these settings make it.
func (t Throttle) Config() throttle.Config {
	return throttle.Config{Threshold: t.RTTThreshold, Count: t.Count, Step: t.StepPercent / 100, Enabled: t.Enable}
}

// Limits holds maximum sessions (0 = unlimited) and queue admission.
type Limits struct {
	MaxSessions          int `json:"max_sessions"`
	MaxSessionsPerGroup  int `json:"max_sessions_per_group"`
	MaxSessionsPerSocket int `json:"max_sessions_per_socket"`
	MaxRegistrations     int `json:"max_registrations"`
	MaxCalls             int `json:"max_calls"`
	MaxSubscriptions     int `json:"max_subscriptions"`
	// MaxQueueWait: max_queue_wait, 0 = no bound.
	MaxQueueWait time.Duration `json:"max_queue_wait"`
	// MaxCallDuration: max_call_duration, how long an answered call counts
	// as a session without a BYE.
	MaxCallDuration time.Duration `json:"max_call_duration"`
	// QueueAdmission: queue_admission_threshold, percent 0..90, 0 = no limiting.
	QueueAdmission float64 `json:"queue_admission_threshold"`
	// QueueDelay: queue_delay_admission, 0 = no limiting.
	QueueDelay time.Duration `json:"queue_delay_admission"`
}

// ConnLimits bound what a TCP or TLS connection may cost: tcp_max_connections,
// tcp_max_connections_per_ip (0 = no limit), tcp_connection_lifetime (idle),
// tcp_message_timeout (from a message's first byte to its last) and
// tls_handshake_timeout.
type ConnLimits struct {
	Max              int           `json:"max"`
	MaxPerIP         int           `json:"max_per_ip"`
	Lifetime         time.Duration `json:"lifetime"`
	MessageTimeout   time.Duration `json:"message_timeout"`
	HandshakeTimeout time.Duration `json:"handshake_timeout"`
}

// SlowStart holds the ramp-in of new workers: slow_start_mode (off, manual,
// auto), slow_start_unit (per_second, percent), slow_start_value,
// slow_start_interval, slow_start_increment.
type SlowStart = slowstart.Config

// FlipHealth: flip_window (default 30m), flip_threshold (default 10).
type FlipHealth = fliphealth.Config

// OC is RFC 7339 overload control as a server.
type OC struct {
	// Feedback: oc_feedback (default yes).
	Feedback bool `json:"feedback"`
	// Validity: oc_validity (default 1s).
	Validity time.Duration `json:"validity"`
}

// RetryAfter is a fixed value (Min == Max) or a range to draw from.
type RetryAfter struct {
	Min time.Duration `json:"min"`
	Max time.Duration `json:"max"`
}

// Draw is the Retry-After seconds of one refusal: fixed, or drawn from the
// range so that refused clients do not all return at once.
func (r RetryAfter) Draw() int {
	lo, hi := r.seconds()
	if hi <= lo {
		return lo
	}
	return lo + int(rand.Uint64N(uint64(hi-lo+1)))
}

// Drawn reports whether Draw draws: the range spans more than one whole
// second.
func (r RetryAfter) Drawn() bool {
	lo, hi := r.seconds()
	return hi > lo
}

func (r RetryAfter) seconds() (lo, hi int) { return int(r.Min.Seconds()), int(r.Max.Seconds()) }

// Bans: pike_requests per pike_window (0 = off), auth_failures_per_source
// and auth_failures_per_user per auth_failure_window (0 = off), ban_time,
// ban_action (drop or reply) and ban_exempt (addresses and prefixes).
type Bans struct {
	PikeRequests          int            `json:"pike_requests"`
	PikeWindow            time.Duration  `json:"pike_window"`
	AuthFailuresPerSource int            `json:"auth_failures_per_source"`
	AuthFailuresPerUser   int            `json:"auth_failures_per_user"`
	AuthFailureWindow     time.Duration  `json:"auth_failure_window"`
	BanTime               time.Duration  `json:"ban_time"`
	Action                string         `json:"ban_action"`
	Exempt                []netip.Prefix `json:"ban_exempt,omitempty"`
}

// NAT: nat_keepalive_interval (default 0: none) and nat_keepalive_method
// (default OPTIONS), Kamailio's nathelper natping_interval and
// sipping_method.
type NAT struct {
	KeepaliveInterval time.Duration `json:"keepalive_interval"`
	KeepaliveMethod   string        `json:"keepalive_method"`
}

// Auth: nonce_expire (default 300s), auth_algorithms (default "MD5").
type Auth struct {
	NonceExpire time.Duration `json:"nonce_expire"`
	Algorithms  []string      `json:"algorithms"`
}

// Policy is the bans' thresholds as package pike applies them.
func (b Bans) Policy() pike.Policy {
	return pike.Policy{Requests: b.PikeRequests, Window: b.PikeWindow, AuthPerSource: b.AuthFailuresPerSource,
		AuthPerUser: b.AuthFailuresPerUser, AuthWindow: b.AuthFailureWindow, BanTime: b.BanTime, Exempt: b.Exempt}
}
