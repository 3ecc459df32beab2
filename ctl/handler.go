package ctl

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
)

// maxBody bounds a request body: the largest legitimate one is a number.
const maxBody = 64 << 10

// Handler serves the control API for b. Mount it at /mi/ without stripping
// the prefix (mux.Handle("/mi/", ctl.Handler(b, token))); it also accepts
// paths already stripped of /mi. When token is not empty, every request must
// carry it as "Authorization: Bearer <token>" or "X-Sipvisor-Token: <token>".
//
//	GET  /mi/ps                 []Group
//	GET  /mi/sockets            []Socket: every address served, as bound
//	GET  /mi/stats              Stats
//	GET  /mi/get/<path>         a setting's value, or the subtree under a prefix
//	POST /mi/set/<path>         body or ?value=: the new value; SetResult
//	POST /mi/suspend            Stats after suspending
//	POST /mi/resume             Stats after resuming
//	GET  /mi/resource-monitor   []Resource
//	POST /mi/reload             ReloadResult
//	GET  /mi/ul                 []Binding; ?aor= keeps one address of record
//	POST /mi/ul/rm?aor=&contact= {"removed": N}; without contact, every binding of aor
//	GET  /mi/user               []User, without their hashes
//	POST /mi/user/add           body: a User with its HA1s; {"added": "user@realm"}
//	POST /mi/user/rm?user=&realm= {"removed": "user@realm"}
//
// Errors are {"error": "..."} with 400 (bad value or refused change), 401
// (no or wrong token), 404 (no such endpoint or setting) or 405 (wrong
// method).
func Handler(b Backend, token string) http.Handler {
	h := &handler{b: b}
	if token != "" {
		sum := sha256.Sum256([]byte(token))
		h.token = sum[:]
	}
	return h
}

type handler struct {
	b Backend
	// token is the SHA-256 of the token, so the comparison takes the same
	// time whatever the length of the guess.
	token []byte
}

// SetResult answers POST /mi/set/<path>.
type SetResult struct {
	Path  string `json:"path"`
	Old   any    `json:"old"`
	Value any    `json:"value"`
	// Setting is the config file's name for the setting, and Note says
	// that the change lasts until the next restart or reload unless the
	// file says the same.
	Setting string `json:"setting"`
	Note    string `json:"note"`
}

// ReloadResult answers POST /mi/reload.
type ReloadResult struct {
	Reloaded bool `json:"reloaded"`
	// Changed names the settings whose new value took effect.
	Changed []string `json:"changed"`
	// RestartNeeded lists, as FILE:LINE: what, each change that takes a
	// restart; the running value stays until then.
	RestartNeeded []string `json:"restart_needed"`
}

// configName is the config file's name of a live setting's path:
// suspend_watermarks/heap_usage/high is suspend_heap_usage_high,
// limits/max_calls is max_calls, throttle/rtt_threshold is
// throttle_rtt_threshold.
func configName(path string) string {
	if m, ok := strings.CutPrefix(path, "suspend_watermarks/"); ok {
		return "suspend_" + strings.ReplaceAll(m, "/", "_")
	}
	if l, ok := strings.CutPrefix(path, "limits/"); ok {
		return l
	}
	return strings.ReplaceAll(path, "/", "_")
}

// apiError is the body of every error answer.
type apiError struct {
	Error string `json:"error"`
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if !authorized(h.token, r) {
		refuseToken(w)
		return
	}
	path := strings.TrimPrefix(r.URL.Path, "/mi")
	path = strings.TrimPrefix(path, "/")
	cmd, rest, _ := strings.Cut(path, "/")
	switch cmd {
	case "ps":
		if h.method(w, r, http.MethodGet) && h.noRest(w, rest) {
			writeJSON(w, http.StatusOK, nonNil(h.b.PS()))
		}
	case "sockets":
		if h.method(w, r, http.MethodGet) && h.noRest(w, rest) {
			writeJSON(w, http.StatusOK, nonNil(h.b.Sockets()))
		}
	case "stats":
		if h.method(w, r, http.MethodGet) && h.noRest(w, rest) {
			writeJSON(w, http.StatusOK, h.b.Stats())
		}
	case "resource-monitor":
		if h.method(w, r, http.MethodGet) && h.noRest(w, rest) {
			writeJSON(w, http.StatusOK, nonNil(h.b.ResourceMonitor()))
		}
	case "ul":
		switch rest {
		case "rm":
			if h.method(w, r, http.MethodPost) {
				h.ulRemove(w, r)
			}
		default:
			if h.method(w, r, http.MethodGet) && h.noRest(w, rest) {
				h.ul(w, r)
			}
		}
	case "user":
		h.user(w, r, rest)
	case "bans":
		switch rest {
		case "rm":
			if h.method(w, r, http.MethodPost) {
				h.unban(w, r)
			}
		default:
			if h.method(w, r, http.MethodGet) && h.noRest(w, rest) {
				writeJSON(w, http.StatusOK, nonNil(h.b.Bans()))
			}
		}
	case "ds":
		h.ds(w, r, rest)
	case "get":
		if h.method(w, r, http.MethodGet) {
			get := h.b.Params().Get
			if asText(r) {
				get = h.b.Params().GetText
			}
			v, err := get(rest)
			if err != nil {
				writeErr(w, err)
				return
			}
			writeJSON(w, http.StatusOK, v)
		}
	case "set":
		if h.method(w, r, http.MethodPost) {
			h.set(w, r, rest)
		}
	case "suspend", "resume", "reload":
		if !h.method(w, r, http.MethodPost) || !h.noRest(w, rest) {
			return
		}
		var err error
		var rr ReloadResult
		switch cmd {
		case "suspend":
			err = h.b.Suspend()
		case "resume":
			err = h.b.Resume()
		case "reload":
			rr, err = h.b.Reload()
		}
		if err != nil {
			writeError(w, http.StatusBadRequest, cmd+": "+err.Error())
			return
		}
		if cmd == "reload" {
			rr.Reloaded = true
			if rr.Changed == nil {
				rr.Changed = []string{}
			}
			if rr.RestartNeeded == nil {
				rr.RestartNeeded = []string{}
			}
			writeJSON(w, http.StatusOK, rr)
			return
		}
		writeJSON(w, http.StatusOK, h.b.Stats())
	case "":
		writeError(w, http.StatusNotFound, "no endpoint given: use /mi/ followed by one of "+strings.Join(endpoints, ", "))
	default:
		msg := fmt.Sprintf("no endpoint %q", r.URL.Path)
		if s := didYouMean(cmd, endpoints); s != "" {
			msg += fmt.Sprintf(" (did you mean /mi/%s?)", s)
		}
		writeError(w, http.StatusNotFound, msg)
	}
}

var endpoints = []string{"ps", "stats", "get", "set", "suspend", "resume", "resource-monitor", "reload", "ul", "user", "sockets", "bans", "ds"}

// RequireToken guards h with the control token as Handler guards the API,
// for what the supervisor serves beside it: profiles tell much about the
// process, and a CPU profile costs it CPU. An empty token guards nothing.
func RequireToken(token string, h http.Handler) http.Handler {
	if token == "" {
		return h
	}
	sum := sha256.Sum256([]byte(token))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !authorized(sum[:], r) {
			refuseToken(w)
			return
		}
		h.ServeHTTP(w, r)
	})
}

func refuseToken(w http.ResponseWriter) {
	w.Header().Set("WWW-Authenticate", `Bearer realm="sipvisor"`)
	writeError(w, http.StatusUnauthorized, "missing or wrong token: send Authorization: Bearer <token>")
}

// authorized reports whether r carries the token whose SHA-256 is token
// (any request does when token is nil).
func authorized(token []byte, r *http.Request) bool {
	if token == nil {
		return true
	}
	got := r.Header.Get("X-Sipvisor-Token")
	if a := r.Header.Get("Authorization"); got == "" && len(a) > 7 && strings.EqualFold(a[:7], "bearer ") {
		got = strings.TrimSpace(a[7:])
	}
	sum := sha256.Sum256([]byte(got))
	return got != "" && subtle.ConstantTimeCompare(sum[:], token) == 1
}

// method answers 405 unless r uses want (HEAD counts as GET).
func (h *handler) method(w http.ResponseWriter, r *http.Request, want string) bool {
	if r.Method == want || (want == http.MethodGet && r.Method == http.MethodHead) {
		return true
	}
	w.Header().Set("Allow", want)
	writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: use %s", r.Method, r.URL.Path, want))
	return false
}

func (h *handler) noRest(w http.ResponseWriter, rest string) bool {
	if rest == "" {
		return true
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("unexpected %q after the endpoint", rest))
	return false
}

func (h *handler) set(w http.ResponseWriter, r *http.Request, path string) {
	text, err := setValue(r)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	p := h.b.Params()
	old, err := p.swap(path, text)
	if err != nil {
		writeErr(w, err)
		return
	}
	asTxt := asText(r)
	get := p.Get
	if asTxt {
		get = p.GetText
	}
	v, err := get(path)
	if err != nil {
		writeErr(w, err)
		return
	}
	k, _ := p.Kind(path)
	was := k.value(old, asTxt)
	name := configName(clean(path))
	writeJSON(w, http.StatusOK, SetResult{Path: clean(path), Old: was, Value: v, Setting: name,
		Note: "lasts until the next restart or reload; to keep it, set " + name + " in the config file"})
}

// asText says whether the caller asked for values as the config writes them
// (?as=text), as `sipvisor ctl` does for its tables.
func asText(r *http.Request) bool { return r.URL.Query().Get("as") == "text" }

// setValue finds the new value of a set: ?value=, or the body as a JSON
// number, string or bool, as {"value": ...}, or as plain text.
func setValue(r *http.Request) (string, error) {
	if v, ok := r.URL.Query()["value"]; ok {
		if len(v) != 1 {
			return "", errors.New("give one value")
		}
		return v[0], nil
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil {
		return "", fmt.Errorf("reading the body: %v", err)
	}
	if len(body) > maxBody {
		return "", fmt.Errorf("body over %d bytes", maxBody)
	}
	s := strings.TrimSpace(string(body))
	if s == "" {
		return "", errors.New("no value given: send it as the body or as ?value=")
	}
	if !strings.HasPrefix(s, "{") && !strings.HasPrefix(s, `"`) {
		return s, nil
	}
	var raw json.RawMessage = []byte(s)
	if strings.HasPrefix(s, "{") {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(raw, &obj); err != nil {
			return "", fmt.Errorf("body is not valid JSON: %v", err)
		}
		var ok bool
		if raw, ok = obj["value"]; !ok || len(obj) != 1 {
			return "", errors.New(`body must be {"value": ...}`)
		}
	}
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return "", fmt.Errorf("body is not valid JSON: %v", err)
	}
	switch v := v.(type) {
	case string:
		return v, nil
	case float64:
		return strconv.FormatFloat(v, 'g', -1, 64), nil
	case bool:
		return strconv.FormatBool(v), nil
	}
	return "", fmt.Errorf("value must be a number, a string or a bool, not %s", raw)
}

func (h *handler) ul(w http.ResponseWriter, r *http.Request) {
	bs, err := h.b.Locations(r.URL.Query().Get("aor"))
	if err != nil {
		writeError(w, http.StatusServiceUnavailable, err.Error())
		return
	}
	writeJSON(w, http.StatusOK, nonNil(bs))
}

// ErrNoBinding is RemoveLocation's answer when nothing matched.
var ErrNoBinding = errors.New("no such binding")

func (h *handler) ulRemove(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	aor, contact := q.Get("aor"), q.Get("contact")
	if !strings.Contains(aor, "@") {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("ul rm wants a full address of record, sip:user@domain, have %q", aor))
		return
	}
	n, err := h.b.RemoveLocation(aor, contact)
	switch {
	case errors.Is(err, ErrNoBinding):
		what := "no binding under " + aor
		if contact != "" {
			what = fmt.Sprintf("no binding of %s under %s", contact, aor)
		}
		writeError(w, http.StatusNotFound, what)
	case err != nil:
		writeError(w, http.StatusServiceUnavailable, err.Error())
	default:
		writeJSON(w, http.StatusOK, map[string]int{"removed": n})
	}
}

// ErrNoBan is Unban's answer for a source that is not banned.
var ErrNoBan = errors.New("no such ban")

func (h *handler) unban(w http.ResponseWriter, r *http.Request) {
	src := r.URL.Query().Get("source")
	err := h.b.Unban(src)
	switch {
	case errors.Is(err, ErrNoBan):
		writeError(w, http.StatusNotFound, fmt.Sprintf("%s is not banned", src))
	case err != nil:
		writeError(w, http.StatusBadRequest, "ban rm: "+err.Error())
	default:
		writeJSON(w, http.StatusOK, map[string]string{"lifted": src})
	}
}

// ErrNoUser is RemoveUser's answer for a subscriber it does not know.
var ErrNoUser = errors.New("no such user")

func (h *handler) user(w http.ResponseWriter, r *http.Request, rest string) {
	switch rest {
	case "":
		if !h.method(w, r, http.MethodGet) {
			return
		}
		us, err := h.b.Users()
		if err != nil {
			writeError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		for i := range us {
			us[i].HA1MD5, us[i].HA1SHA256 = "", ""
		}
		writeJSON(w, http.StatusOK, nonNil(us))
	case "add":
		if !h.method(w, r, http.MethodPost) {
			return
		}
		var u User
		if err := json.NewDecoder(io.LimitReader(r.Body, maxBody)).Decode(&u); err != nil {
			writeError(w, http.StatusBadRequest, "user add: body: "+err.Error())
			return
		}
		if u.Name == "" || u.Realm == "" || !isHex(u.HA1MD5, 32) || !isHex(u.HA1SHA256, 64) {
			writeError(w, http.StatusBadRequest, "user add: want user, realm, ha1_md5 (32 hex digits) and ha1_sha256 (64)")
			return
		}
		if err := h.b.AddUser(u); err != nil {
			writeError(w, http.StatusServiceUnavailable, err.Error())
			return
		}
		writeJSON(w, http.StatusOK, map[string]string{"added": u.Name + "@" + u.Realm})
	case "rm":
		if !h.method(w, r, http.MethodPost) {
			return
		}
		name, realm := r.URL.Query().Get("user"), r.URL.Query().Get("realm")
		err := h.b.RemoveUser(name, realm)
		switch {
		case errors.Is(err, ErrNoUser):
			writeError(w, http.StatusNotFound, fmt.Sprintf("no user %s in realm %s", name, realm))
		case err != nil:
			writeError(w, http.StatusServiceUnavailable, err.Error())
		default:
			writeJSON(w, http.StatusOK, map[string]string{"removed": name + "@" + realm})
		}
	default:
		writeError(w, http.StatusNotFound, fmt.Sprintf("no endpoint %q: want /mi/user, /mi/user/add or /mi/user/rm", r.URL.Path))
	}
}

func isHex(s string, n int) bool {
	if len(s) != n {
		return false
	}
	for _, c := range s {
		if !strings.ContainsRune("0123456789abcdef", c) {
			return false
		}
	}
	return true
}

// nonNil makes an empty list encode as [] rather than null.
func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

func writeErr(w http.ResponseWriter, err error) {
	status := http.StatusBadRequest
	if errors.Is(err, ErrUnknownPath) {
		status = http.StatusNotFound
	}
	writeError(w, status, err.Error())
}

func writeError(w http.ResponseWriter, status int, msg string) {
	writeJSON(w, status, apiError{msg})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(apiError{"encoding the answer: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
