package e2e

import (
	"strconv"
	"testing"
	"time"
)

// proxyCfg is a stateful proxy to a SIPp UAS. SIPp's built-in UAS does not
// echo Record-Route, so in-dialog requests arrive without Route and are sent
// to the UAS as well.
func proxyCfg(sipPort, uasPort int, extra string) string {
	return proxyCfgTo("sip:127.0.0.1:"+strconv.Itoa(uasPort), sipPort, extra)
}

// proxyCfgTo is proxyCfg with the UAS given as a URI (;transport=tcp).
func proxyCfgTo(uas string, sipPort int, extra string) string {
	return proxyConfig(uas, sipPort, extra, false)
}

// proxyConfig is the proxy to uas, also a registrar when registrar is set.
func proxyConfig(uas string, sipPort int, extra string, registrar bool) string {
	register := ""
	if registrar {
		register = `
	if (is_method("REGISTER")) { save("location"); exit; }`
	}
	return `
socket = udp:127.0.0.1:` + strconv.Itoa(sipPort) + `
socket = tcp:127.0.0.1:` + strconv.Itoa(sipPort) + `
http_listen = 127.0.0.1:HTTP_PORT
` + extra + `
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

// sippCallsOverUDP runs 300 calls sipp -sn uac → sipvisor (2 UDP workers,
// and extra settings) → sipp -sn uas and fails the test unless every one
// completes.
func sippCallsOverUDP(t *testing.T, extra string) *server {
	t.Helper()
	sip, uas, uac := freePort(t), freePort(t), freePort(t)
	s := startServer(t, proxyCfg(sip, uas, "udp_workers = 2\ntcp_workers = 1\n"+extra))
	sippUAS(t, uas)
	r := runSIPp(t, 90*time.Second, "-sn", "uac", "127.0.0.1:"+strconv.Itoa(sip), "-i", "127.0.0.1", "-p", strconv.Itoa(uac),
		"-r", "50", "-m", "300", "-d", "200", "-timeout", "60", "-timeout_error")
	if r.Exit != 0 || r.Successful != 300 || r.Failed != 0 {
		t.Fatalf("want 300 successful calls and 0 failed, have %d/%d (exit %d)\n%s", r.Successful, r.Failed, r.Exit, tail(r.Out, 40))
	}
	return s
}

// sipp -sn uac → sipvisor → sipp -sn uas completes every call over UDP.
func TestSIPpCallsOverUDP(t *testing.T) {
	s := sippCallsOverUDP(t, "")
	if v := s.metric("sipvisor_frontdoor_admitted_sessions_total", `kind="call"`); v != 300 {
		t.Errorf("want 300 calls admitted at the front door, have %v", v)
	}
}

// With reply sockets, the UAS's responses go straight to the workers: the
// front door reads only the uac's requests (INVITE, ACK, BYE).
func TestSIPpCallsOverUDPWithReplySockets(t *testing.T) {
	s := sippCallsOverUDP(t, "worker_reply_sockets = yes")
	// Retransmissions may add a few; the UAS's 180, 200 and 200 to BYE
	// would add 900.
	if v := s.metric("sipvisor_frontdoor_datagrams_received_total", ""); v < 900 || v > 1000 {
		t.Errorf("want the front door to read the uac's 900 requests and at most a few retransmissions, have %v", v)
	}
	s.stopDrained()
}

// The same over TCP: the supervisor accepts and hands each connection to a
// TCP worker.
func TestSIPpCallsOverTCP(t *testing.T) {
	sip, uas, uac := freePort(t), freePort(t), freePort(t)
	s := startServer(t, proxyCfgTo("sip:127.0.0.1:"+strconv.Itoa(uas)+";transport=tcp", sip, "udp_workers = 1\ntcp_workers = 2"))
	sippUAS(t, uas, "-t", "t1")
	r := runSIPp(t, 90*time.Second, "-sn", "uac", "127.0.0.1:"+strconv.Itoa(sip), "-i", "127.0.0.1", "-p", strconv.Itoa(uac),
		"-t", "t1", "-r", "20", "-m", "100", "-d", "100", "-timeout", "60", "-timeout_error")
	if r.Exit != 0 || r.Successful != 100 || r.Failed != 0 {
		t.Fatalf("want 100 successful calls over TCP and 0 failed, have %d/%d (exit %d)\n%s\n%s", r.Successful, r.Failed, r.Exit, tail(r.Out, 40), tail(s.log.String(), 20))
	}
}
