package browser

import (
	"embed"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

//go:embed page
var page embed.FS

// bundle is JsSIP for the page, as .ci/run builds it.
func bundle() string { return harness.Path("e2e/browser/build/jssip.js") }

// needBundle skips the test without the JsSIP bundle, and fails it in CI.
func needBundle(t *testing.T) {
	t.Helper()
	if _, err := os.Stat(bundle()); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("no JsSIP bundle at %s: .ci/run builds it", bundle())
		}
		t.Skipf("no JsSIP bundle at %s (cd e2e/browser && npm ci && npm run build)", bundle())
	}
}

// servePage serves the phone page and JsSIP on 127.0.0.1: its origin is
// the one the browser names in the WebSocket Upgrade.
func servePage(t *testing.T) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.HandleFunc("/jssip.js", func(w http.ResponseWriter, r *http.Request) { http.ServeFile(w, r, bundle()) })
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/")
		if name == "" {
			name = "index.html"
		}
		b, err := page.ReadFile("page/" + name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		if strings.HasSuffix(name, ".js") {
			w.Header().Set("Content-Type", "text/javascript")
		} else {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
		}
		w.Write(b)
	})
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

// eval runs a phone function in the page and fails the test with the
// phone's events if it rejects.
func eval(t *testing.T, p *harness.Page, what, expr string) string {
	t.Helper()
	v, err := p.Eval(expr, 30*time.Second)
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	var s string
	json.Unmarshal(v, &s)
	t.Logf("%s: %s", what, s)
	return s
}

// webrtcConfig is examples/webrtc.cfg (the built-in registrar and proxy,
// with digest authentication, behind a wss: socket) on ports the kernel
// picks, with a certificate of the test's own, the test page's origin
// allowed, and the domain of SIPp's register-auth.xml.
func webrtcConfig(t *testing.T, pki *harness.PKI, origin string) string {
	t.Helper()
	b, err := os.ReadFile(harness.Path("examples/webrtc.cfg"))
	if err != nil {
		t.Fatal(err)
	}
	cfg := string(b)
	for _, r := range [][2]string{
		{"socket = udp:127.0.0.1:5060\n", "socket = udp:127.0.0.1:0\n"},
		{"socket = tcp:127.0.0.1:5060\n", "socket = tcp:127.0.0.1:0\n"},
		{"socket = wss:127.0.0.1:8443\n", "socket = wss:127.0.0.1:0\n"},
		{"http_listen = 127.0.0.1:8888\n", "http_listen = 127.0.0.1:0\n"},
		{`tls_certificate = "cert.pem"`, `tls_certificate = "` + pki.Path("server.pem") + `"`},
		{`tls_private_key = "key.pem"`, `tls_private_key = "` + pki.Path("server.key") + `"`},
		{`ws_allowed_origins = "https://phone.example.com"`, `ws_allowed_origins = "` + origin + `"`},
		{`domain = "example.com"`, `domain = "example.test"`},
	} {
		if !strings.Contains(cfg, r[0]) {
			t.Fatalf("examples/webrtc.cfg has no line %q any more", r[0])
		}
		cfg = strings.Replace(cfg, r[0], r[1], 1)
	}
	return cfg
}

// startWebRTC starts sipvisor on examples/webrtc.cfg with users alice and
// bob (password s3cret), and the test page's server.
func startWebRTC(t *testing.T) (*harness.Server, *httptest.Server) {
	t.Helper()
	harness.NeedChromium(t)
	needBundle(t)
	harness.NeedSIPp(t)
	web := servePage(t)
	pki := harness.NewPKI(t)
	pki.Issue("server", "sipvisor webrtc", 2)
	s := harness.Start(t, webrtcConfig(t, pki, web.URL))
	for _, u := range []string{"alice", "bob"} {
		if out, err := s.Ctl("user", "add", u+"@example.test", "s3cret"); err != nil {
			t.Fatalf("ctl user add %s: %v: %s", u, err, out)
		}
	}
	return s, web
}

// registerAlice starts a browser whose page registers alice over wss:.
func registerAlice(t *testing.T, s *harness.Server, web *httptest.Server) (*harness.Browser, *harness.Page) {
	t.Helper()
	b := harness.StartBrowser(t)
	p := b.NewPage(web.URL + "/")
	wss := "wss://" + s.SIPAddr("wss")
	eval(t, p, "register over "+wss, `phone.start("`+wss+`", "sip:alice@example.test", "s3cret")`)
	if bs := s.Bindings("sip:alice@example.test"); len(bs) != 1 {
		t.Fatalf("want alice's one binding, have %v", bs)
	}
	return b, p
}

// A browser registered over wss: is called from SIPp on UDP through
// sipvisor, with a WebRTC offer, and answers: twice, once hung up by the
// caller (its BYE reaches the browser over the connection it registered
// on, by the flow token of the Record-Route) and once by the browser (its
// BYE reaches SIPp through sipvisor). JsSIP's incoming, accepted,
// confirmed and ended events, and SIPp's exit status.
func TestUDPPhoneCallsBrowser(t *testing.T) {
	s, web := startWebRTC(t)
	_, p := registerAlice(t, s, web)
	uac := func(scenario string) []string {
		return []string{"-sf", harness.Testdata(scenario), s.SIPAddr("udp"), "-s", "alice", "-au", "bob", "-ap", "s3cret",
			"-auth_uri", "alice@example.test", "-i", "127.0.0.1", "-m", "1", "-timeout", "30", "-timeout_error"}
	}

	// The caller hangs up.
	eval(t, p, "await a call", `phone.arm("incoming")`)
	eval(t, p, "await its end", `phone.arm("ended")`)
	r := harness.RunSIPp(t, 40*time.Second, uac("uac_webrtc.xml")...)
	if r.Exit != 0 || r.Successful != 1 {
		t.Fatalf("SIPp calling alice, hanging up: %d/%d (exit %d)\n%s\nJsSIP events: %s", r.Successful, r.Failed, r.Exit,
			harness.Tail(r.Out, 80), eval(t, p, "events", `JSON.stringify(phone.events())`))
	}
	eval(t, p, "answered", `phone.armed("incoming")`)
	eval(t, p, "hung up by the caller", `phone.armed("ended")`)
	events := eval(t, p, "events", `JSON.stringify(phone.events())`)
	for _, want := range []string{`"incoming: sip:bob@example.test"`, `"accepted"`, `"confirmed"`, `"ended: remote Terminated"`} {
		if !strings.Contains(events, want) {
			t.Errorf("JsSIP events %s lack %s", events, want)
		}
	}

	// The browser hangs up.
	eval(t, p, "await a call", `phone.arm("incoming")`)
	run := harness.StartSIPp(t, 40*time.Second, uac("uac_webrtc_callee_bye.xml")...)
	eval(t, p, "answered", `phone.armed("incoming")`)
	eval(t, p, "hang up", `phone.hangup()`)
	if r := run.Wait(); r.Exit != 0 || r.Successful != 1 {
		t.Fatalf("SIPp calling alice, hung up by her: %d/%d (exit %d)\n%s", r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 30))
	}
	events = eval(t, p, "events", `JSON.stringify(phone.events())`)
	if n := strings.Count(events, `"confirmed"`); n != 2 || !strings.Contains(events, `"ended: local Terminated"`) {
		t.Errorf("JsSIP events %s: want a second call confirmed and ended locally", events)
	}
}

// A browser registers over wss: with digest credentials, behind
// examples/webrtc.cfg, calls a SIPp callee on UDP through sipvisor, and
// hangs up: JsSIP's registered, progress, confirmed and ended events, and
// SIPp's exit status (the callee saw the INVITE, ACK and BYE of one call).
// A page of an origin not allowed is refused its WebSocket.
func TestBrowserCallsUDPPhone(t *testing.T) {
	s, web := startWebRTC(t)
	// bob: SIPp on UDP, registered at its port with his password.
	uas := harness.SIPpServe(t, "-sf", harness.Testdata("uas_webrtc.xml"), "-i", "127.0.0.1", "-m", "1")
	r := harness.RunSIPp(t, 30*time.Second, "-sf", harness.Testdata("register-auth.xml"), s.SIPAddr("udp"),
		"-s", "bob", "-au", "bob", "-ap", "s3cret", "-key", "contact_port", strconv.Itoa(uas.Port),
		"-i", "127.0.0.1", "-m", "1", "-timeout", "20", "-timeout_error")
	if r.Exit != 0 || r.Successful != 1 {
		t.Fatalf("register bob: %d/%d (exit %d)\n%s", r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 30))
	}

	b, p := registerAlice(t, s, web)
	wss := "wss://" + s.SIPAddr("wss")
	eval(t, p, "call bob", `phone.call("sip:bob@example.test")`)
	eval(t, p, "hang up", `phone.hangup()`)
	events := eval(t, p, "events", `JSON.stringify(phone.events())`)
	for _, want := range []string{`"progress: 180"`, `"accepted"`, `"confirmed"`, `"ended: local Terminated"`} {
		if !strings.Contains(events, want) {
			t.Errorf("JsSIP events %s lack %s", events, want)
		}
	}
	if code, out := uas.Wait(t, 30*time.Second); code != 0 {
		t.Fatalf("SIPp callee exited %d, want 0 (one call with INVITE, ACK and BYE)\n%s", code, harness.Tail(out, 30))
	}

	// A page of another origin (another port is another origin) is
	// refused its WebSocket: the browser's Origin header is checked.
	other := servePage(t)
	q := b.NewPage(other.URL + "/")
	if v, err := q.Eval(`phone.connect("`+wss+`")`, 30*time.Second); err == nil || !strings.Contains(err.Error(), "disconnected") {
		t.Fatalf("a page from %s connected (%s, %v); want its Upgrade refused", other.URL, v, err)
	}
	s.AwaitMetricAtLeast(1, 10*time.Second, "sipvisor_frontdoor_connections_closed_total", `reason="origin"`)
}
