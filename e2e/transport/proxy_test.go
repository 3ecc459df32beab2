package transport

import (
	"strconv"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// sippCallsOverUDP runs 300 calls sipp -sn uac → sipvisor (2 UDP workers,
// and extra settings) → sipp -sn uas and fails the test unless every one
// completes.
func sippCallsOverUDP(t *testing.T, extra string) *harness.Server {
	t.Helper()
	uas := harness.SIPpUAS(t).Port
	s := harness.Start(t, harness.ProxyCfg(uas, "udp_workers = 2\ntcp_workers = 1\n"+extra))
	r := harness.RunSIPp(t, 90*time.Second, "-sn", "uac", s.SIPAddr("udp"), "-i", "127.0.0.1",
		"-r", "50", "-m", "300", "-d", "200", "-timeout", "60", "-timeout_error")
	if r.Exit != 0 || r.Successful != 300 || r.Failed != 0 {
		t.Fatalf("want 300 successful calls and 0 failed, have %d/%d (exit %d)\n%s", r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 40))
	}
	return s
}

// sipp -sn uac → sipvisor → sipp -sn uas completes every call over UDP.
func TestSIPpCallsOverUDP(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("hundreds of SIPp calls")
	}
	s := sippCallsOverUDP(t, "")
	if v := s.Metric("sipvisor_frontdoor_admitted_sessions_total", `kind="call"`); v != 300 {
		t.Errorf("want 300 calls admitted at the front door, have %v", v)
	}
}

// With reply sockets, the UAS's responses go straight to the workers: the
// front door reads only the uac's requests (INVITE, ACK, BYE).
func TestSIPpCallsOverUDPWithReplySockets(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("hundreds of SIPp calls")
	}
	s := sippCallsOverUDP(t, "worker_reply_sockets = yes")
	// Retransmissions may add a few; the UAS's 180, 200 and 200 to BYE
	// would add 900.
	// The SIP port's datagrams: the door's, and with direct reads
	// (udp_direct_reads) those the workers read from the port themselves.
	v := s.PortDatagrams()
	if v < 900 || v > 1000 {
		t.Errorf("want the SIP port to read the uac's 900 requests and at most a few retransmissions, have %v", v)
	}
	s.StopDrained()
}

// The same over TCP: the supervisor accepts and hands each connection to a
// TCP worker.
func TestSIPpCallsOverTCP(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("hundreds of SIPp calls")
	}
	uas := harness.SIPpUAS(t, "-t", "t1").Port
	s := harness.Start(t, harness.ProxyCfgTo("sip:127.0.0.1:"+strconv.Itoa(uas)+";transport=tcp", "udp_workers = 1\ntcp_workers = 2"))
	r := harness.RunSIPp(t, 90*time.Second, "-sn", "uac", s.SIPAddr("tcp"), "-i", "127.0.0.1",
		"-t", "t1", "-r", "20", "-m", "100", "-d", "100", "-timeout", "60", "-timeout_error")
	if r.Exit != 0 || r.Successful != 100 || r.Failed != 0 {
		t.Fatalf("want 100 successful calls over TCP and 0 failed, have %d/%d (exit %d)\n%s\n%s", r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 40), harness.Tail(s.Log.String(), 20))
	}
	// Admission open to all and no limit: the workers admit by the gate in
	// their pages, without the supervisor's round trip. A worker asks until
	// its first gate is written, which happens as it becomes routable; the
	// bound leaves room for a loop slowed by a busy machine.
	if asks := s.Metric("sipvisor_admission_asks_total", `group="tcp"`); asks > 10 {
		t.Errorf("TCP workers asked the supervisor about %v of 100 new calls with admission open to all", asks)
	}
}
