package registrar

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// A user registers with SIPp's register scenario; calls to that user then
// reach the SIPp UAS at the registered contact, and `ctl ul show` lists the
// binding. A call to a user who never registered gets 404.
func TestRegisterThenInvite(t *testing.T) {
	t.Parallel()
	s := harness.Start(t, harness.RegistrarCfg())
	uas := harness.SIPpUAS(t).Port
	target := s.SIPAddr("udp")

	r := harness.RunSIPp(t, 30*time.Second, "-sn", "uac", target, "-s", "alice", "-i", "127.0.0.1",
		"-m", "1", "-timeout", "20", "-timeout_error")
	if r.Successful != 0 || r.Failed != 1 {
		t.Fatalf("want the call to an unregistered user to fail, have %d successful, %d failed\n%s", r.Successful, r.Failed, harness.Tail(r.Out, 40))
	}
	if !strings.Contains(r.Out, "404") {
		t.Errorf("want a 404 for an unregistered user on SIPp's screen\n%s", harness.Tail(r.Out, 60))
	}

	r = harness.RunSIPp(t, 30*time.Second, "-sf", harness.Testdata("register.xml"), target, "-s", "alice", "-key", "contact_port", strconv.Itoa(uas),
		"-i", "127.0.0.1", "-m", "1", "-timeout", "20", "-timeout_error")
	if r.Exit != 0 || r.Successful != 1 || r.Failed != 0 {
		t.Fatalf("want 1 successful registration, have %d/%d (exit %d)\n%s", r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 40))
	}

	out, err := s.Ctl("ul", "show")
	if err != nil {
		t.Fatalf("ctl ul show: %v: %s", err, out)
	}
	contact := "sip:alice@127.0.0.1:" + strconv.Itoa(uas)
	if !strings.Contains(out, "alice") || !strings.Contains(out, contact) {
		t.Errorf("want ul show to list alice at %s, have\n%s", contact, out)
	}

	r = harness.RunSIPp(t, 60*time.Second, "-sn", "uac", target, "-s", "alice", "-i", "127.0.0.1",
		"-r", "10", "-m", "20", "-d", "200", "-timeout", "40", "-timeout_error")
	if r.Exit != 0 || r.Successful != 20 || r.Failed != 0 {
		t.Fatalf("want 20 calls to the registered user to succeed, have %d/%d (exit %d)\n%s\n%s",
			r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 40), harness.Tail(s.Log.String(), 20))
	}
}
