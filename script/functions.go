package script

import "sort"

// FuncSpec describes a script function: how many arguments it takes and one
// line for the docs. The routing engine pairs each name with its
// implementation; the config loader uses the table to reject unknown names and
// wrong argument counts before anything runs.
type FuncSpec struct {
	MinArgs int
	MaxArgs int
	Doc     string
}

// Functions lists every function a script may call, by name.
var Functions = map[string]FuncSpec{
	"sl_send_reply":            {2, 2, "sl_send_reply(code, reason): send a stateless reply, e.g. sl_send_reply(404, \"Not Found\")."},
	"t_relay":                  {0, 1, "t_relay([flags]): forward the request statefully to $du, or $ru when $du is unset; false when it cannot be sent."},
	"t_on_reply":               {1, 1, "t_on_reply(name): run onreply_route[name] for replies of this transaction."},
	"t_on_failure":             {1, 1, "t_on_failure(name): run failure_route[name] when the transaction ends with a negative reply."},
	"t_check_trans":            {0, 0, "t_check_trans(): true when the request belongs to a known transaction; retransmissions are absorbed, a CANCEL or ACK is matched."},
	"record_route":             {0, 0, "record_route(): add a Record-Route header so in-dialog requests come back through this server."},
	"loose_route":              {0, 0, "loose_route(): follow the Route headers of an in-dialog request; true when one applied."},
	"mf_process_maxfwd_header": {1, 1, "mf_process_maxfwd_header(n): add Max-Forwards: n when missing, else decrement it; false when it reached 0."},
	"is_method":                {1, 1, "is_method(\"INVITE|REGISTER\"): true when the request method is one of the |-separated names."},
	"has_totag":                {0, 0, "has_totag(): true when the To header has a tag, i.e. the request is in-dialog."},
	"is_myself":                {1, 1, "is_myself(uri): true when the URI's host and port are one of this server's sockets, or its host a served domain (the domain setting)."},
	"save":                     {1, 1, "save(table): store the REGISTER's contacts under its To AOR (sip:user@domain) in the location store and reply 200; 503 with Retry-After when the store is out of reach, 403 for a contact that is this server."},
	"lookup":                   {1, 1, "lookup(table): rewrite $ru to the registered contact of the request URI's AOR; false when none; answers 503 with Retry-After itself when the store is out of reach."},
	"www_authorize":            {1, 2, "www_authorize(realm[, table]): true when the request carries an Authorization header for realm (\"\" = the To domain) whose digest matches the stored HA1 of the To user, with a nonce this server issued that has not expired and a nonce-count not seen before; false otherwise, the same for an unknown user as for a wrong password. Answers 503 itself when the store is out of reach."},
	"proxy_authorize":          {1, 2, "proxy_authorize(realm[, table]): as www_authorize, with the Proxy-Authorization header and the From user (\"\" = the From domain)."},
	"www_challenge":            {1, 2, "www_challenge(realm[, flags]): reply 401 with a WWW-Authenticate challenge per auth_algorithms, a fresh nonce and qop=auth (stale=true after an expired nonce)."},
	"proxy_challenge":          {1, 2, "proxy_challenge(realm[, flags]): reply 407 with Proxy-Authenticate challenges, as www_challenge."},
	"consume_credentials":      {0, 0, "consume_credentials(): remove the credentials the last www_authorize or proxy_authorize accepted, so they are not relayed."},
	"append_hf":                {1, 1, "append_hf(\"Name: value\\r\\n\"): append a header to the request."},
	"remove_hf":                {1, 1, "remove_hf(name): remove every header of that name."},
	"xlog":                     {1, 2, "xlog([level,] text): log text with pseudo-variables expanded; level L_ERR, L_WARN, L_INFO (default) or L_DBG."},
	"force_rport":              {0, 0, "force_rport(): add rport to the top Via so replies go to the source port (RFC 3581)."},
	"nat_uac_test":             {1, 1, "nat_uac_test(flags): true when any test of flags (their sum) says the sender is behind NAT: 1 Contact private, 2 Via address not the source, 4 Via private, 8 SDP private, 16 Via port not the source port, 32 source private, 64 WebSocket, 128 Contact port not the source port, 256 SDP address not the source (Kamailio's nathelper)."},
	"fix_nated_contact":        {0, 0, "fix_nated_contact(): rewrite the Contact URI's host and port to the address the message came from (a request, or a reply in onreply_route)."},
	"fix_nated_register":       {0, 0, "fix_nated_register(): have save() record the address this REGISTER came from, so that lookup() sets $du to it (UDP) and nat_keepalive_interval keeps the NAT open."},
	"ds_select_dst":            {2, 3, "ds_select_dst(set, alg[, limit]): set $du to a usable destination of set (ds_list_file) chosen by alg, as Kamailio numbers them: 0 hash over Call-ID, 1 hash over From URI, 2 hash over To URI, 3 hash over Request-URI, 4 round-robin, 6 random, 8 first by priority, 9 weight; the others after it, up to limit in all, are kept for ds_next_dst. False when none is usable (all inactive, disabled or draining)."},
	"ds_next_dst":              {0, 0, "ds_next_dst(): in a failure_route, set $du to the next usable destination ds_select_dst kept for this transaction; false when none is left. Then t_relay() sends the request there."},
	"ds_is_from_list":          {0, 2, "ds_is_from_list([set[, mode]]): true when the request came from the address and port of a destination of set (of any set without one, or with set -1); mode 1 ignores the port."},
	"ds_mark_dst":              {0, 1, "ds_mark_dst([state]): mark the destination this transaction was last sent to: \"i\" or \"p\" (default) inactive until it answers a probe, \"a\" active; every worker learns it through the supervisor."},
	"t_set_fr":                 {1, 2, "t_set_fr(fr_inv[, fr]): this transaction's timeouts in milliseconds, as Kamailio's: fr_inv, how long an INVITE may ring after a provisional reply, and fr, how long a branch may go without any reply before it ends with a local 408 (at most 64×T1, 32 s, the default); 0 keeps the default. A dispatcher sets fr to fail over to the next destination in seconds rather than 32."},
	"usleep":                   {1, 1, "usleep(us): block this worker for us microseconds, as a slow database call would."},
	"sleep":                    {1, 1, "sleep(s): block this worker for s seconds."},
	"cpu_burn":                 {1, 1, "cpu_burn(us): spin the CPU for us microseconds; a test and demo knob that makes each message cost a known amount of work."},
}

// FunctionNames returns the names of Functions in sorted order.
func FunctionNames() []string {
	names := make([]string, 0, len(Functions))
	for n := range Functions {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}
