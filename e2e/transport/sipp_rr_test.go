package transport

import (
	"bytes"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// calleeUAS runs `sipload -sn uas` on port for calls calls, bounded by
// limit; wait returns its exit code and summary.
func calleeUAS(t *testing.T, port, calls int, limit time.Duration) (wait func() (int, string)) {
	t.Helper()
	var out bytes.Buffer
	cmd := exec.Command(harness.SiploadBin, "-sn", "uas", "-i", "127.0.0.1", "-p", strconv.Itoa(port),
		"-m", strconv.Itoa(calls), "-timeout", strconv.Itoa(int(limit.Seconds())), "-q")
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() { cmd.Process.Kill(); <-done })
	return func() (int, string) {
		select {
		case <-done:
		case <-time.After(limit + 10*time.Second):
			t.Fatalf("sipload uas did not end within %s", limit)
		}
		return cmd.ProcessState.ExitCode(), out.String()
	}
}

// Behind the built-in config, a callee registers and answers: SIPp's
// built-in uac fails every call (it sends its BYE to the proxy with no
// Route, and the stock script answers 404), while the same scenario
// following Record-Route (examples/sipp-uac-rr.xml) completes every one,
// and so does sipload's uac calling SIPp as the callee when SIPp copies
// Record-Route into its answers (examples/sipp-uas-rr.xml). docs/SIPLOAD.md
// says so.
func TestSIPpThroughTheBuiltInConfig(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("sipp"); err != nil {
		t.Skip("sipp not installed (apt-get install -y sip-tester)")
	}
	// The callee registers from its port, and three callees serve that
	// contact in turn: a port picked up front.
	callee := harness.FreePort(t)
	s := harness.Start(t, harness.DefaultCfg0(t))
	target := s.SIPAddr("udp")
	// The built-in config authenticates REGISTERs, in the realm of its home
	// domain: its first address, without the port.
	if out, err := s.Ctl("user", "add", "alice1@127.0.0.1", "s3cret"); err != nil {
		t.Fatalf("ctl user add: %v: %s", err, out)
	}
	out, err := exec.Command(harness.SiploadBin, target, "-sn", "register", "-s", "alice", "-m", "1", "-ap", "s3cret",
		"-i", "127.0.0.1", "-p", strconv.Itoa(callee), "-q").CombinedOutput()
	if err != nil {
		t.Fatalf("register alice1: %v\n%s", err, out)
	}

	wait := calleeUAS(t, callee, 3, 8*time.Second)
	r := harness.RunSIPp(t, 30*time.Second, "-sn", "uac", "-s", "alice1", target, "-i", "127.0.0.1",
		"-m", "3", "-r", "10", "-timeout", "6s")
	if r.Successful != 0 || r.Failed != 3 {
		t.Fatalf("SIPp's built-in uac: want 0 successful and 3 failed calls, have %d and %d\n%s", r.Successful, r.Failed, harness.Tail(r.Out, 30))
	}
	wait()

	wait = calleeUAS(t, callee, 10, 20*time.Second)
	r = harness.RunSIPp(t, 30*time.Second, "-sf", harness.Path("examples/sipp-uac-rr.xml"), "-s", "alice1", target, "-i", "127.0.0.1",
		"-m", "10", "-r", "20", "-timeout", "15s", "-timeout_error")
	if r.Exit != 0 || r.Successful != 10 || r.Failed != 0 {
		t.Fatalf("sipp-uac-rr.xml: want exit 0 and 10 successful calls, have exit %d, %d successful, %d failed\n%s", r.Exit, r.Successful, r.Failed, harness.Tail(r.Out, 30))
	}
	if code, sum := wait(); code != 0 || !strings.Contains(sum, "succeeded 10  failed 0") {
		t.Fatalf("the callee: want exit 0 and 10 calls succeeded, have %d\n%s", code, sum)
	}

	uas := exec.Command("sipp", "-sf", harness.Path("examples/sipp-uas-rr.xml"), "-i", "127.0.0.1", "-p", strconv.Itoa(callee),
		"-nostdin", "-buff_size", "4194304")
	if err := uas.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { uas.Process.Kill(); uas.Wait() })
	// A call placed before SIPp reads its socket is retransmitted to it by
	// the proxy's transaction.
	out, err = exec.Command(harness.SiploadBin, target, "-sn", "uac", "-s", "alice1", "-m", "10", "-r", "20", "-timeout", "15", "-q").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "succeeded 10  failed 0") {
		t.Fatalf("sipload uac to SIPp's sipp-uas-rr.xml: want 10 calls succeeded, have %v\n%s", err, out)
	}
}
