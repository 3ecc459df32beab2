package loadgen

import (
	"context"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/testkit"
)

// sippScenario writes `sipp -sd name` to a file: SIPp's own scenarios, as
// a SIPp user starts from them.
func sippScenario(t *testing.T, name string) string {
	t.Helper()
	out, _ := exec.Command(sippPath, "-sd", name).Output() // exits 99 after printing
	if len(out) == 0 {
		t.Fatalf("sipp -sd %s printed nothing", name)
	}
	f := filepath.Join(t.TempDir(), "sipp_"+name+".xml")
	if err := os.WriteFile(f, out, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

func builtinScenario(t *testing.T, name string) string {
	t.Helper()
	b, err := BuiltinXML(name)
	if err != nil {
		t.Fatal(err)
	}
	f := filepath.Join(t.TempDir(), "sipload_"+name+".xml")
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// siploadArgs runs sipload with a SIPp command line, as Main would.
func siploadArgs(t *testing.T, args []string, onListen func(netip.AddrPort)) Stats {
	t.Helper()
	cfg, err := parseArgs(append(args, "-q"), io.Discard)
	if err != nil {
		t.Fatalf("sipload %v: %v", args, err)
	}
	cfg.OnListen = onListen
	if cfg.Timeout == 0 {
		cfg.Timeout = 40 * time.Second
	}
	st, err := Run(context.Background(), cfg.Options)
	if err != nil {
		t.Fatalf("sipload %v: %v", args, err)
	}
	return st
}

// A SIPp user's client scenario runs the same under sipload as under SIPp,
// against SIPp's server: the same calls succeed and fail.
func TestXMLClientScenariosAgreeWithSipp(t *testing.T) {
	t.Parallel()
	needSipp(t)
	if testing.Short() {
		t.Skip("runs SIPp several times")
	}
	for _, tc := range []struct {
		name, file string
	}{
		{"sipp -sd uac", sippScenario(t, "uac")},
		{"sipload -sd uac", builtinScenario(t, "uac")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			counts := map[string][2]int64{}
			for _, tool := range []string{"sipp", "sipload"} {
				port := testkit.FreePort(t)
				peer := startSipp(t, "-sn", "uas", "-i", "127.0.0.1", "-p", strconv.Itoa(port), "-m", "10")
				testkit.WaitListening(t, "udp", port, 10*time.Second)
				args := []string{"127.0.0.1:" + strconv.Itoa(port), "-sf", tc.file, "-i", "127.0.0.1", "-m", "10", "-r", "50", "-d", "20"}
				var ok, failed int64
				if tool == "sipp" {
					s := startSipp(t, args...).wait(t)
					ok, failed = s["SuccessfulCall(C)"], s["FailedCall(C)"]
				} else {
					st := siploadArgs(t, args, nil)
					ok, failed = st.Succeeded, st.Failed
				}
				p := peer.wait(t)
				counts[tool] = [2]int64{ok, failed}
				t.Logf("%s: %d succeeded, %d failed; sipp uas: %d succeeded, %d failed", tool, ok, failed, p["SuccessfulCall(C)"], p["FailedCall(C)"])
			}
			if counts["sipp"] != counts["sipload"] || counts["sipload"][0] != 10 {
				t.Errorf("want the same counts as SIPp (10 succeeded), have sipp %v, sipload %v", counts["sipp"], counts["sipload"])
			}
		})
	}
}

// A SIPp user's server scenario, driven by SIPp's uac: the client and the
// server count the same under sipload as under SIPp.
func TestXMLServerScenariosAgreeWithSipp(t *testing.T) {
	t.Parallel()
	needSipp(t)
	if testing.Short() {
		t.Skip("runs SIPp several times")
	}
	for _, tc := range []struct {
		name, file string
	}{
		{"sipp -sd uas", sippScenario(t, "uas")},
		{"bench/uas.xml", abs(t, "../bench/uas.xml")},
		{"sipload -sd uas", builtinScenario(t, "uas")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			counts := map[string][4]int64{}
			for _, tool := range []string{"sipp", "sipload"} {
				port := testkit.FreePort(t)
				args := []string{"-sf", tc.file, "-i", "127.0.0.1", "-p", strconv.Itoa(port), "-m", "10"}
				var srvOK, srvFailed int64
				var client *sippRun
				if tool == "sipp" {
					srv := startSipp(t, args...)
					testkit.WaitListening(t, "udp", port, 10*time.Second)
					client = startSipp(t, "127.0.0.1:"+strconv.Itoa(port), "-sn", "uac", "-i", "127.0.0.1", "-m", "10", "-r", "50", "-d", "20")
					s := srv.wait(t)
					srvOK, srvFailed = s["SuccessfulCall(C)"], s["FailedCall(C)"]
				} else {
					done := make(chan Stats, 1)
					bound := make(chan struct{})
					go func() { done <- siploadArgs(t, args, func(netip.AddrPort) { close(bound) }) }()
					<-bound
					client = startSipp(t, "127.0.0.1:"+strconv.Itoa(port), "-sn", "uac", "-i", "127.0.0.1", "-m", "10", "-r", "50", "-d", "20")
					st := <-done
					srvOK, srvFailed = st.Succeeded, st.Failed
				}
				c := client.wait(t)
				counts[tool] = [4]int64{srvOK, srvFailed, c["SuccessfulCall(C)"], c["FailedCall(C)"]}
				t.Logf("%s as server: %d succeeded, %d failed; sipp uac: %d succeeded, %d failed", tool, srvOK, srvFailed, c["SuccessfulCall(C)"], c["FailedCall(C)"])
			}
			if counts["sipp"] != counts["sipload"] || counts["sipload"][0] != 10 {
				t.Errorf("want the same counts as SIPp (10 succeeded on each side), have sipp %v, sipload %v", counts["sipp"], counts["sipload"])
			}
		})
	}
}

// abs makes a repository path usable from SIPp's working directory.
func abs(t *testing.T, p string) string {
	t.Helper()
	a, err := filepath.Abs(p)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// -inf fields and -key values reach the messages, -trace_msg logs them, and
// a scenario sipload cannot run is refused with its line before any
// traffic (exit 2).
func TestMainXMLInjectionAndErrors(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	sc := filepath.Join(dir, "ping.xml")
	os.WriteFile(sc, []byte(`<?xml version="1.0" encoding="ISO-8859-1" ?>
<scenario name="ping">
  <send retrans="500">
    <![CDATA[
      OPTIONS sip:[field0]@[remote_ip]:[remote_port] SIP/2.0
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      From: <sip:[field1]@[local_ip]>;tag=[call_number]
      To: <sip:[field0]@[remote_ip]>
      Call-ID: [call_id]
      CSeq: [cseq] OPTIONS
      X-Tenant: [tenant]
      Content-Length: [len]
    ]]>
  </send>
  <recv response="200"/>
</scenario>
`), 0o644)
	inf := filepath.Join(dir, "users.csv")
	os.WriteFile(inf, []byte("SEQUENTIAL\nalice;a1\nbob;b1\n"), 0o644)
	addr, res := startUAS(t, Options{MaxCalls: 2})
	msgs := filepath.Join(dir, "m.log")
	var out, errb strings.Builder
	code := Main(context.Background(), []string{addr.String(), "-sf", sc, "-inf", inf, "-key", "tenant", "acme", "-i", "127.0.0.1",
		"-m", "2", "-r", "20", "-trace_msg", "-message_file", msgs, "-q"}, &out, &errb)
	wait(t, res, "uas")
	if code != ExitOK {
		t.Fatalf("want exit 0, have %d\n%s%s", code, out.String(), errb.String())
	}
	b, _ := os.ReadFile(msgs)
	for _, want := range []string{"OPTIONS sip:alice@", "OPTIONS sip:bob@", "From: <sip:b1@", "X-Tenant: acme", "CSeq: 1 OPTIONS", "SIP/2.0 200 OK"} {
		if !strings.Contains(string(b), want) {
			t.Errorf("want %q in the -trace_msg log\n%s", want, b)
		}
	}

	bad := filepath.Join(dir, "bad.xml")
	os.WriteFile(bad, []byte("<scenario>\n  <send>\n    <![CDATA[\n      OPTIONS sip:x SIP/2.0\n    ]]>\n  </send>\n  <recvCmd/>\n</scenario>\n"), 0o644)
	errb.Reset()
	if code := Main(context.Background(), []string{"127.0.0.1:9", "-sf", bad, "-q"}, io.Discard, &errb); code != ExitUsage ||
		!strings.Contains(errb.String(), bad+":7: element <recvCmd> is not supported") {
		t.Errorf("want exit 2 and %s:7: element <recvCmd> is not supported, have %d %q", bad, code, errb.String())
	}
	errb.Reset()
	if code := Main(context.Background(), []string{"127.0.0.1:9", "-sf", sc, "-key", "tenant", "acme", "-q"}, io.Discard, &errb); code != ExitUsage ||
		!strings.Contains(errb.String(), "-inf") {
		t.Errorf("want exit 2 asking for -inf, have %d %q", code, errb.String())
	}
}
