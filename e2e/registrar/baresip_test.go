package registrar

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// baresip runs baresip (Debian's baresip-core) with a config directory of
// its own holding one account, and no audio: REGISTER needs none. Its
// output is the returned buffer; it is stopped when the test ends.
func baresip(t *testing.T, account string) *harness.Proc {
	t.Helper()
	if _, err := exec.LookPath("baresip"); err != nil {
		t.Skip("baresip not found (Debian package baresip-core)")
	}
	mods := "/usr/lib/baresip/modules"
	if _, err := os.Stat(filepath.Join(mods, "account.so")); err != nil {
		t.Skipf("baresip's modules not found in %s: %v", mods, err)
	}
	dir := t.TempDir()
	conf := fmt.Sprintf(`sip_listen 127.0.0.1:%d
module_path %s
module g711.so
module_app account.so
audio_player nil
audio_source nil
`, harness.FreePort(t), mods)
	if err := os.WriteFile(filepath.Join(dir, "config"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "accounts"), []byte(account+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p := harness.StartProc(t, "baresip", "-f", dir)
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("baresip's output:\n%s", harness.Tail(p.Out.String(), 40))
		}
	})
	return p
}

// baresip 1.0 registers with the built-in config's digest defaults, as
// printed: its challenge offers MD5. (baresip 1.0 answers only MD5, and
// fails the REGISTER with "Function not implemented" when the 401 carries
// a SHA-256 challenge, before or after the MD5 one.)
func TestBaresipRegistersWithDefaults(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs baresip; skipped with -short")
	}
	cfg := harness.DefaultCfg0(t)
	if !strings.Contains(cfg, `auth_algorithms = "MD5"`) {
		t.Fatalf("the built-in config no longer says auth_algorithms = \"MD5\"")
	}
	s := harness.Start(t, cfg)
	if out, err := s.Ctl("user", "add", "dave@127.0.0.1", "s3cret"); err != nil {
		t.Fatalf("ctl user add: %v: %s", err, out)
	}
	account := fmt.Sprintf(`<sip:dave@127.0.0.1>;auth_pass=s3cret;outbound="sip:%s";regint=600`, s.SIPAddr("udp"))
	p, tries := baresip(t, account), 1
	harness.WaitFor(t, "baresip's 200 OK to its REGISTER", 60*time.Second, func() bool {
		out := p.Out.String()
		// Its port (or the next, for TLS) taken by another test between
		// FreePort and baresip's bind: another port.
		if strings.Contains(out, "init failed (Address already in use)") && tries < 5 {
			t.Logf("baresip could not bind its port; again on another:\n%s", harness.Tail(out, 10))
			p, tries = baresip(t, account), tries+1
			return false
		}
		if strings.Contains(out, "Register:") || strings.Contains(out, "401 Unauthorized") {
			t.Fatalf("baresip did not register:\n%s", out)
		}
		return strings.Contains(out, "200 OK")
	})
	bs := s.Bindings("sip:dave@127.0.0.1")
	if len(bs) != 1 || !strings.Contains(bs[0].Contact, "127.0.0.1") {
		t.Fatalf("want dave's one binding from baresip, have %+v", bs)
	}
}
