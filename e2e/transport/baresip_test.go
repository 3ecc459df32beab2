package transport

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/ctl"
	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// lockedBuffer collects a process's output while the test reads it.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startBaresip runs baresip with a config directory of its own: its
// defaults, but a SIP port of the test's, no sound card (aubridge plays and
// records nothing), no console, and one account, answered automatically.
// It has no certificate: over TLS it is a client only, as phones are.
func startBaresip(t *testing.T, account string) *lockedBuffer {
	t.Helper()
	// baresip listens on the port it is given and, for TLS, on the next
	// one, which FreePort did not check: another test's process may hold
	// it. baresip says so at once and gives up; it is then started again
	// on another port, as the SIPp peers are.
	for try := 1; ; try++ {
		out, cmd := startBaresipOnce(t, account)
		// It says "baresip is ready." once its transports are up.
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) && !strings.Contains(out.String(), "Address already in use") &&
			!strings.Contains(out.String(), "baresip is ready") {
			time.Sleep(20 * time.Millisecond)
		}
		if !strings.Contains(out.String(), "Address already in use") || try == 5 {
			return out
		}
		cmd.Process.Kill()
		cmd.Wait()
	}
}

func startBaresipOnce(t *testing.T, account string) (*lockedBuffer, *exec.Cmd) {
	t.Helper()
	dir := t.TempDir()
	cfg := fmt.Sprintf(`poll_method		epoll
sip_listen		127.0.0.1:%d
call_local_timeout	120
call_max_calls		4
audio_player		aubridge,nil
audio_source		aubridge,nil
audio_alert		aubridge,nil
module_path		/usr/lib/baresip/modules
module			g711.so
module			aubridge.so
module_tmp		uuid.so
module_tmp		account.so
module_app		menu.so
`, harness.FreePort(t))
	for name, text := range map[string]string{"config": cfg, "accounts": account + "\n", "contacts": ""} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	out := &lockedBuffer{}
	cmd := exec.Command("baresip", "-f", dir)
	if _, err := exec.LookPath("stdbuf"); err == nil {
		// Line by line, so that a failure shows what baresip said (stdbuf
		// execs baresip in its own process).
		cmd = exec.Command("stdbuf", "-oL", "-eL", "baresip", "-f", dir)
	}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatalf("baresip: %v", err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			t.Logf("baresip (%s):\n%s", account, harness.Tail(out.String(), 40))
		}
	})
	return out, cmd
}

// baresip (Debian's baresip-core, as a phone with no certificate of its
// own) registers with the built-in config over UDP, TCP and TLS, and is
// called over each from SIPp on UDP, following Record-Route as the
// built-in config asks (examples/sipp-uac-rr.xml): baresip answers, and the
// call completes. Over TCP and TLS the calls go over the connection
// baresip registered on: it accepts no TLS connection.
func TestBaresip(t *testing.T) {
	t.Parallel()
	if _, err := exec.LookPath("baresip"); err != nil {
		t.Skip("baresip not installed (apt-get install -y baresip-core)")
	}
	harness.NeedSIPp(t)
	pki := harness.NewPKI(t)
	pki.Issue("server", "127.0.0.1", 2)
	cfg := harness.DefaultCfg0(t)
	for old, repl := range map[string]string{
		"#socket = tls:127.0.0.1:5061":  "socket = tls:127.0.0.1:0",
		`#tls_certificate = "cert.pem"`: `tls_certificate = "` + pki.Path("server.pem") + `"`,
		`#tls_private_key = "key.pem"`:  `tls_private_key = "` + pki.Path("server.key") + `"`,
	} {
		if !strings.Contains(cfg, old) {
			t.Fatalf("the built-in config has no line %q any more", old)
		}
		cfg = strings.Replace(cfg, old, repl, 1)
	}
	s := harness.Start(t, cfg)
	target := s.SIPAddr("udp")

	for _, tr := range []string{"udp", "tcp", "tls"} {
		user := "bare-" + tr
		// The built-in config's realm is its home domain, its first
		// address without the port, as AORs are filed.
		if out, err := s.Ctl("user", "add", user+"@127.0.0.1", "s3cret"); err != nil {
			t.Fatalf("ctl user add: %v: %s", err, out)
		}
		out := startBaresip(t, fmt.Sprintf("<sip:%s@%s;transport=%s>;auth_pass=s3cret;answermode=auto;regint=600;mediaenc=;medianat=",
			user, s.SIPAddr(tr), tr))
		// baresip's output is buffered when it is not a terminal: the
		// binding says it registered.
		var bs []ctl.Binding
		harness.WaitFor(t, "baresip to register over "+tr, 30*time.Second, func() bool {
			bs = s.Bindings("sip:" + user + "@127.0.0.1")
			return len(bs) > 0
		})
		if len(bs) != 1 {
			t.Fatalf("baresip over %s: want 1 binding, have %+v\n%s", tr, bs, out.String())
		}
		r := harness.RunSIPp(t, 60*time.Second, "-sf", harness.Path("examples/sipp-uac-rr.xml"), "-s", user, target,
			"-i", "127.0.0.1", "-m", "2", "-r", "2", "-timeout", "30", "-timeout_error")
		if r.Exit != 0 || r.Successful != 2 {
			t.Fatalf("SIPp → baresip over %s: have %d/%d (exit %d)\n%s\n%s\nbaresip:\n%s", tr, r.Successful, r.Failed, r.Exit,
				harness.Tail(r.Out, 40), harness.Tail(s.Log.String(), 20), harness.Tail(out.String(), 40))
		}
		t.Logf("baresip over %s (contact %s, from %s): %d calls answered", tr, bs[0].Contact, bs[0].Source, r.Successful)
	}
}
