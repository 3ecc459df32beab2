package harness

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// ChromiumBin is the browser the tests drive: Debian's chromium.
var ChromiumBin = "chromium"

// Browser is a headless Chromium of the test's own, driven over the
// DevTools protocol (a WebSocket per page, WS).
type Browser struct {
	t    testing.TB
	cmd  *exec.Cmd
	out  *SyncBuffer
	done chan struct{}
	// HTTP is the DevTools address, 127.0.0.1:PORT.
	HTTP string
}

// NeedChromium skips the test when Chromium is not installed, and fails
// it in CI, where .ci/run installs it.
func NeedChromium(t testing.TB) string {
	t.Helper()
	path, err := exec.LookPath(ChromiumBin)
	if err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("chromium not installed")
		}
		t.Skip("chromium not installed (apt-get install -y chromium)")
	}
	return path
}

// StartBrowser starts headless Chromium with the flags of a WebRTC test:
// fake media devices that need no permission prompt, the test's own
// self-signed certificates accepted, and no traffic but to 127.0.0.1 (no
// background requests; every host name but 127.0.0.1 unresolvable).
// Chromium runs as root here, which needs --no-sandbox.
func StartBrowser(t testing.TB) *Browser {
	t.Helper()
	bin := NeedChromium(t)
	dir := t.TempDir()
	b := &Browser{t: t, out: &SyncBuffer{}, done: make(chan struct{})}
	b.cmd = exec.Command(bin, "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--disable-extensions", "--mute-audio",
		"--disable-background-networking", "--disable-component-update", "--disable-sync", "--disable-default-apps",
		"--disable-features=WebRtcHideLocalIpsWithMdns,MediaRouter,OptimizationHints,Translate",
		`--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1`,
		"--ignore-certificate-errors", "--use-fake-ui-for-media-stream", "--use-fake-device-for-media-stream",
		"--user-data-dir="+dir, "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0", "about:blank")
	b.cmd.Stdout, b.cmd.Stderr = b.out, b.out
	if err := b.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { b.cmd.Wait(); close(b.done) }()
	t.Cleanup(func() {
		b.cmd.Process.Kill()
		<-b.done
	})
	// Chromium writes the port it bound in DevToolsActivePort.
	deadline := time.Now().Add(30 * time.Second)
	for {
		if data, err := os.ReadFile(filepath.Join(dir, "DevToolsActivePort")); err == nil {
			if port, _, ok := strings.Cut(string(data), "\n"); ok && port != "" {
				b.HTTP = "127.0.0.1:" + port
				return b
			}
		}
		select {
		case <-b.done:
			t.Fatalf("chromium exited: %v\n%s", b.cmd.ProcessState, Tail(b.out.String(), 30))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("chromium wrote no DevToolsActivePort within 30s\n%s", Tail(b.out.String(), 30))
		}
		time.Sleep(50 * time.Millisecond) // polling for a file Chromium writes, bounded by the deadline
	}
}

// Page is a browser tab.
type Page struct {
	t  testing.TB
	ws *WS
	id int
	mu sync.Mutex
	// Console holds what the page logged, for a failure's report.
	console []string
	// loaded is signalled at each load event.
	loaded chan struct{}
}

// NewPage opens a tab on url and waits for its load event.
func (b *Browser) NewPage(url string) *Page {
	t := b.t
	t.Helper()
	req, _ := http.NewRequest(http.MethodPut, "http://"+b.HTTP+"/json/new?about:blank", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("devtools: new tab: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	var target struct{ WebSocketDebuggerURL string }
	if err := json.Unmarshal(body, &target); err != nil || target.WebSocketDebuggerURL == "" {
		t.Fatalf("devtools: new tab answered %s: %q", resp.Status, body)
	}
	path := strings.TrimPrefix(target.WebSocketDebuggerURL, "ws://"+b.HTTP)
	ws, code, err := DialWS(t, b.HTTP, path, nil, nil)
	if err != nil || code != 101 {
		t.Fatalf("devtools: connect to the tab: %d, %v", code, err)
	}
	p := &Page{t: t, ws: ws, loaded: make(chan struct{}, 4)}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("the page's console (%s):\n%s", url, strings.Join(p.Console(), "\n"))
		}
		ws.Close()
	})
	p.call("Page.enable", nil, 10*time.Second)
	p.call("Runtime.enable", nil, 10*time.Second)
	p.call("Page.navigate", map[string]any{"url": url}, 10*time.Second)
	deadline := time.Now().Add(30 * time.Second)
	for {
		select {
		case <-p.loaded:
			return p
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("page %s did not load within 30s", url)
		}
		p.read(time.Until(deadline))
	}
}

// Console is what the page logged so far.
func (p *Page) Console() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.console...)
}

type cdpMessage struct {
	ID     int             `json:"id"`
	Method string          `json:"method"`
	Params json.RawMessage `json:"params"`
	Result json.RawMessage `json:"result"`
	Error  *struct {
		Message string `json:"message"`
	} `json:"error"`
}

// read reads one message of the DevTools protocol, keeping the events the
// tests look at, and returns it.
func (p *Page) read(within time.Duration) cdpMessage {
	p.t.Helper()
	s, err := p.ws.Recv(within)
	if err != nil {
		p.t.Fatalf("devtools: %v", err)
	}
	var m cdpMessage
	if err := json.Unmarshal([]byte(s), &m); err != nil {
		p.t.Fatalf("devtools: %v: %.200s", err, s)
	}
	switch m.Method {
	case "Page.loadEventFired":
		p.loaded <- struct{}{}
	case "Runtime.consoleAPICalled":
		var c struct {
			Type string
			Args []struct {
				Value       any
				Description string
			}
		}
		json.Unmarshal(m.Params, &c)
		var parts []string
		for _, a := range c.Args {
			if a.Value != nil {
				parts = append(parts, fmt.Sprint(a.Value))
			} else {
				parts = append(parts, a.Description)
			}
		}
		p.mu.Lock()
		p.console = append(p.console, c.Type+": "+strings.Join(parts, " "))
		p.mu.Unlock()
	case "Runtime.exceptionThrown":
		p.mu.Lock()
		p.console = append(p.console, "exception: "+string(m.Params))
		p.mu.Unlock()
	}
	return m
}

// call sends a DevTools command and returns its result.
func (p *Page) call(method string, params any, within time.Duration) json.RawMessage {
	p.t.Helper()
	p.id++
	id := p.id
	b, _ := json.Marshal(map[string]any{"id": id, "method": method, "params": params})
	if err := p.ws.WriteRaw(Frame(true, 1, b, false)); err != nil {
		p.t.Fatalf("devtools: %s: %v", method, err)
	}
	deadline := time.Now().Add(within)
	for {
		m := p.read(time.Until(deadline))
		if m.ID != id {
			continue
		}
		if m.Error != nil {
			p.t.Fatalf("devtools: %s: %s", method, m.Error.Message)
		}
		return m.Result
	}
}

// Eval evaluates a JavaScript expression in the page and waits for its
// value; a promise is awaited. A thrown error or a rejected promise is
// the error returned, with its message.
func (p *Page) Eval(expr string, within time.Duration) (json.RawMessage, error) {
	p.t.Helper()
	res := p.call("Runtime.evaluate", map[string]any{"expression": expr, "awaitPromise": true, "returnByValue": true,
		"timeout": within.Milliseconds()}, within+5*time.Second)
	var r struct {
		Result struct {
			Value json.RawMessage `json:"value"`
		} `json:"result"`
		ExceptionDetails *struct {
			Text      string `json:"text"`
			Exception struct {
				Description string `json:"description"`
				Value       any    `json:"value"`
			} `json:"exception"`
		} `json:"exceptionDetails"`
	}
	if err := json.Unmarshal(res, &r); err != nil {
		return nil, err
	}
	if e := r.ExceptionDetails; e != nil {
		msg := e.Exception.Description
		if msg == "" {
			msg = fmt.Sprint(e.Exception.Value)
		}
		return nil, fmt.Errorf("%s %s", e.Text, msg)
	}
	return r.Result.Value, nil
}
