package transport

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// xmlCfg proxies calls to a SIPp UAS (user xmluas: to the scenario under
// test instead), answers OPTIONS itself, registers, and refuses calls to
// user busy with 503, so that every scenario file in the repository has a
// server to run against.
func xmlCfg(uasPort, xmlUASPort int) string {
	uas := "sip:127.0.0.1:" + strconv.Itoa(uasPort)
	xmluas := "sip:127.0.0.1:" + strconv.Itoa(xmlUASPort)
	return `
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 2
tcp_workers = 1
route {
	if (!mf_process_maxfwd_header(10)) { sl_send_reply(483, "Too Many Hops"); exit; }
	if (is_method("OPTIONS") && !has_totag()) { sl_send_reply(200, "OK"); exit; }
	if (has_totag()) {
		if (!loose_route()) {
			$du = "` + uas + `";
			if ($tU == "xmluas") $du = "` + xmluas + `";
		}
		t_relay();
		exit;
	}
	if (is_method("CANCEL")) { if (t_check_trans()) t_relay(); exit; }
	t_check_trans();
	if (is_method("REGISTER")) { save("location"); exit; }
	if ($rU == "busy") { sl_send_reply(503, "Service Unavailable"); exit; }
	if (is_method("INVITE")) record_route();
	$du = "` + uas + `";
	if ($rU == "xmluas") $du = "` + xmluas + `";
	t_relay();
}
`
}

func writeScenario(t *testing.T, name string, b []byte) string {
	t.Helper()
	f := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(f, b, 0o644); err != nil {
		t.Fatal(err)
	}
	return f
}

// The scenario files of SIPp (sipp -sd uac, uas) and of this repository run
// under sipload -sf against sipvisor, and each run counts the same
// successful and failed calls as SIPp running the same file with the same
// flags.
func TestSiploadRunsScenarioFilesLikeSIPp(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("sipp"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("sipp not installed")
		}
		t.Skip("sipp not installed (apt-get install -y sip-tester)")
	}
	if testing.Short() {
		t.Skip("runs SIPp and sipload against sipvisor, about 20 s")
	}
	uas := harness.SIPpUAS(t).Port
	// The scenarios under test serve in turn, SIPp's run then sipload's, at
	// one port the config names: a port picked up front.
	xmluas := harness.FreePort(t)
	s := harness.Start(t, xmlCfg(uas, xmluas))
	target := s.SIPAddr("udp")
	sd := func(name string) string {
		out, _ := exec.Command("sipp", "-sd", name).Output() // exits 99 after printing
		return writeScenario(t, "sipp_"+name+".xml", out)
	}
	builtin := func(name string) string {
		out, err := exec.Command(harness.SiploadBin, "-sd", name).Output()
		if err != nil {
			t.Fatalf("sipload -sd %s: %v", name, err)
		}
		return writeScenario(t, "sipload_"+name+".xml", out)
	}
	abs := func(p string) string { a, _ := filepath.Abs(p); return a }
	common := []string{target, "-i", "127.0.0.1", "-m", "10", "-r", "20", "-timeout", "40"}
	for _, tc := range []struct {
		name   string
		args   []string
		sipp   []string // differs from args only where a run must not reuse the last run's state
		wantOK int
	}{
		{"sipp -sd uac", []string{"-sf", sd("uac"), "-d", "20"}, nil, 10},
		{"sipload -sd uac", []string{"-sf", builtin("uac"), "-d", "20"}, nil, 10},
		{harness.Testdata("options_uac.xml"), []string{"-sf", abs(harness.Testdata("options_uac.xml"))}, nil, 10},
		{"bench/options-uac.xml", []string{"-sf", abs(harness.Path("bench/options-uac.xml"))}, nil, 10},
		{harness.Testdata("overload_refused_uac.xml"), []string{"-sf", abs(harness.Testdata("overload_refused_uac.xml")), "-s", "busy"}, nil, 10},
		{harness.Testdata("overload_refused_noack_uac.xml"), []string{"-sf", abs(harness.Testdata("overload_refused_noack_uac.xml")), "-s", "busy"}, nil, 10},
		{harness.Testdata("register.xml"), []string{"-sf", abs(harness.Testdata("register.xml")), "-s", "alice", "-key", "contact_port", strconv.Itoa(uas)}, nil, 10},
		{"bench/register.xml", []string{"-sf", abs(harness.Path("bench/register.xml"))}, nil, 10},
		{harness.Testdata("register_retry_uac.xml"),
			[]string{"-sf", abs(harness.Testdata("register_retry_uac.xml")), "-cid_str", "storm-%u-sipload@host", "-key", "expires", "3600", "-base_cseq", "2"},
			[]string{"-sf", abs(harness.Testdata("register_retry_uac.xml")), "-cid_str", "storm-%u-sipp@host", "-key", "expires", "3600", "-base_cseq", "2"}, 10},
		{"sipp -sd uac to user busy", []string{"-sf", sd("uac"), "-s", "busy"}, nil, 0},
	} {
		sippArgs := tc.sipp
		if sippArgs == nil {
			sippArgs = tc.args
		}
		r := harness.RunSIPp(t, 60*time.Second, append(append([]string{}, common...), sippArgs...)...)
		ok, failed, out := harness.RunSipload(t, 60*time.Second, append(append([]string{}, common...), tc.args...)...)
		t.Logf("%s: sipp %d succeeded, %d failed; sipload %d succeeded, %d failed", tc.name, r.Successful, r.Failed, ok, failed)
		if r.Successful != ok || r.Failed != failed || ok != tc.wantOK {
			t.Errorf("%s: want sipload to count as SIPp (%d succeeded), have sipp %d/%d, sipload %d/%d\nsipp:\n%s\nsipload:\n%s",
				tc.name, tc.wantOK, r.Successful, r.Failed, ok, failed, harness.Tail(r.Out, 30), out)
		}
	}

	// Server scenarios: SIPp's uac calls user xmluas through sipvisor, and
	// the scenario answers, run by SIPp and then by sipload.
	for _, tc := range []struct{ name, file string }{
		{"sipp -sd uas", sd("uas")},
		{"sipload -sd uas", builtin("uas")},
	} {
		type counts struct{ srvOK, srvFailed, cliOK, cliFailed int }
		var have [2]counts
		for i, tool := range []string{"sipp", "sipload"} {
			args := []string{"-sf", tc.file, "-i", "127.0.0.1", "-p", strconv.Itoa(xmluas), "-m", "10", "-timeout", "40"}
			done := make(chan counts, 1)
			go func() {
				var c counts
				if tool == "sipp" {
					r := harness.RunSIPp(t, 60*time.Second, args...)
					c.srvOK, c.srvFailed = r.Successful, r.Failed
				} else {
					c.srvOK, c.srvFailed, _ = harness.RunSipload(t, 60*time.Second, args...)
				}
				done <- c
			}()
			harness.WaitFor(t, "the scenario bound to its port", 10*time.Second, func() bool { return harness.Bound("udp", xmluas) })
			r := harness.RunSIPp(t, 60*time.Second, target, "-sn", "uac", "-s", "xmluas", "-i", "127.0.0.1", "-m", "10", "-r", "20", "-d", "20", "-timeout", "40")
			c := <-done
			c.cliOK, c.cliFailed = r.Successful, r.Failed
			have[i] = c
		}
		t.Logf("%s: sipp as server %+v; sipload as server %+v", tc.name, have[0], have[1])
		if have[0] != have[1] || have[1].srvOK != 10 {
			t.Errorf("%s: want the same counts under sipload as under SIPp, 10 calls each side; have sipp %+v, sipload %+v", tc.name, have[0], have[1])
		}
	}
}
