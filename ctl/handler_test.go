package ctl

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// serve starts the API as the supervisor mounts it, on 127.0.0.1.
func serve(t *testing.T, b Backend, token string) *httptest.Server {
	t.Helper()
	mux := http.NewServeMux()
	mux.Handle("/mi/", Handler(b, token))
	srv := httptest.NewServer(mux)
	t.Cleanup(srv.Close)
	return srv
}

type answer struct {
	status int
	header http.Header
	body   string
}

func request(t *testing.T, srv *httptest.Server, method, path, body string, header map[string]string) answer {
	t.Helper()
	var rd io.Reader
	if body != "" {
		rd = strings.NewReader(body)
	}
	req, err := http.NewRequest(method, srv.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	c := &http.Client{Timeout: 10 * time.Second}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return answer{resp.StatusCode, resp.Header, string(b)}
}

const memHigh = "suspend_watermarks/system_memory_usage/high"

func TestHandlerRequests(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name         string
		method, path string
		body         string
		status       int
		want         string // substring of the body
		// after: the value of memHigh once the request is done.
		after float64
	}{
		{"get leaf", "GET", "/mi/get/" + memHigh, "", 200, "85\n", 85},
		{"get subtree", "GET", "/mi/get/suspend_watermarks/heap_usage", "", 200, `"high": 85,`, 85},
		{"get all", "GET", "/mi/get/", "", 200, `"enable": true`, 85},
		{"get head", "HEAD", "/mi/get/" + memHigh, "", 200, "", 85},
		{"set plain body", "POST", "/mi/set/" + memHigh, "90", 200, `"old": 85,`, 90},
		{"set json number", "POST", "/mi/set/" + memHigh, `91.5`, 200, `"value": 91.5`, 91.5},
		{"set json object", "POST", "/mi/set/" + memHigh, `{"value": "92"}`, 200, `"path": "` + memHigh + `"`, 92},
		{"set json string", "POST", "/mi/set/" + memHigh, `"93%"`, 200, `"value": 93`, 93},
		{"set query", "POST", "/mi/set/" + memHigh + "?value=94", "", 200, `"value": 94`, 94},
		{"set bool json", "POST", "/mi/set/throttle/enable", `{"value": false}`, 200, `"value": false`, 85},
		{"set bad value", "POST", "/mi/set/" + memHigh, "lots", 400, `"error": "` + memHigh + `: \"lots\" is not a number"`, 85},
		{"set percent over", "POST", "/mi/set/" + memHigh, "150", 400, "outside 0–100", 85},
		{"set under low", "POST", "/mi/set/" + memHigh, "60", 400, "low watermark 70 must be under high watermark 60", 85},
		{"set NaN", "POST", "/mi/set/" + memHigh, "NaN", 400, "not a usable number", 85},
		{"set empty", "POST", "/mi/set/" + memHigh, "", 400, "no value given", 85},
		{"set object without value", "POST", "/mi/set/" + memHigh, `{"v": 1}`, 400, `body must be {\"value\": ...}`, 85},
		{"set broken json", "POST", "/mi/set/" + memHigh, `{"value": `, 400, "not valid JSON", 85},
		{"set array", "POST", "/mi/set/" + memHigh, `{"value": [1]}`, 400, "must be a number, a string or a bool", 85},
		{"set two query values", "POST", "/mi/set/" + memHigh + "?value=1&value=2", "", 400, "give one value", 85},
		{"set unknown path", "POST", "/mi/set/suspend_watermarks/system_memory_usage/hgh", "90", 404, `did you mean \"` + memHigh + `\"?`, 85},
		{"set prefix", "POST", "/mi/set/suspend_watermarks/system_memory_usage", "90", 400, "is a group of settings", 85},
		{"set read-only", "POST", "/mi/set/sessions", "1", 400, "read-only", 85},
		{"set by GET", "GET", "/mi/set/" + memHigh + "?value=90", "", 405, "GET /mi/set/" + memHigh + ": use POST", 85},
		{"get unknown", "GET", "/mi/get/limits/max_session", "", 404, `did you mean \"limits/max_sessions\"?`, 85},
		{"get by POST", "POST", "/mi/get/" + memHigh, "", 405, "use GET", 85},
		{"suspend by GET", "GET", "/mi/suspend", "", 405, "use POST", 85},
		{"ps by DELETE", "DELETE", "/mi/ps", "", 405, "use GET", 85},
		{"unknown endpoint", "GET", "/mi/stat", "", 404, `no endpoint \"/mi/stat\" (did you mean /mi/stats?)`, 85},
		{"no endpoint", "GET", "/mi/", "", 404, "use /mi/ followed by one of ps, stats, get,", 85},
		{"trailing words", "GET", "/mi/ps/1", "", 404, `unexpected \"1\"`, 85},
		{"ps", "GET", "/mi/ps", "", 200, `"pid": 4101`, 85},
		{"ps age in seconds", "GET", "/mi/ps", "", 200, `"age_seconds": 7500`, 85},
		{"stats", "GET", "/mi/stats", "", 200, `"flip_threshold": 10`, 85},
		{"resource monitor", "GET", "/mi/resource-monitor", "", 200, `"over": true`, 85},
		{"ul", "GET", "/mi/ul", "", 200, `"aor": "sip:bob@example.com"`, 85},
		{"reload", "POST", "/mi/reload", "", 200, `"reloaded": true`, 85},
		{"ul rm", "POST", "/mi/ul/rm?aor=sip:alice@example.com", "", 200, `"removed": 2`, 85},
		{"ul rm without a domain", "POST", "/mi/ul/rm?aor=alice", "", 400, "full address of record", 85},
		{"ul rm of nothing", "POST", "/mi/ul/rm?aor=sip:carol@example.com", "", 404, "no binding under sip:carol@example.com", 85},
		{"user list", "GET", "/mi/user", "", 200, `"user": "bob"`, 85},
		{"user add", "POST", "/mi/user/add", `{"user":"carol","realm":"example.com","ha1_md5":"` + strings.Repeat("a", 32) + `","ha1_sha256":"` + strings.Repeat("b", 64) + `"}`, 200, `"added": "carol@example.com"`, 85},
		{"user add with a password", "POST", "/mi/user/add", `{"user":"carol","realm":"example.com","password":"x"}`, 400, "ha1_md5 (32 hex digits)", 85},
		{"user rm", "POST", "/mi/user/rm?user=alice&realm=example.com", "", 200, `"removed": "alice@example.com"`, 85},
		{"user rm unknown", "POST", "/mi/user/rm?user=zed&realm=example.com", "", 404, "no user zed in realm example.com", 85},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTestBackend()
			srv := serve(t, b, "")
			a := request(t, srv, tt.method, tt.path, tt.body, nil)
			if a.status != tt.status {
				t.Errorf("status: want %v, have %v (%s)", tt.status, a.status, a.body)
			}
			if !strings.Contains(a.body, tt.want) {
				t.Errorf("body: want %q in it, have %s", tt.want, a.body)
			}
			if ct := a.header.Get("Content-Type"); ct != "application/json" {
				t.Errorf("content type: want application/json, have %q", ct)
			}
			if a.status == 405 && a.header.Get("Allow") == "" {
				t.Errorf("405 without Allow")
			}
			if a.status >= 400 && tt.method != "HEAD" {
				var e apiError
				if err := json.Unmarshal([]byte(a.body), &e); err != nil || e.Error == "" {
					t.Errorf("error body: want {\"error\": ...}, have %s", a.body)
				}
			}
			if v, _ := b.Params().Get(memHigh); v != tt.after {
				t.Errorf("%s after: want %v, have %v", memHigh, tt.after, v)
			}
		})
	}
}

func TestHandlerSuspendResume(t *testing.T) {
	t.Parallel()
	b := newTestBackend()
	srv := serve(t, b, "")
	a := request(t, srv, "POST", "/mi/suspend", "", nil)
	var s Stats
	if err := json.Unmarshal([]byte(a.body), &s); err != nil || a.status != 200 {
		t.Fatalf("suspend: %v %s", a.status, a.body)
	}
	if !s.Suspended || !strings.Contains(s.Warning, "suspended by the operator") {
		t.Fatalf("want suspended with a warning, have %+v", s)
	}
	a = request(t, srv, "GET", "/mi/stats", "", nil)
	if !strings.Contains(a.body, `"warning": "server is suspended by the operator.`) {
		t.Fatalf("stats while suspended: want the warning, have %s", a.body)
	}
	if a = request(t, srv, "POST", "/mi/resume", "", nil); a.status != 200 || !strings.Contains(a.body, `"suspended": false`) {
		t.Fatalf("resume: want 200 and not suspended, have %v %s", a.status, a.body)
	}
	if a = request(t, srv, "POST", "/mi/resume", "", nil); a.status != 400 || !strings.Contains(a.body, "resume: not suspended by the operator") {
		t.Fatalf("second resume: want 400 with the reason, have %v %s", a.status, a.body)
	}
}

func TestHandlerToken(t *testing.T) {
	t.Parallel()
	const token = "s3cret-token"
	tests := []struct {
		name   string
		header map[string]string
		status int
	}{
		{"none", nil, 401},
		{"wrong", map[string]string{"Authorization": "Bearer s3cret-tokem"}, 401},
		{"prefix of it", map[string]string{"Authorization": "Bearer s3cret"}, 401},
		{"empty bearer", map[string]string{"Authorization": "Bearer "}, 401},
		{"basic scheme", map[string]string{"Authorization": "Basic " + token}, 401},
		{"wrong header value", map[string]string{"X-Sipvisor-Token": "nope"}, 401},
		{"bearer", map[string]string{"Authorization": "Bearer " + token}, 200},
		{"bearer lower case", map[string]string{"Authorization": "bearer " + token}, 200},
		{"own header", map[string]string{"X-Sipvisor-Token": token}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := newTestBackend()
			srv := serve(t, b, token)
			for _, r := range []struct{ method, path, body string }{
				{"POST", "/mi/set/" + memHigh, "90"},
				{"POST", "/mi/suspend", ""},
				{"POST", "/mi/reload", ""},
				{"GET", "/mi/ps", ""},
			} {
				a := request(t, srv, r.method, r.path, r.body, tt.header)
				if a.status != tt.status {
					t.Errorf("%s %s: want %v, have %v (%s)", r.method, r.path, tt.status, a.status, a.body)
				}
				if tt.status == 401 && (strings.Contains(a.body, "4101") || a.header.Get("WWW-Authenticate") == "") {
					t.Errorf("%s %s: 401 should tell nothing but how to authenticate, have %s", r.method, r.path, a.body)
				}
			}
			want, manual, reloads := 85.0, false, 0
			if tt.status == 200 {
				want, manual, reloads = 90, true, 1
			}
			if v, _ := b.Params().Get(memHigh); v != want {
				t.Errorf("%s: want %v, have %v", memHigh, want, v)
			}
			if b.manual != manual || b.reloads != reloads {
				t.Errorf("suspended, reloads: want %v %v, have %v %v", manual, reloads, b.manual, b.reloads)
			}
		})
	}
}

func httptestServer(tb testing.TB, h http.Handler) string {
	srv := httptest.NewServer(h)
	tb.Cleanup(srv.Close)
	return srv.URL
}
