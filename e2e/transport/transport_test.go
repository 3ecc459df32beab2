package transport

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// Calls through the registrar script between callers and callees on UDP
// and TCP, each pair both ways: SIPp calls a user registered at a SIPp UAS
// that listens on the other transport, and the call completes — the
// callee's answers reach the worker that holds the caller's transaction,
// whatever socket they come to. A TCP caller's call to a UDP callee timed
// out with 408: the callee's 180 and 200 came to the UDP socket, and no
// UDP worker knew the call.
func TestCallsAcrossTransports(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("four SIPp runs")
	}
	s := harness.Start(t, strings.Replace(harness.RegistrarCfg(), "tcp_workers = 1", "tcp_workers = 2", 1))
	for _, tr := range []string{"udp", "tcp"} {
		port := harness.SIPpUAS(t, "-t", map[string]string{"udp": "u1", "tcp": "t1"}[tr]).Port
		r := harness.RunSIPp(t, 30*time.Second, "-sf", harness.Testdata("register_transport.xml"), s.SIPAddr("udp"), "-s", "bob-"+tr,
			"-key", "contact_port", strconv.Itoa(port), "-key", "contact_transport", tr,
			"-i", "127.0.0.1", "-m", "1", "-timeout", "20", "-timeout_error")
		if r.Exit != 0 || r.Successful != 1 {
			t.Fatalf("register bob-%s: have %d/%d (exit %d)\n%s", tr, r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 30))
		}
	}
	// A TCP caller that takes no connection, as phones behind NAT and
	// sipload do: SIPp accepts one, which hid the lost answers.
	t.Run("tcp-connection-only-to-udp", func(t *testing.T) {
		ua := harness.NewTCPUA(t, s.SIPPort("tcp"))
		for i := range 3 {
			call := harness.NewID() + "@tcp-only"
			m, to := ua.InviteTo("bob-udp", call)
			if m.Code != 200 {
				t.Fatalf("call %d: want 200, have %d\n%s\n%s", i, m.Code, m.Raw, harness.Tail(s.Log.String(), 20))
			}
			ua.SendTo("bob-udp", "BYE", call, 2, to)
			if bye := ua.Final(call, "BYE"); bye.Code != 200 {
				t.Fatalf("call %d: BYE: want 200, have %d\n%s", i, bye.Code, bye.Raw)
			}
		}
	})
	for _, from := range []string{"udp", "tcp"} {
		for _, to := range []string{"udp", "tcp"} {
			t.Run(from+"-to-"+to, func(t *testing.T) {
				r := harness.RunSIPp(t, 60*time.Second, "-sn", "uac", s.SIPAddr(from), "-s", "bob-"+to,
					"-t", map[string]string{"udp": "u1", "tcp": "t1"}[from],
					"-i", "127.0.0.1", "-r", "5", "-m", "5", "-d", "200",
					"-timeout", "40", "-timeout_error")
				if r.Exit != 0 || r.Successful != 5 || r.Failed != 0 {
					t.Fatalf("5 calls %s → %s: have %d successful, %d failed (exit %d)\n%s\n%s",
						from, to, r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 40), harness.Tail(s.Log.String(), 20))
				}
			})
		}
	}
}
