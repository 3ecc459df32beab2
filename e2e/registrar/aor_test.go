package registrar

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// kamailioRegistrar is a minimal Kamailio registrar and proxy: usrloc with
// use_domain, so that an AOR is user@domain as sipvisor files it, and
// in-dialog requests without a Route (SIPp's built-in UAS does not copy
// Record-Route) looked up again, as harness.RegistrarCfg does.
const kamailioRegistrar = `#!KAMAILIO
debug=1
log_stderror=yes
children=1
listen=udp:127.0.0.1:%d
disable_tcp=yes
auto_aliases=no
dns=no
rev_dns=no
rundir="%s"

loadmodule "tm.so"
loadmodule "sl.so"
loadmodule "rr.so"
loadmodule "pv.so"
loadmodule "maxfwd.so"
loadmodule "textops.so"
loadmodule "siputils.so"
loadmodule "usrloc.so"
loadmodule "registrar.so"
modparam("usrloc", "use_domain", 1)
modparam("usrloc", "db_mode", 0)

request_route {
	if (!mf_process_maxfwd_header("10")) {
		sl_send_reply("483", "Too Many Hops");
		exit;
	}
	if (has_totag() && loose_route()) {
		t_relay();
		exit;
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
	if (!lookup("location")) {
		sl_send_reply("404", "Not Found");
		exit;
	}
	t_relay();
}
`

// startKamailio runs Kamailio (Debian's kamailio) in the foreground on a
// free UDP port of 127.0.0.1 with cfg (a format with that port and a run
// directory), until the test ends, and returns the port once it is bound.
func startKamailio(t *testing.T, cfg string) int {
	t.Helper()
	if _, err := exec.LookPath("kamailio"); err != nil {
		t.Skip("kamailio not found (Debian package kamailio)")
	}
	port, dir := harness.FreePort(t), t.TempDir()
	file := filepath.Join(dir, "kamailio.cfg")
	if err := os.WriteFile(file, []byte(fmt.Sprintf(cfg, port, dir)), 0o644); err != nil {
		t.Fatal(err)
	}
	// Its own process group: its children, which share its output, go
	// with it.
	cmd := exec.Command("kamailio", "-f", file, "-DD", "-E", "-m", "64", "-M", "8")
	out := &harness.SyncBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		<-done
		if t.Failed() {
			t.Logf("kamailio's output:\n%s", harness.Tail(out.String(), 40))
		}
	})
	harness.WaitFor(t, "kamailio bound to its port", 20*time.Second, func() bool {
		select {
		case <-done:
			t.Fatalf("kamailio exited:\n%s", out.String())
		default:
		}
		return harness.BoundBy(cmd.Process.Pid, "udp", port)
	})
	return port
}

// An AOR is user@domain, as Kamailio's usrloc files it: sip:carol@127.0.0.1
// registered, an INVITE to sip:carol@127.0.0.1:PORT (PORT the server's own,
// as SIPp's uac writes its Request-URI) reaches the SIPp UAS at carol's
// contact, 5 calls of 5, through Kamailio and through sipvisor in one run.
func TestAORWithoutPortSideBySideWithKamailio(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs Kamailio and SIPp; skipped with -short")
	}
	harness.NeedSIPp(t)
	uas := harness.SIPpUAS(t).Port
	s := harness.Start(t, harness.RegistrarCfg())
	servers := map[string]string{
		"kamailio": "127.0.0.1:" + strconv.Itoa(startKamailio(t, kamailioRegistrar)),
		"sipvisor": s.SIPAddr("udp"),
	}
	for _, name := range []string{"kamailio", "sipvisor"} {
		target := servers[name]
		r := harness.RunSIPp(t, 30*time.Second, "-sf", harness.Testdata("register_noport.xml"), target, "-s", "carol",
			"-key", "contact_port", strconv.Itoa(uas), "-i", "127.0.0.1", "-m", "1", "-timeout", "20", "-timeout_error")
		if r.Exit != 0 || r.Successful != 1 {
			t.Fatalf("%s: want carol registered, have %d/%d (exit %d)\n%s", name, r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 30))
		}
		r = harness.RunSIPp(t, 60*time.Second, "-sn", "uac", target, "-s", "carol", "-i", "127.0.0.1",
			"-r", "5", "-m", "5", "-d", "100", "-timeout", "30", "-timeout_error")
		if r.Exit != 0 || r.Successful != 5 {
			t.Errorf("%s: want 5 of 5 calls to sip:carol@%s completed, have %d/%d (exit %d)\n%s", name, target, r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 30))
		}
	}
	// ul show finds carol by either form of her AOR.
	for _, aor := range []string{"sip:carol@127.0.0.1", "sip:carol@" + s.SIPAddr("udp")} {
		if bs := s.Bindings(aor); len(bs) != 1 || bs[0].AOR != "sip:carol@127.0.0.1" {
			t.Errorf("ul show %s: want carol's binding, filed as sip:carol@127.0.0.1, have %+v", aor, bs)
		}
	}
	if out, err := s.Ctl("ul", "rm", "sip:carol@"+s.SIPAddr("udp")); err != nil {
		t.Errorf("ul rm with the port: %v: %s", err, out)
	}
	if bs := s.Bindings("sip:carol@127.0.0.1"); len(bs) != 0 {
		t.Errorf("want no binding after ul rm, have %+v", bs)
	}
}

// A store written by a server that filed AORs with their port (the rule
// before the port was dropped, still there with aor_keep_port) keeps
// working under the default: started on it, sipvisor moves each binding
// to its AOR without the port, which ul show finds by either form and
// calls reach; a REGISTER refresh then finds it there.
func TestPortKeyedStoreKeepsWorking(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("restarts sipvisor; skipped with -short")
	}
	harness.NeedSIPp(t)
	dir := t.TempDir()
	uas := harness.SIPpUAS(t).Port
	s := harness.StartIn(t, dir, harness.RegistrarCfg()+"\naor_keep_port = yes\n")
	register := func() {
		t.Helper()
		r := harness.RunSIPp(t, 30*time.Second, "-sf", harness.Testdata("register-users.xml"), s.SIPAddr("udp"),
			"-key", "contact_port", strconv.Itoa(uas), "-i", "127.0.0.1", "-m", "3", "-timeout", "20", "-timeout_error")
		if r.Exit != 0 || r.Successful != 3 {
			t.Fatalf("want 3 registrations, have %d/%d (exit %d)\n%s", r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 30))
		}
	}
	register()
	old := "sip:user2@" + s.SIPAddr("udp")
	if bs := s.Bindings(); len(bs) != 3 || bs[1].AOR != old {
		t.Fatalf("aor_keep_port = yes: want 3 bindings, user2's filed as %s, have %+v", old, bs)
	}
	s.StopDrained()

	// The same store and ports, the default rule.
	s = harness.StartIn(t, dir, s.Pinned(harness.RegistrarCfg()))
	s.WaitLog("bindings filed with a port moved to their AOR without it", 10*time.Second)
	for _, aor := range []string{old, "sip:user2@127.0.0.1"} {
		if bs := s.Bindings(aor); len(bs) != 1 || bs[0].AOR != "sip:user2@127.0.0.1" {
			t.Errorf("ul show %s: want user2's binding, moved to sip:user2@127.0.0.1, have %+v", aor, bs)
		}
	}
	if r := callOnce(t, s, "user2"); r.Successful != 1 {
		t.Errorf("call to user2, filed with the port before: want it completed, have %d/%d\n%s", r.Successful, r.Failed, harness.Tail(r.Out, 30))
	}
	register()
	bs := s.Bindings()
	if len(bs) != 3 {
		t.Fatalf("after the refresh: want 3 bindings, have %+v", bs)
	}
	for _, b := range bs {
		if strings.Count(b.AOR, ":") != 1 {
			t.Errorf("after the refresh: want every AOR without its port, have %s", b.AOR)
		}
	}
}
