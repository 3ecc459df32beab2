package config

import (
	"fmt"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/sipvisor/sipvisor/overload/sessions"
	"github.com/sipvisor/sipvisor/overload/slowstart"
)

// kind says how a setting's value is written and what it turns into.
type kind int

const (
	kindInt      kind = iota // whole number
	kindBool                 // yes/no, true/false, on/off, 1/0
	kindDuration             // 500ms, 5s, 30m; a bare number is seconds
	kindPercent              // 10 or 10%
	kindString               // a word or a quoted string
	kindEnum                 // one of Enum
	kindBytes                // 268435456, 256MiB, 1GB
	kindHostPort             // IP:PORT
	kindRetry                // SECONDS or MIN-MAX
	kindGroup                // N [use_auto_scaling_profile NAME]
	kindSocket               // proto:host:port [use_workers N] [use_auto_scaling_profile NAME]
	kindProfile              // NAME scale up to ... (see the profile grammar)
	kindInclude              // "path"
)

var kindNames = map[kind]string{
	kindInt: "integer", kindBool: "boolean", kindDuration: "duration", kindPercent: "percent",
	kindString: "string", kindEnum: "enum", kindBytes: "bytes", kindHostPort: "IP:PORT",
	kindRetry: "seconds or MIN-MAX", kindGroup: "workers", kindSocket: "socket",
	kindProfile: "profile", kindInclude: "path",
}

// value is a parsed setting value; which field is set depends on the kind.
type value struct {
	i      int64
	f      float64
	b      bool
	d      time.Duration
	s      string
	lo, hi time.Duration
}

// setting is one row of the settings table. The table is the single source of
// every global name: it drives parsing, range checks, defaults, "did you mean"
// and the reference in docs/CONFIG.md, so none of them can drift apart.
type setting struct {
	Name string
	Kind kind
	// Default is written as it would be in a config file and is parsed by the
	// same code as user input; "" means the setting has no default value.
	Default string
	// Min and Max bound numbers in the kind's unit: seconds for durations,
	// bytes, percent. HasMax false means no upper bound.
	Min, Max float64
	HasMax   bool
	// MinWhy, when set, says why a value under Min is refused: a bound
	// that another part of the server relies on.
	MinWhy string
	Enum   []string
	Doc    string
	// set stores a parsed value; nil for the structured settings that load.go
	// handles itself.
	set func(c *Config, v value)
}

// settings is in the order the reference lists them.
var settings = []setting{
	{Name: "include_file", Kind: kindInclude, Doc: "Read another config file here; a relative path is relative to the including file. Cycles are an error."},
	{Name: "log_level", Kind: kindEnum, Default: "info", Enum: []string{"debug", "info", "warn", "error"}, Doc: "Least severe level that is logged; `sipvisor -log.level` overrides it, and a reload applies it.",
		set: func(c *Config, v value) { c.LogLevel = v.s }},
	{Name: "log_format", Kind: kindEnum, Default: "text", Enum: []string{"text", "json"}, Doc: "How every process logs: `text` (key=value) or `json` (one object a line). Workers log in the supervisor's format into the same stream, each line with its group, worker and pid; `sipvisor -log-format` overrides it. Set at start-up: a reload keeps the format the server started with.",
		set: func(c *Config, v value) { c.LogFormat = v.s }},

	{Name: "socket", Kind: kindSocket, Doc: "A SIP socket, `udp:IP:PORT` or `tcp:IP:PORT` (port 0 picks a free one; default port 5060), with optional `use_workers N` and, for UDP, `use_auto_scaling_profile NAME`. Each UDP socket is a worker group of its own; all TCP sockets share the tcp_workers group."},
	{Name: "listen", Kind: kindSocket, Doc: "Alias of socket, as in OpenSIPS 2.x."},
	{Name: "udp_workers", Kind: kindGroup, Default: "2", Min: 1, Max: 999, HasMax: true, Doc: "Workers of each UDP socket without use_workers, with an optional `use_auto_scaling_profile NAME`."},
	{Name: "tcp_workers", Kind: kindGroup, Default: "2", Min: 1, Max: 999, HasMax: true, Doc: "Workers of the TCP group, with an optional `use_auto_scaling_profile NAME`."},
	{Name: "timer_workers", Kind: kindGroup, Default: "1", Min: 1, Max: 999, HasMax: true, Doc: "Workers that run timer_route blocks and periodic jobs, with an optional `use_auto_scaling_profile NAME`."},

	{Name: "auto_scaling_profile", Kind: kindProfile, Doc: "Defines a profile: `NAME scale up to MAX on UP% for N cycles [within W] [scale down to MIN on DOWN% for Z cycles]`; see below."},
	{Name: "auto_scaling_cycle", Kind: kindDuration, Default: "1", Min: 0.01, Max: 3600, HasMax: true, Doc: "Length of one monitoring cycle; a bare number is seconds.",
		set: func(c *Config, v value) { c.AutoScalingCycle = v.d }},
	{Name: "auto_scaling_cooldown", Kind: kindInt, Default: "0", Min: 0, Max: 100000, HasMax: true, Doc: "Cycles after startup and after each fork during which no worker is drained; 0 means 10 × the profile's scale-down cycles, as OpenSIPS does.",
		set: func(c *Config, v value) { c.AutoScalingCooldown = int(v.i) }},

	{Name: "worker_ready_timeout", Kind: kindDuration, Default: "5s", Min: 0.001, Max: 600, HasMax: true, Doc: "How long a new worker may take to report ready before it is killed.",
		set: func(c *Config, v value) { c.Workers.ReadyTimeout = v.d }},
	{Name: "upgrade_timeout", Kind: kindDuration, Default: "30s", Min: 1, Max: 3600, HasMax: true, Doc: "How long the new binary that `sipvisor ctl upgrade` (or SIGUSR2) starts may take to load its config and have a ready worker in every group; past it, the new process is stopped and the running one keeps serving, as when the new one exits.",
		set: func(c *Config, v value) { c.Workers.UpgradeTimeout = v.d }},
	{Name: "worker_drain_timeout", Kind: kindDuration, Default: fmt.Sprintf("%ds", int(sessions.DrainTimeout/time.Second)),
		Min: sessions.PendingInvite.Seconds(), Max: 3600, HasMax: true,
		MinWhy: fmt.Sprintf("a worker drained sooner than a ringing INVITE may stay pending (fr_inv %v, then 64×T1 %v) would cut calls still ringing", sessions.InviteTimeout, sessions.TransactionLifetime),
		Doc: fmt.Sprintf("How long a draining worker may take to finish its transactions before it is killed (also on shutdown); longer than a ringing INVITE may live (fr_inv %d s, then timer H %d s), so scaling down never cuts a call that is still ringing.",
			int(sessions.InviteTimeout/time.Second), int(sessions.TransactionLifetime/time.Second)),
		set: func(c *Config, v value) { c.Workers.DrainTimeout = v.d }},
	{Name: "worker_memory_limit", Kind: kindBytes, Default: "256MiB", Min: 16 << 20, Doc: "Go memory limit of each worker (GOMEMLIMIT) and the 100% of heap_usage. Below it a worker's collector runs at GOGC=150 (a GOGC in sipvisor's environment wins), which keeps it under 0.5% of the worker's CPU at 1,000 calls/s; nearing the limit, it collects more often to stay under it.",
		set: func(c *Config, v value) { c.Workers.MemoryLimit = v.i }},
	{Name: "worker_reply_sockets", Kind: kindBool, Default: "no", Doc: "Each UDP worker relays requests over UDP from a socket of its own (the SIP socket's address, a port the kernel picks) and names it in its Via, so their responses come straight to it instead of through the supervisor: about half of a proxied call's datagrams skip a hop. Record-Route still names the SIP socket, and a request outside a dialog sent to a reply socket gets a 403, so none skips the front door's admission control. Off by default, as peers and firewalls then see responses sent to a port other than the SIP port; new workers follow a reload. TCP workers relay over UDP from the SIP socket whatever this says: their connections, and the dialogs on them, move to other workers when they drain (a scale-down, an upgrade), and a callee that sends everything of a call to where its INVITE came from (SIPp's uas does) would send the answer to a later BYE to a port closed by then; their responses reach them through the UDP workers, which pass each to the worker its branch names.",
		set: func(c *Config, v value) { c.Workers.ReplySockets = v.b }},
	{Name: "udp_direct_reads", Kind: kindBool, Default: "yes", Doc: "Each UDP worker reads the SIP port itself, through a socket of its own in the port's SO_REUSEPORT group, as Kamailio's receivers do, instead of every datagram passing through the supervisor: a program in the kernel places each datagram by a hash of its Call-ID, so a call's messages all reach one worker, and the supervisor wakes for none of them. Each worker runs the front door's checks on what it reads (the same 503 and Retry-After, session limits through quotas the supervisor gives it); each refuses by queue delay what waited too long in its own socket; while suspended, each worker refuses new sessions itself; while a protection that weighs each session is near refusing (queue usage over half its threshold, the RTT throttle) or a worker is in slow start, the datagrams go through the supervisor's door as with `no`, which passes every datagram through the supervisor. Takes a restart.",
		set: func(c *Config, v value) { c.Workers.DirectReads = v.b }},

	{Name: "tcp_max_connections", Kind: kindInt, Default: "4096", Min: 1, Max: 1 << 20, HasMax: true, Doc: "Most TCP and TLS connections open from clients at once; a connection past it is closed as it is accepted (Kamailio's and OpenSIPS's tcp_max_connections).",
		set: func(c *Config, v value) { c.Conn.Max = int(v.i) }},
	{Name: "tcp_max_connections_per_ip", Kind: kindInt, Default: "256", Min: 0, Max: 1 << 20, HasMax: true, Doc: "Most TCP and TLS connections open from one IP address at once, so that one client cannot take them all; 0 = no limit. A phone uses one; SIPp's -t tn one per call.",
		set: func(c *Config, v value) { c.Conn.MaxPerIP = int(v.i) }},
	{Name: "tcp_connection_lifetime", Kind: kindDuration, Default: "120s", Min: 1, Max: 86400, HasMax: true, Doc: "A TCP or TLS connection with nothing read or written for this long is closed (Kamailio's and OpenSIPS's default). Clients that must stay reachable over TCP send keep-alives (RFC 5626 CRLF) more often than this.",
		set: func(c *Config, v value) { c.Conn.Lifetime = v.d }},
	{Name: "tcp_message_timeout", Kind: kindDuration, Default: "20s", Min: 0.1, Max: 3600, HasMax: true, Doc: "A message must arrive whole within this long of its first byte, or its connection is closed: a peer that trickles bytes (slowloris) holds a connection no longer (Kamailio's tcp_msg_read_timeout).",
		set: func(c *Config, v value) { c.Conn.MessageTimeout = v.d }},
	{Name: "tls_handshake_timeout", Kind: kindDuration, Default: "10s", Min: 0.1, Max: 600, HasMax: true, Doc: "A TLS handshake, with a client or a next hop, must end within this long, or the connection is closed.",
		set: func(c *Config, v value) { c.Conn.HandshakeTimeout = v.d }},
	{Name: "tls_certificate", Kind: kindString, Doc: "PEM file of the certificate (and its chain) that tls: and wss: sockets present; required with either. A relative path is relative to the directory of the config file that names it. Re-read on a reload; connections already up keep theirs.",
		set: func(c *Config, v value) { c.TLS.Certificate = v.s }},
	{Name: "tls_private_key", Kind: kindString, Doc: "PEM file of the certificate's private key; required with a tls: or wss: socket.",
		set: func(c *Config, v value) { c.TLS.PrivateKey = v.s }},
	{Name: "tls_ca_list", Kind: kindString, Doc: "PEM file of the certificate authorities that client certificates (tls_verify_client) and TLS next hops (tls_verify_server) are checked against; without it, next hops are checked against the system's roots.",
		set: func(c *Config, v value) { c.TLS.CAList = v.s }},
	{Name: "tls_verify_client", Kind: kindBool, Default: "no", Doc: "Require a client certificate signed by tls_ca_list on tls: sockets (mutual TLS, as trunks often use).",
		set: func(c *Config, v value) { c.TLS.VerifyClient = v.b }},
	{Name: "tls_verify_server", Kind: kindBool, Default: "yes", Doc: "Check the certificate of a TLS next hop against tls_ca_list (or the system's roots) and the host it was reached by; no only for tests.",
		set: func(c *Config, v value) { c.TLS.VerifyServer = v.b }},

	{Name: "ws_allowed_origins", Kind: kindString, Doc: "The web origins (`scheme://host[:port]`, separated by spaces or commas) whose pages may open a WebSocket to the ws: and wss: sockets, as the browser names them in the Upgrade's Origin header: `\"https://phone.example.com\"`. An Upgrade from another origin is refused with 403, so that a page on another site cannot use a visitor's browser as a SIP client. Clients that are not browsers send no Origin and are not refused for it. Empty (the default) allows every origin, as Kamailio's websocket module does unless its xhttp route checks. A reload applies it to new connections.",
		set: func(c *Config, v value) { c.WSAllowedOrigins = splitList(v.s) }},

	{Name: "http_listen", Kind: kindHostPort, Default: "127.0.0.1:8888", Doc: "Address of the control, metrics and health HTTP server.",
		set: func(c *Config, v value) { c.HTTPListen = v.s }},
	{Name: "http_token", Kind: kindString, Doc: "Bearer token the control API requires; mandatory when http_listen is not a loopback address.",
		set: func(c *Config, v value) { c.HTTPToken = v.s }},

	{Name: "location_store", Kind: kindString, Default: "sqlite:location.db", Doc: "Where registrations live, written in quotes (`location_store = \"sqlite:/var/lib/sipvisor/location.db\"`). `sqlite:PATH`: a database file that survives restarts, which every worker reads and writes itself (a relative path is relative to the directory of the config file that names it; the built-in config, which has none, keeps it in $XDG_STATE_HOME/sipvisor, else ~/.local/state/sipvisor). `redis://HOST:PORT/DB` (`rediss://` for TLS, `redis://:PASSWORD@HOST:PORT/DB` with a password): a Redis server (6.2 or later) that several sipvisor nodes share, each binding a key whose TTL is its expiry (docs/CLUSTER.md). `memory:`: in the supervisor's memory, lost on restart; for tests. A store that cannot be reached is an error at start; at run time its REGISTERs and lookups are answered 503 with Retry-After. A reload keeps the store the server started with.",
		set: func(c *Config, v value) { c.LocationStore = v.s }},
	{Name: "domain", Kind: kindString, Doc: "The SIP domains this server is registrar and proxy for, separated by spaces or commas (`\"example.com example.org\"`). is_myself() is true of them as of this server's own addresses. An address of record is `sip:user@domain` (RFC 3261 section 10), and a user registered or called by one of this server's own addresses is filed under the first domain, so that every node of a cluster finds it whichever address was used. Without it, the first socket's IP address stands in (with its port too, when not 5060, under aor_keep_port). Must be the same on every node that shares a location_store.",
		set: func(c *Config, v value) { c.Domains = splitList(v.s) }},
	{Name: "nat_keepalive_interval", Kind: kindDuration, Default: "0s", Min: 0, Max: 3600, HasMax: true, Doc: "How often a timer worker sends a keep-alive to every binding a REGISTER saved after fix_nated_register() over UDP, from the server's SIP socket to the address the REGISTER came from, so that the phone's NAT keeps its mapping open and calls reach it; 0 = none (Kamailio's nathelper natping_interval). 20s to 30s suits most home routers.",
		set: func(c *Config, v value) { c.NAT.KeepaliveInterval = v.d }},
	{Name: "nat_keepalive_method", Kind: kindEnum, Default: "OPTIONS", Enum: []string{"OPTIONS", "CRLF"}, Doc: "What a NAT keep-alive is: `OPTIONS`, a SIP OPTIONS request to the contact that the phone answers (Kamailio's sipping_method), or `CRLF`, a datagram of two CRLFs that phones ignore and NATs count as traffic.",
		set: func(c *Config, v value) { c.NAT.KeepaliveMethod = v.s }},
	{Name: "aor_keep_port", Kind: kindBool, Default: "no", Doc: "File an address of record with the port of its URI: `sip:carol@example.com:5070` apart from `sip:carol@example.com`. By default an AOR is user@domain, the port dropped, as Kamailio's usrloc files it, so that a phone registered as `sip:carol@127.0.0.1` is found by an INVITE to `sip:carol@127.0.0.1:5070`. Without it, bindings filed with a port (by a server with it, or before the port was dropped) are moved to their AOR without it when sipvisor starts, or reloads to that setting. With it, bindings filed without a port are found again at their next REGISTER. Must be the same on every node that shares a location_store.",
		set: func(c *Config, v value) { c.AORKeepPort = v.b }},

	{Name: "nonce_expire", Kind: kindDuration, Default: "300s", Min: 1, Max: 86400, HasMax: true, Doc: "How long a digest nonce issued by www_challenge or proxy_challenge is accepted; an older one gets a new challenge with stale=true. Every nonce-count of a nonce is accepted once, on any worker or node sharing the location store.",
		set: func(c *Config, v value) { c.Auth.NonceExpire = v.d }},
	{Name: "auth_algorithms", Kind: kindString, Default: "MD5", Doc: "The digest algorithms challenges offer, in order of preference, one WWW-Authenticate (or Proxy-Authenticate) header each (RFC 8760): `MD5`, `SHA-256`. MD5 alone is what phones answer, as Kamailio's auth module offers by default: baresip 1.0 fails a REGISTER whose 401 carries any SHA-256 challenge, first or second (`Register: Function not implemented`), and JsSIP and many desk phones know MD5 only. `\"MD5 SHA-256\"` adds SHA-256 for clients that choose it; `\"SHA-256 MD5\"` prefers it.",
		set: func(c *Config, v value) { c.Auth.Algorithms = splitAlgorithms(v.s) }},

	{Name: "pike_requests", Kind: kindInt, Default: "0", Min: 0, Max: 1 << 30, HasMax: true, Doc: "Most requests one source address may send within pike_window (Kamailio's pike reqs_density_per_unit); a source past it is banned for ban_time. Counted where requests are read (the front door, each worker that reads its socket directly, each TCP worker), summed by the supervisor to within an eighth of this per reader. 0 = off. A phone sends a few requests a minute; the built-in config sets 100 per 2 s, which a password or extension scanner passes in a fraction of a second.",
		set: func(c *Config, v value) { c.Bans.PikeRequests = int(v.i) }},
	{Name: "pike_window", Kind: kindDuration, Default: "2s", Min: 0.1, Max: 3600, HasMax: true, Doc: "The window pike_requests counts over (Kamailio's pike sampling_time_unit).",
		set: func(c *Config, v value) { c.Bans.PikeWindow = v.d }},
	{Name: "auth_failures_per_source", Kind: kindInt, Default: "0", Min: 0, Max: 1 << 20, HasMax: true, Doc: "Most failed digest authentications (credentials with a wrong response, or for an unknown user or another user's identity) one source address may have within auth_failure_window, the last one banning it for ban_time: Kamailio's htable of failed authentications per source. A challenge (401 or 407 to a request without credentials) is no failure, nor is a stale nonce. 0 = off.",
		set: func(c *Config, v value) { c.Bans.AuthFailuresPerSource = int(v.i) }},
	{Name: "auth_failures_per_user", Kind: kindInt, Default: "0", Min: 0, Max: 1 << 20, HasMax: true, Doc: "Most failed authentications one user may have, from all sources together, within auth_failure_window: past it, each source that fails for that user again is banned at once (guessing spread over many addresses). The user is not locked out: a source that knows the password still authenticates. 0 = off.",
		set: func(c *Config, v value) { c.Bans.AuthFailuresPerUser = int(v.i) }},
	{Name: "auth_failure_window", Kind: kindDuration, Default: "60s", Min: 1, Max: 86400, HasMax: true, Doc: "The window the auth_failures settings count over.",
		set: func(c *Config, v value) { c.Bans.AuthFailureWindow = v.d }},
	{Name: "ban_time", Kind: kindDuration, Default: "300s", Min: 1, Max: 7 * 86400, HasMax: true, Doc: "How long a banned source is refused (Kamailio's ipban htable autoexpire in its sample config); `sipvisor ctl ban rm ADDR` lifts a ban sooner.",
		set: func(c *Config, v value) { c.Bans.BanTime = v.d }},
	{Name: "ban_action", Kind: kindEnum, Default: "drop", Enum: []string{"drop", "reply"}, Doc: "How a banned source is refused: `drop` reads and discards its datagrams, as Kamailio's sample config does with pike, so a scanner learns nothing and gets no amplification; `reply` answers its requests `403 Forbidden`. Either way where the datagram is read, by the front door or the worker reading its socket, before any script runs; a banned source's TCP and TLS connections are closed at accept, and a connection open when the ban came is closed at its next request.",
		set: func(c *Config, v value) { c.Bans.Action = v.s }},
	{Name: "ban_exempt", Kind: kindString, Default: "", Doc: "Addresses and prefixes never counted nor banned, separated by spaces or commas (`\"127.0.0.1 10.0.0.0/8\"`): this host, trunks, load balancers and other proxies that send on behalf of many phones (Kamailio's sample config skips pike for requests from itself).",
		set: func(c *Config, v value) { c.Bans.Exempt, _ = parseExempt(v.s) }},
	{Name: "ds_list_file", Kind: kindString, Doc: "The destination sets of ds_select_dst, a file in Kamailio's dispatcher.list format: one destination a line, `SETID URI [FLAGS [PRIORITY [ATTRS]]]` (flags 1 inactive, 4 disabled; a higher priority comes first; `weight=N` in the attributes for algorithm 9); `#` starts a comment. A relative path is relative to the directory of the file that names it. Read with the config and checked line by line; a reload (`sipvisor ctl reload`, SIGHUP) reads it again, and destinations that stay keep their state.",
		set: func(c *Config, v value) { c.Dispatcher.ListFile = v.s }},
	{Name: "ds_ping_interval", Kind: kindDuration, Default: "10s", Min: 0, Max: 3600, HasMax: true, Doc: "How often the supervisor sends each destination of ds_list_file an OPTIONS probe (except disabled ones); a probe unanswered by the next one failed. 0 = no probing: destinations keep the state the list and `ctl ds set` give them.",
		set: func(c *Config, v value) { c.Dispatcher.PingInterval = v.d }},
	{Name: "ds_probing_threshold", Kind: kindInt, Default: "3", Min: 1, Max: 1000, HasMax: true, Doc: "Probes failed in a row (unanswered, or answered with a code ds_ping_reply_codes does not accept) that make a destination inactive; Kamailio's default is 1, which a single lost datagram trips. A destination inactive is detected within ds_ping_interval × (ds_probing_threshold + 1).",
		set: func(c *Config, v value) { c.Dispatcher.ProbingThreshold = int(v.i) }},
	{Name: "ds_inactive_threshold", Kind: kindInt, Default: "1", Min: 1, Max: 1000, HasMax: true, Doc: "Probes answered in a row that make an inactive destination active again.",
		set: func(c *Config, v value) { c.Dispatcher.InactiveThreshold = int(v.i) }},
	{Name: "ds_ping_reply_codes", Kind: kindString, Doc: "Replies to a probe that count as alive besides any 2xx, as Kamailio writes them: `\"class=4;code=503\"` (a class is the first digit). A backend that answers OPTIONS with 404 or 405 but serves calls wants its code here.",
		set: func(c *Config, v value) { c.Dispatcher.PingReplyCodes = v.s }},
	{Name: "ds_ping_from", Kind: kindString, Default: "sip:dispatcher@localhost", Doc: "From URI of the OPTIONS probes (Kamailio's default).",
		set: func(c *Config, v value) { c.Dispatcher.PingFrom = v.s }},
	{Name: "ds_overload_control", Kind: kindBool, Default: "yes", Doc: "RFC 7339 overload control toward the destinations: the Via of each request relayed to a destination of ds_list_file offers `oc` (with `oc-algo=\"loss\"`), and the loss a destination answers in its responses' Via (`oc=N`, for `oc-validity` ms, newest `oc-seq` only) makes ds_select_dst and ds_next_dst shed N% of the new sessions they would send it, before sending: to another active destination of the set, else answered 503 with Retry-After at once. Requests within a dialog are never shed. `no` offers nothing and ignores any feedback. Either way a destination's 503 with Retry-After and no `oc` takes it out of the rotation for that long (RFC 3261 21.5.4). A reload applies it.",
		set: func(c *Config, v value) { c.Dispatcher.OverloadControl = v.b }},

	{Name: "suspend_enable", Kind: kindBool, Default: "yes", Doc: "Refuse new sessions while any monitor is over its high watermark, until all are under their low ones.",
		set: func(c *Config, v value) { c.Suspend.Enable = v.b }},
	{Name: "suspend_event_queue_usage_high", Kind: kindPercent, Default: "80", Min: 1, Max: 100, HasMax: true, Doc: "Suspend when a group's queued messages reach this share of its queue capacity.",
		set: func(c *Config, v value) { c.Suspend.EventQueueUsage.High = v.f }},
	{Name: "suspend_event_queue_usage_low", Kind: kindPercent, Default: "50", Min: 0, Max: 100, HasMax: true, Doc: "Resume when queue usage is back under this (and every other monitor is under its low watermark).",
		set: func(c *Config, v value) { c.Suspend.EventQueueUsage.Low = v.f }},
	{Name: "suspend_heap_usage_high", Kind: kindPercent, Default: "85", Min: 1, Max: 100, HasMax: true, Doc: "Suspend when a worker's heap reaches this share of worker_memory_limit.",
		set: func(c *Config, v value) { c.Suspend.HeapUsage.High = v.f }},
	{Name: "suspend_heap_usage_low", Kind: kindPercent, Default: "70", Min: 0, Max: 100, HasMax: true, Doc: "Resume when every worker's heap is back under this share.",
		set: func(c *Config, v value) { c.Suspend.HeapUsage.Low = v.f }},
	{Name: "suspend_number_of_sessions_high", Kind: kindInt, Default: "100000", Min: 1, Doc: "Suspend when this many sessions (calls and subscriptions; bindings are none) are open.",
		set: func(c *Config, v value) { c.Suspend.NumberOfSessions.High = float64(v.i) }},
	{Name: "suspend_number_of_sessions_low", Kind: kindInt, Default: "90000", Min: 0, Doc: "Resume when open sessions are back under this.",
		set: func(c *Config, v value) { c.Suspend.NumberOfSessions.Low = float64(v.i) }},
	{Name: "suspend_system_memory_usage_high", Kind: kindPercent, Default: "85", Min: 1, Max: 100, HasMax: true, Doc: "Suspend when system memory use reaches this share of total memory (AppGate's default).",
		set: func(c *Config, v value) { c.Suspend.SystemMemory.High = v.f }},
	{Name: "suspend_system_memory_usage_low", Kind: kindPercent, Default: "70", Min: 0, Max: 100, HasMax: true, Doc: "Resume when system memory use is back under this share (AppGate's default).",
		set: func(c *Config, v value) { c.Suspend.SystemMemory.Low = v.f }},

	{Name: "throttle_enable", Kind: kindBool, Default: "yes", Doc: "Refuse a share of new sessions while worker echo round trips exceed throttle_rtt_threshold.",
		set: func(c *Config, v value) { c.Throttle.Enable = v.b }},
	{Name: "throttle_rtt_threshold", Kind: kindDuration, Default: "1s", Min: 0.001, Max: 60, HasMax: true, Doc: "Echo round trip above which a measurement counts as over.",
		set: func(c *Config, v value) { c.Throttle.RTTThreshold = v.d }},
	{Name: "throttle_count", Kind: kindInt, Default: "3", Min: 1, Max: 100, HasMax: true, Doc: "Consecutive measurements over (or under) the threshold that tighten (or remove) the throttle.",
		set: func(c *Config, v value) { c.Throttle.Count = int(v.i) }},
	{Name: "throttle_step", Kind: kindPercent, Default: "10", Min: 1, Max: 100, HasMax: true, Doc: "Share of new sessions refused more at each tightening.",
		set: func(c *Config, v value) { c.Throttle.StepPercent = v.f }},
	{Name: "echo_interval", Kind: kindDuration, Default: "1s", Min: 0.01, Max: 60, HasMax: true, Doc: "How often each worker is sent an echo, queued behind its real work.",
		set: func(c *Config, v value) { c.Throttle.EchoInterval = v.d }},

	{Name: "max_sessions", Kind: kindInt, Default: "0", Min: 0, Doc: "Most open sessions (calls and subscriptions) on this server; 0 = unlimited.",
		set: func(c *Config, v value) { c.Limits.MaxSessions = int(v.i) }},
	{Name: "max_sessions_per_group", Kind: kindInt, Default: "0", Min: 0, Doc: "Most open sessions per worker group; 0 = unlimited.",
		set: func(c *Config, v value) { c.Limits.MaxSessionsPerGroup = int(v.i) }},
	{Name: "max_sessions_per_socket", Kind: kindInt, Default: "0", Min: 0, Doc: "Most open sessions per socket; 0 = unlimited.",
		set: func(c *Config, v value) { c.Limits.MaxSessionsPerSocket = int(v.i) }},
	{Name: "max_registrations", Kind: kindInt, Default: "0", Min: 0, Doc: "Most bindings in the location store; 0 = unlimited. At the bound a REGISTER that would add a binding is answered 503 with Retry-After; refreshes of live bindings and removals (`Expires: 0`) pass. Bindings are no sessions: only this bounds them.",
		set: func(c *Config, v value) { c.Limits.MaxRegistrations = int(v.i) }},
	{Name: "max_calls", Kind: kindInt, Default: "0", Min: 0, Doc: "Most INVITE dialogs; 0 = unlimited.",
		set: func(c *Config, v value) { c.Limits.MaxCalls = int(v.i) }},
	{Name: "max_call_duration", Kind: kindDuration, Default: "12h", Min: 1, Max: 7 * 86400, HasMax: true, Doc: "How long an answered call counts as a session when no BYE for it passes (it was not record-routed, or its BYE went elsewhere); a call counts from its INVITE until its BYE or the ACK of a final failure. 12 h is the dialog lifetime Kamailio and OpenSIPS default to.",
		set: func(c *Config, v value) { c.Limits.MaxCallDuration = v.d }},
	{Name: "max_subscriptions", Kind: kindInt, Default: "0", Min: 0, Doc: "Most SUBSCRIBE dialogs; 0 = unlimited.",
		set: func(c *Config, v value) { c.Limits.MaxSubscriptions = int(v.i) }},
	{Name: "queue_admission_threshold", Kind: kindPercent, Default: "0", Min: 0, Max: 90, HasMax: true, Doc: "Refuse new sessions to a group whose queue is this full; 0 = no limiting (Junos' range 0..90).",
		set: func(c *Config, v value) { c.Limits.QueueAdmission = v.f }},
	{Name: "queue_delay_admission", Kind: kindDuration, Default: "250ms", Min: 0, Max: 60, HasMax: true, Doc: "Refuse new sessions to a group while a message handed to its least busy worker would wait longer than this (its queue times what a message cost it over the last cycle); 0 = no limiting. Under SIP's T1 (500 ms), so that clients are refused before they retransmit, and independent of how fast the script is.",
		set: func(c *Config, v value) { c.Limits.QueueDelay = v.d }},
	{Name: "max_queue_wait", Kind: kindDuration, Default: "2s", Min: 0, Max: 60, HasMax: true, Doc: "A UDP request that waited longer than this in a worker's queue is dropped unhandled; its client retransmits it, and a retransmission that arrives while the original still waits is dropped by the front door. Over TCP, whose clients do not retransmit, a request that waited longer is answered 503 with Retry-After instead, unless it belongs to a call that is up (in-dialog, ACK, CANCEL), which is handled late rather than never. Bounds the backlog an overload leaves behind in time, so that the group answers promptly again within this long of the load falling; responses are always handled. 0 = no bound. 2 s answered every request of bench/burst.sh's burst, as Kamailio did; 1 s and 500 ms lost 0.1 % and 0.2 % of the steady stream (docs/PERFORMANCE.md).",
		set: func(c *Config, v value) { c.Limits.MaxQueueWait = v.d }},
	{Name: "oc_feedback", Kind: kindBool, Default: "yes", Doc: "RFC 7339 overload control toward the clients that ask for it: a response to a request whose top Via offers `oc` carries, in that Via, the share of new sessions this server asks the sender to shed (`oc=N;oc-algo=\"loss\";oc-validity=MS;oc-seq=S`), whether a worker or the front door (a refusal) answers. The share follows admission's own refusals, recomputed every 250 ms (every second while none is offered and the loss is 0, and while suspended once 100 has been said, if `oc_validity` is at least 1s): of the new sessions offered over the interval a share r refused while clients shed L asks 1-(1-L)(1-r) of them, approached a quarter of the way each interval; an interval without refusals lowers it by 5 points; 100 while suspended. A sender that did not offer `oc` gets no feedback. A reload applies it.",
		set: func(c *Config, v value) { c.OC.Feedback = v.b }},
	{Name: "oc_validity", Kind: kindDuration, Default: "1s", Min: 0.1, Max: 60, HasMax: true, Doc: "The `oc-validity` of the feedback oc_feedback sends: how long a client holds a loss after the last response that said it. Several of the 250 ms intervals, so that a client sees the next value before the last expires.",
		set: func(c *Config, v value) { c.OC.Validity = v.d }},
	{Name: "retry_after", Kind: kindRetry, Default: "5", Min: 0, Max: 86400, HasMax: true, Doc: "Retry-After seconds of each 503 that admission control sends; `MIN-MAX` draws a random value per reply so clients do not all return at once.",
		set: func(c *Config, v value) { c.RetryAfter = RetryAfter{Min: v.lo, Max: v.hi} }},

	{Name: "slow_start_mode", Kind: kindEnum, Default: "off", Enum: []string{"off", "manual", "auto"}, Doc: "Ramp of new sessions to a new or restarted worker: off, manual (a fixed slow_start_value until changed) or auto (grow by slow_start_increment every slow_start_interval up to an equal share).",
		set: func(c *Config, v value) { c.SlowStart.Mode = slowstart.Mode(v.s) }},
	{Name: "slow_start_unit", Kind: kindEnum, Default: "per_second", Enum: []string{"per_second", "percent"}, Doc: "Unit of slow_start_value and slow_start_increment: new sessions per second, or percent of an existing worker's share.",
		set: func(c *Config, v value) { c.SlowStart.Unit = slowstart.Unit(v.s) }},
	{Name: "slow_start_value", Kind: kindInt, Default: "0", Min: 0, Max: 1000000, HasMax: true, Doc: "Manual mode: the rate a new worker receives until the setting changes (0 ends slow start). Auto mode: the rate of its first interval (0 = one slow_start_increment).",
		set: func(c *Config, v value) { c.SlowStart.Value = float64(v.i) }},
	{Name: "slow_start_interval", Kind: kindDuration, Default: "10s", Min: 0, Max: 3600, HasMax: true, Doc: "How often auto mode raises the rate (Citrix ADC's example: 10 s).",
		set: func(c *Config, v value) { c.SlowStart.Interval = v.d }},
	{Name: "slow_start_increment", Kind: kindInt, Default: "4", Min: 0, Max: 1000000, HasMax: true, Doc: "How much auto mode raises the rate each interval (Citrix ADC's example: 4).",
		set: func(c *Config, v value) { c.SlowStart.Increment = float64(v.i) }},

	{Name: "flip_window", Kind: kindDuration, Default: "30m", Min: 1, Max: 86400, HasMax: true, Doc: "How long health status flips are remembered.",
		set: func(c *Config, v value) { c.FlipHealth.Window = v.d }},
	{Name: "flip_threshold", Kind: kindInt, Default: "10", Min: 1, Max: 100000, HasMax: true, Doc: "Status flips (a worker crash and its restart count two; suspend/resume and throttle on/off one each) within flip_window that make /healthz report unhealthy.",
		set: func(c *Config, v value) { c.FlipHealth.Threshold = int(v.i) }},
}

// settingByName indexes settings.
var settingByName = func() map[string]*setting {
	m := make(map[string]*setting, len(settings))
	for i := range settings {
		m[settings[i].Name] = &settings[i]
	}
	return m
}()

func settingNames() []string {
	names := make([]string, len(settings))
	for i, s := range settings {
		names[i] = s.Name
	}
	return names
}

// parse reads text as the setting's kind and checks its range. quoted says the
// text came from a quoted string, which only strings and paths expect but all
// kinds accept.
func (s *setting) parse(text string) (value, error) {
	var v value
	switch s.Kind {
	case kindInt:
		n, err := strconv.ParseInt(text, 10, 64)
		if err != nil {
			return v, fmt.Errorf("%s wants a whole number, have %q", s.Name, text)
		}
		v.i = n
		return v, s.check(float64(n), text)
	case kindBool:
		switch strings.ToLower(text) {
		case "yes", "true", "on", "1":
			v.b = true
		case "no", "false", "off", "0":
		default:
			return v, fmt.Errorf("%s wants yes or no, have %q", s.Name, text)
		}
		return v, nil
	case kindDuration:
		d, err := parseDuration(text)
		if err != nil {
			return v, fmt.Errorf("%s wants a duration such as 500ms, 5s or 2m (a bare number is seconds), have %q", s.Name, text)
		}
		v.d = d
		return v, s.check(d.Seconds(), text)
	case kindPercent:
		f, err := strconv.ParseFloat(strings.TrimSuffix(text, "%"), 64)
		if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
			return v, fmt.Errorf("%s wants a percentage such as 70 or 70%%, have %q", s.Name, text)
		}
		v.f = f
		return v, s.check(f, text)
	case kindString:
		v.s = text
		return v, nil
	case kindEnum:
		for _, e := range s.Enum {
			if strings.EqualFold(e, text) {
				v.s = e
				return v, nil
			}
		}
		msg := fmt.Sprintf("%s wants one of %s, have %q", s.Name, strings.Join(s.Enum, ", "), text)
		if m := didYouMean(strings.ToLower(text), s.Enum); m != "" {
			msg += "; did you mean " + strconv.Quote(m) + "?"
		}
		return v, fmt.Errorf("%s", msg)
	case kindBytes:
		n, err := parseBytes(text)
		if err != nil {
			return v, fmt.Errorf("%s wants a size such as 268435456, 256MiB or 1GB, have %q", s.Name, text)
		}
		v.i = n
		return v, s.check(float64(n), text)
	case kindHostPort:
		hp, err := parseHostPort(text)
		if err != nil {
			return v, fmt.Errorf("%s %v", s.Name, err)
		}
		v.s = hp
		return v, nil
	case kindRetry:
		lo, hi, ok := strings.Cut(text, "-")
		if !ok {
			hi = lo
		}
		a, errA := strconv.ParseUint(lo, 10, 32)
		b, errB := strconv.ParseUint(hi, 10, 32)
		if errA != nil || errB != nil {
			return v, fmt.Errorf("%s wants whole seconds or a range MIN-MAX such as 5-15, have %q", s.Name, text)
		}
		if a > b {
			return v, fmt.Errorf("%s range %q runs backwards; want MIN-MAX with MIN <= MAX", s.Name, text)
		}
		if err := s.check(float64(b), text); err != nil {
			return v, err
		}
		v.lo, v.hi = time.Duration(a)*time.Second, time.Duration(b)*time.Second
		return v, nil
	}
	return v, fmt.Errorf("%s cannot be set this way", s.Name)
}

func (s *setting) check(f float64, text string) error {
	if f < s.Min && s.MinWhy != "" {
		return fmt.Errorf("%s = %s is out of range %s: %s", s.Name, text, s.rangeText(), s.MinWhy)
	}
	if f < s.Min || (s.HasMax && f > s.Max) {
		return fmt.Errorf("%s = %s is out of range %s", s.Name, text, s.rangeText())
	}
	return nil
}

// rangeText gives the allowed range in the kind's own notation.
func (s *setting) rangeText() string {
	switch s.Kind {
	case kindInt, kindDuration, kindPercent, kindBytes, kindRetry, kindGroup:
	default:
		if len(s.Enum) > 0 {
			return strings.Join(s.Enum, " | ")
		}
		return ""
	}
	f := func(x float64) string {
		switch s.Kind {
		case kindDuration:
			return time.Duration(x * float64(time.Second)).String()
		case kindPercent:
			return strconv.FormatFloat(x, 'f', -1, 64) + "%"
		case kindBytes:
			return formatBytes(int64(x))
		}
		return strconv.FormatFloat(x, 'f', -1, 64)
	}
	if !s.HasMax {
		return ">= " + f(s.Min)
	}
	return f(s.Min) + ".." + f(s.Max)
}

func parseDuration(text string) (time.Duration, error) {
	if n, err := strconv.ParseFloat(text, 64); err == nil {
		if math.IsNaN(n) || math.IsInf(n, 0) || math.Abs(n) > 1e9 {
			return 0, fmt.Errorf("bad duration")
		}
		return time.Duration(n * float64(time.Second)), nil
	}
	return time.ParseDuration(text)
}

var byteUnits = []struct {
	suffix string
	mult   int64
}{
	{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30},
	{"KB", 1000}, {"MB", 1000 * 1000}, {"GB", 1000 * 1000 * 1000},
	{"B", 1},
}

func parseBytes(text string) (int64, error) {
	mult := int64(1)
	num := text
	for _, u := range byteUnits {
		if strings.HasSuffix(text, u.suffix) {
			mult, num = u.mult, strings.TrimSuffix(text, u.suffix)
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n < 0 || n > math.MaxInt64/mult {
		return 0, fmt.Errorf("bad size")
	}
	return n * mult, nil
}

func formatBytes(n int64) string {
	for _, u := range byteUnits[:3] {
		if n >= u.mult && n%u.mult == 0 && n/u.mult < 1024 {
			return strconv.FormatInt(n/u.mult, 10) + u.suffix
		}
	}
	return strconv.FormatInt(n, 10)
}

// SettingNames lists every global setting, in the reference's order.
func SettingNames() []string { return settingNames() }

// splitList reads a list written with spaces or commas between its items.
func splitList(s string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\t' }) {
		out = append(out, strings.ToLower(f))
	}
	return out
}

// parseExempt reads ban_exempt: addresses (a /32 or /128 each) and
// prefixes.
func parseExempt(s string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, f := range splitList(s) {
		if p, err := netip.ParsePrefix(f); err == nil {
			out = append(out, p.Masked())
			continue
		}
		a, err := netip.ParseAddr(f)
		if err != nil {
			return out, fmt.Errorf("ban_exempt: %q is neither an address nor a prefix such as 10.0.0.0/8", f)
		}
		a = a.Unmap()
		out = append(out, netip.PrefixFrom(a, a.BitLen()))
	}
	return out, nil
}

// splitAlgorithms reads auth_algorithms, upper-cased.
func splitAlgorithms(s string) []string {
	var out []string
	for _, f := range splitList(s) {
		out = append(out, strings.ToUpper(f))
	}
	return out
}
