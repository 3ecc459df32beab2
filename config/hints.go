package config

// The names Kamailio and OpenSIPS users type, with what sipvisor has instead.
// A name sipvisor itself defines always wins over these, so a setting or a
// block added later needs no change here.

const blocksWeHave = "blocks are route, onreply_route, failure_route and timer_route"

// foreignItems are top-level lines of other servers that have no place here;
// the line is reported and left out.
var foreignItems = map[string]string{
	"loadmodule":  "sipvisor has no modules to load: the registrar, transactions, authentication and every script function are built in (docs/SCRIPT.md lists them); delete the loadmodule lines",
	"loadpath":    "sipvisor has no modules, so no module path; delete this line",
	"mpath":       "sipvisor has no modules, so no module path; delete this line",
	"modparam":    "sipvisor has no modules: what a modparam sets is a setting of its own here, such as location_store for usrloc's db_url (docs/CONFIG.md lists them); delete the modparam lines",
	"import_file": `import_file is written include_file here: include_file "FILE"`,
}

// foreignBlocks are blocks of other servers, and blockFor the block of ours
// that does the same job, when there is one.
var foreignBlocks = map[string]string{
	"request_route": "request_route is written route here: route { ... }",
	"reply_route":   "reply_route is written onreply_route here: onreply_route { ... }",
	"branch_route":  "sipvisor has no branch_route; " + blocksWeHave,
	"onsend_route":  "sipvisor has no onsend_route; " + blocksWeHave,
	"event_route":   "sipvisor has no event_route; " + blocksWeHave,
	"startup_route": "sipvisor has no startup_route; " + blocksWeHave,
	"local_route":   "sipvisor has no local_route; " + blocksWeHave,
	"error_route":   "sipvisor has no error_route; " + blocksWeHave,
}

var blockFor = map[string]string{"request_route": "route", "reply_route": "onreply_route"}

// foreignStatements are statements of other scripting languages.
var foreignStatements = map[string]string{
	"switch": "switch is not supported; write it as if (...) { ... } else if (...) { ... }",
	"case":   "case is not supported; write it as if (...) { ... } else if (...) { ... }",
	"while":  "loops are not supported in a sipvisor script",
	"break":  "break is not supported; end a route with exit or return",
}

// settingHints follow "unknown setting NAME: ".
var settingHints = map[string]string{
	"children":          "sipvisor calls it udp_workers, the number of UDP worker processes",
	"tcp_children":      "sipvisor calls it tcp_workers, the number of TCP and TLS worker processes",
	"async_workers":     "sipvisor has no async workers; udp_workers, tcp_workers and timer_workers set the groups",
	"debug":             "sipvisor calls it log_level: log_level = debug, info, warn or error",
	"log_stderror":      "sipvisor always logs to standard error; delete this line",
	"stderror_enabled":  "sipvisor always logs to standard error; delete this line",
	"syslog_enabled":    "sipvisor always logs to standard error; delete this line",
	"log_facility":      "sipvisor logs to standard error, not to syslog; delete this line",
	"syslog_facility":   "sipvisor logs to standard error, not to syslog; delete this line",
	"fork":              "sipvisor runs in the foreground under its supervisor process (docs/RUNNING.md); delete this line",
	"port":              "the port is part of each socket here: socket = udp:IP:PORT",
	"alias":             "sipvisor calls it domain: domain = example.com",
	"enable_tls":        "TLS is on when a socket = tls:IP:PORT line is present; delete this line",
	"disable_tcp":       "TCP is on only when a socket = tcp:IP:PORT line is present; delete this line",
	"auto_aliases":      "sipvisor knows its own addresses from its sockets; set domain for the others",
	"mhomed":            "sipvisor sends from the socket a request came in on; delete this line",
	"server_header":     "sipvisor does not set a Server header; delete this line",
	"user_agent_header": "sipvisor does not set a User-Agent header; delete this line",
	"server_signature":  "sipvisor does not set a Server header; delete this line",
	"dns":               "sipvisor does no DNS lookups of its own; delete this line",
	"rev_dns":           "sipvisor does no DNS lookups of its own; delete this line",
	"dns_try_ipv6":      "sipvisor does no DNS lookups of its own; delete this line",
	"sip_warning":       "sipvisor adds no Warning header; delete this line",
	"memlog":            "sipvisor has no memory log; delete this line",
	"memdbg":            "sipvisor has no memory log; delete this line",
	"maxbuffer":         "sipvisor sizes its socket buffers itself; delete this line",
}

// functionHints follow "unknown function NAME: ".
var functionHints = map[string]string{
	"t_reply":          "sipvisor answers with sl_send_reply(code, reason), which goes through the transaction when there is one",
	"sl_reply_error":   `sipvisor has no internal error to report; answer with sl_send_reply(500, "Server Internal Error")`,
	"send_reply":       "sipvisor answers with sl_send_reply(code, reason), which goes through the transaction when there is one",
	"t_newtran":        "sipvisor makes the transaction itself when t_relay sends the request on; delete this line",
	"setflag":          "a sipvisor script has no flags; keep a value in a variable such as $var(name)",
	"resetflag":        "a sipvisor script has no flags; keep a value in a variable such as $var(name)",
	"isflagset":        "a sipvisor script has no flags; test a variable such as $var(name)",
	"auth_check":       "sipvisor checks credentials with www_authorize(realm) for REGISTER and proxy_authorize(realm) for other requests",
	"registered":       `sipvisor asks the store with lookup("location"), which is false when the AOR has no binding`,
	"ds_select_domain": "sipvisor selects with ds_select_dst(set, alg), which sets $du and leaves the Request-URI as it is",
	"ds_select":        "sipvisor selects with ds_select_dst(set, alg), which sets $du",
	"ds_next_domain":   "sipvisor fails over with ds_next_dst(), which sets $du",
}
