package harness

import (
	"fmt"
	"strconv"
	"strings"
	"testing"

	"github.com/sipvisor/sipvisor/config"
)

// Sockets0 are the lines of the tests' configs for a UDP and a TCP socket
// and the control address, each on port 0: Start learns the ports bound.
const Sockets0 = `
socket = udp:127.0.0.1:0
socket = tcp:127.0.0.1:0
http_listen = 127.0.0.1:0
`

// ProxyCfg is a stateful proxy to a SIPp UAS. SIPp's built-in UAS does not
// echo Record-Route, so in-dialog requests arrive without Route and are sent
// to the UAS as well.
func ProxyCfg(uasPort int, extra string) string {
	return ProxyCfgTo("sip:127.0.0.1:"+strconv.Itoa(uasPort), extra)
}

// ProxyCfgTo is ProxyCfg with the UAS given as a URI (;transport=tcp).
func ProxyCfgTo(uas string, extra string) string {
	return ProxyConfig(uas, extra, false)
}

// ProxyConfig is the proxy to uas, also a registrar when registrar is set.
func ProxyConfig(uas string, extra string, registrar bool) string {
	register := ""
	if registrar {
		register = `
	if (is_method("REGISTER")) { save("location"); exit; }`
	}
	return Sockets0 + extra + `
route {
	if (!mf_process_maxfwd_header(10)) { sl_send_reply(483, "Too Many Hops"); exit; }
	if (has_totag()) {
		if (!loose_route())
			$du = "` + uas + `";
		t_relay();
		exit;
	}
	if (is_method("CANCEL")) { if (t_check_trans()) t_relay(); exit; }
	t_check_trans();` + register + `
	if (is_method("INVITE")) record_route();
	$du = "` + uas + `";
	if (!t_relay()) sl_send_reply(500, "Internal Server Error");
}
`
}

// OverloadCfg is ProxyCfg plus a registrar, so that new INVITEs, new
// REGISTERs and refreshes of existing bindings can all be tried on one
// server. Cycles are short so that a watermark change takes effect quickly.
// The guards that answer to how busy the machine is (the echo throttle and
// queue-delay admission) are off, as GuardsOff says.
func OverloadCfg(uasPort int, extra string) string {
	return ProxyConfig("sip:127.0.0.1:"+strconv.Itoa(uasPort),
		"udp_workers = 1\ntcp_workers = 1\nauto_scaling_cycle = 0.2\n"+GuardsOff+extra, true)
}

// GuardsOff turns off the guards that refuse new sessions when workers are
// slow to answer (the echo throttle, queue-delay admission), for tests of
// other guards: on a machine busy with other tests, a worker scheduled late
// would otherwise have a new session that a test expects admitted refused.
// The tests of those two guards set them on.
const GuardsOff = "throttle_enable = no\nqueue_delay_admission = 0\n"

// RegistrarCfg is the built-in registrar and stateful proxy script, with
// one change: SIPp's UAS does not echo Record-Route, so its
// caller sends ACK and BYE back here with this server's address as the
// Request-URI and no Route header. Such a request is looked up in the
// location table again, as the INVITE was, instead of being refused with
// 404 as config/default.cfg does.
func RegistrarCfg() string {
	return Sockets0 + `udp_workers = 2
tcp_workers = 1

route {
	if (!mf_process_maxfwd_header(10)) {
		sl_send_reply(483, "Too Many Hops");
		exit;
	}
	if (has_totag()) {
		if (!loose_route()) {
			if (!is_myself($ru) || !lookup("location")) {
				sl_send_reply(404, "Not Here");
				exit;
			}
		}
		route(relay);
	}
	if (is_method("CANCEL")) {
		if (t_check_trans())
			t_relay();
		exit;
	}
	t_check_trans();
	if (is_method("REGISTER")) {
		save("location");
		exit;
	}
	if (is_method("INVITE"))
		record_route();
	if (!is_myself($ru))
		route(relay);
	if (!lookup("location")) {
		sl_send_reply(404, "Not Found");
		exit;
	}
	route(relay);
}

route[relay] {
	if (!t_relay())
		sl_send_reply(500, "Internal Server Error");
	exit;
}
`
}

// TLSConfig is the registrar script with a tls: socket, on port 0 too,
// beside UDP and TCP.
func TLSConfig(pki *PKI, extra string) string {
	return strings.Replace(RegistrarCfg(), "http_listen", fmt.Sprintf(`socket = tls:127.0.0.1:0
tls_certificate = "%s"
tls_private_key = "%s"
tls_ca_list = "%s"
%s
http_listen`, pki.Path("server.pem"), pki.Path("server.key"), pki.Path("ca.pem"), extra), 1)
}

// DefaultCfg0 is the built-in config with its SIP sockets and its control
// address on port 0.
func DefaultCfg0(t testing.TB) string {
	t.Helper()
	cfg := config.DefaultText
	for _, s := range []string{"socket = udp:127.0.0.1:5060", "socket = tcp:127.0.0.1:5060", "http_listen = 127.0.0.1:8888"} {
		if !strings.Contains(cfg, s) {
			t.Fatalf("the built-in config has no line %q any more", s)
		}
	}
	cfg = strings.ReplaceAll(cfg, "127.0.0.1:5060", "127.0.0.1:0")
	return strings.ReplaceAll(cfg, "127.0.0.1:8888", "127.0.0.1:0")
}

// WithoutAuth takes the digest authentication out of the built-in
// config's script, for tests of other things that register by hand.
func WithoutAuth(t testing.TB, cfg string) string {
	t.Helper()
	for _, block := range []string{`
		if (!www_authorize("", "subscriber")) {
			www_challenge("", "0");
			exit;
		}
		consume_credentials();`, `
	if (is_myself($fu)) {
		if (!proxy_authorize("", "subscriber")) {
			proxy_challenge("", "0");
			exit;
		}
		consume_credentials();
	}`} {
		if !strings.Contains(cfg, block) {
			t.Fatalf("the built-in config's authentication changed; update WithoutAuth:\n%s", block)
		}
		cfg = strings.Replace(cfg, block, "", 1)
	}
	return cfg
}

// OptionsRoute answers OPTIONS with reason as its reason phrase, and
// everything else 403, so that a test can tell which script a worker runs.
func OptionsRoute(reason string) string {
	return `
route {
	if (is_method("OPTIONS")) {
		sl_send_reply(200, "` + reason + `");
		exit;
	}
	sl_send_reply(403, "Forbidden");
}
`
}
