package ctl

import (
	"bytes"
	"context"
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"
)

// DefaultAddr is where `sipvisor ctl` looks for the control API unless told
// otherwise: the supervisor's default http_listen.
const DefaultAddr = "http://127.0.0.1:8888"

const usage = `usage: sipvisor ctl [flags] COMMAND [flags]

commands:
  ps                     worker groups and their workers
  sockets                every address served, as bound (a port 0 in the
                         config shows the port the kernel gave)
  stats                  state, throttle, flips and counters
  get [PATH]             a setting, or every setting under PATH
  set PATH VALUE         change a setting
  suspend                refuse new sessions until resume
  resume                 end a suspension made by suspend
  resource-monitor       monitors and limits, * beside each over its threshold
  reload                 re-read the config file (as SIGHUP)
  upgrade                start the binary on disk as a new supervisor that takes
                         over every socket, and let this one drain (as SIGUSR2);
                         rolled back, with the new one's last lines, if it fails
  wait-ready             wait until sipvisor takes new calls (/readyz), at
                         most -timeout: for scripts that start it
  ul show [AOR]          registered bindings (AOR sip:user@domain, or a user name)
  ul rm AOR [CONTACT]    drop AOR's binding of CONTACT, or all of AOR's
  user add USER@REALM PASSWORD
                         add (or change) a subscriber of digest authentication;
                         only the password's hashes leave this command
  user rm USER@REALM     remove a subscriber
  user list              list the subscribers
  bans                   sources banned for floods or password guessing:
                         reason (pike, auth), until when, and the count
                         that earned the ban
  ban rm ADDR            lift the ban of a source address (also: unban ADDR)
  ds list                the destination sets: each destination's state
                         (active, probing, inactive, disabled, drain),
                         probe RTT and the calls sent to it
  ds set SETID URI active|inactive|drain
                         take a destination out by hand (inactive; drain:
                         no new calls, dialogs in progress go on), or give
                         it back to its probes (active)
  pprof PROFILE [-worker ID [-group NAME]] [-seconds N] [-o FILE]
                         save a profile of the supervisor, or of a worker
                         (heap, allocs, goroutine, profile: CPU for N
                         seconds, default 10; block, mutex, threadcreate)

flags:
  -addr URL      control address (env SIPVISOR_CTL_ADDR, default ` + DefaultAddr + `)
  -token T       control token (env SIPVISOR_CTL_TOKEN)
  -timeout D     give up after D (default 10s)
  --json         print the server's JSON instead of a table

Flags go before or after the command (ctl wait-ready -timeout 2s); a lone --
ends them, so that ctl set PATH -- -1 passes -1 as a value.
`

// Main runs `sipvisor ctl` with args (the words after "ctl") and returns the
// exit code: 0 done, 1 the server refused or could not be reached, 2 the
// command line is wrong.
func Main(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("sipvisor ctl", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	addr := fs.String("addr", envOr("SIPVISOR_CTL_ADDR", DefaultAddr), "")
	token := fs.String("token", os.Getenv("SIPVISOR_CTL_TOKEN"), "")
	timeout := fs.Duration("timeout", 10*time.Second, "")
	asJSON := fs.Bool("json", false, "")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprint(stdout, usage)
			return 0
		}
		fmt.Fprintf(stderr, "sipvisor ctl: %v\n%s", err, usage)
		return 2
	}
	// Flags may follow the command too (`ctl ps --json`, `ctl wait-ready
	// -timeout 2s`); a word that is not one of them (a command's own, such
	// as pprof's -seconds, or a value such as -5) is left to the command,
	// and a lone -- ends them.
	var words []string
	rest := fs.Args()
	for i := 0; i < len(rest); i++ {
		a := rest[i]
		if a == "--" {
			words = append(words, rest[i+1:]...)
			break
		}
		name, val, hasVal := flagWord(a)
		f := fs.Lookup(name)
		if f == nil {
			words = append(words, a)
			continue
		}
		if name == "json" && !hasVal {
			val, hasVal = "true", true
		}
		if !hasVal {
			if i+1 == len(rest) {
				fmt.Fprintf(stderr, "sipvisor ctl: flag needs an argument: -%s\n%s", name, usage)
				return 2
			}
			i++
			val = rest[i]
		}
		if err := fs.Set(name, val); err != nil {
			fmt.Fprintf(stderr, "sipvisor ctl: invalid value %q for flag -%s: %v\n%s", val, name, err, usage)
			return 2
		}
	}
	if len(words) == 0 {
		fmt.Fprintf(stderr, "sipvisor ctl: no command given\n%s", usage)
		return 2
	}
	base, err := baseURL(*addr)
	if err != nil {
		fmt.Fprintf(stderr, "sipvisor ctl: -addr %q: %v\n", *addr, err)
		return 2
	}
	c := &client{base: base, token: *token, http: &http.Client{Timeout: *timeout}}
	cmd := &command{c: c, stdout: stdout, json: *asJSON, timeout: *timeout}
	if err := cmd.run(ctx, words); err != nil {
		var ue usageError
		if errors.As(err, &ue) {
			fmt.Fprintf(stderr, "sipvisor ctl: %v\n%s", err, usage)
			return 2
		}
		fmt.Fprintf(stderr, "sipvisor ctl: %v\n", err)
		return 1
	}
	return 0
}

// flagWord splits -name, --name, -name=value and --name=value; name is ""
// for a word that is no flag, such as -5.
func flagWord(a string) (name, val string, hasVal bool) {
	if !strings.HasPrefix(a, "-") {
		return "", "", false
	}
	s := strings.TrimPrefix(strings.TrimPrefix(a, "-"), "-")
	if s == "" || !(s[0] >= 'a' && s[0] <= 'z' || s[0] >= 'A' && s[0] <= 'Z') {
		return "", "", false
	}
	name, val, hasVal = strings.Cut(s, "=")
	return name, val, hasVal
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// baseURL accepts a bare host:port as well as a URL, since http_listen in
// the config is written without a scheme.
func baseURL(addr string) (*url.URL, error) {
	if !strings.Contains(addr, "://") {
		addr = "http://" + addr
	}
	u, err := url.Parse(addr)
	if err != nil {
		return nil, err
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, fmt.Errorf("scheme %q: want http or https", u.Scheme)
	}
	if u.Host == "" {
		return nil, errors.New("no host")
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	return u, nil
}

type usageError struct{ msg string }

func (e usageError) Error() string { return e.msg }

type command struct {
	c       *client
	stdout  io.Writer
	json    bool
	timeout time.Duration
}

func (cmd *command) run(ctx context.Context, words []string) error {
	name, args := words[0], words[1:]
	want := func(min, max int, form string) error {
		if len(args) < min || len(args) > max {
			return usageError{fmt.Sprintf("%s: want %s", name, form)}
		}
		return nil
	}
	switch name {
	case "ps":
		if err := want(0, 0, "no arguments"); err != nil {
			return err
		}
		var gs []Group
		return cmd.call(ctx, http.MethodGet, "ps", nil, &gs, func() error { return writePS(cmd.stdout, gs) })
	case "sockets":
		if err := want(0, 0, "no arguments"); err != nil {
			return err
		}
		var ss []Socket
		return cmd.call(ctx, http.MethodGet, "sockets", nil, &ss, func() error { return writeSockets(cmd.stdout, ss) })
	case "stats":
		if err := want(0, 0, "no arguments"); err != nil {
			return err
		}
		var s Stats
		return cmd.call(ctx, http.MethodGet, "stats", nil, &s, func() error { return writeStats(cmd.stdout, s) })
	case "get":
		if err := want(0, 1, "get [PATH]"); err != nil {
			return err
		}
		path := ""
		if len(args) == 1 {
			path = strings.Trim(args[0], "/")
		}
		var v any
		return cmd.call(ctx, http.MethodGet, "get/"+escapePath(path)+cmd.asText(), nil, &v, func() error { return writeGet(cmd.stdout, path, v) })
	case "set":
		if err := want(2, 2, "set PATH VALUE"); err != nil {
			return err
		}
		path := strings.Trim(args[0], "/")
		if path == "" {
			return usageError{"set: PATH is empty"}
		}
		var r SetResult
		body, _ := json.Marshal(map[string]string{"value": args[1]})
		return cmd.call(ctx, http.MethodPost, "set/"+escapePath(path)+cmd.asText(), body, &r, func() error {
			_, err := fmt.Fprintf(cmd.stdout, "%s: %s -> %s\n", r.Path, fmtAny(r.Old), fmtAny(r.Value))
			if err == nil && r.Note != "" {
				_, err = fmt.Fprintf(cmd.stdout, "(%s)\n", r.Note)
			}
			return err
		})
	case "suspend", "resume":
		if err := want(0, 0, "no arguments"); err != nil {
			return err
		}
		var s Stats
		return cmd.call(ctx, http.MethodPost, name, nil, &s, func() error { return writeState(cmd.stdout, s) })
	case "reload":
		if err := want(0, 0, "no arguments"); err != nil {
			return err
		}
		var r ReloadResult
		return cmd.call(ctx, http.MethodPost, "reload", nil, &r, func() error { return writeReload(cmd.stdout, r) })
	case "upgrade":
		if err := want(0, 0, "no arguments"); err != nil {
			return err
		}
		// The new binary may take up to upgrade_timeout to be ready: the
		// default -timeout would give up on it first.
		if cmd.c.http.Timeout < 5*time.Minute {
			c := *cmd.c.http
			c.Timeout = 5 * time.Minute
			cmd.c.http = &c
		}
		var r UpgradeResult
		return cmd.call(ctx, http.MethodPost, "upgrade", nil, &r, func() error {
			_, err := fmt.Fprintf(cmd.stdout, "upgraded: generation %d (pid %d, version %s) serves; the previous one drains its calls\n", r.Generation, r.Pid, r.Version)
			return err
		})
	case "resource-monitor":
		if err := want(0, 0, "no arguments"); err != nil {
			return err
		}
		var rs []Resource
		return cmd.call(ctx, http.MethodGet, "resource-monitor", nil, &rs, func() error { return writeResources(cmd.stdout, rs) })
	case "pprof":
		return cmd.pprof(ctx, args)
	case "wait-ready":
		if err := want(0, 0, "no arguments"); err != nil {
			return err
		}
		return cmd.waitReady(ctx)
	case "user":
		return cmd.user(ctx, args)
	case "bans":
		if err := want(0, 0, "no arguments"); err != nil {
			return err
		}
		var bs []Ban
		return cmd.call(ctx, http.MethodGet, "bans", nil, &bs, func() error { return writeBans(cmd.stdout, bs, now()) })
	case "ban", "unban":
		if name == "ban" {
			if len(args) != 2 || args[0] != "rm" {
				return usageError{"ban: want ban rm ADDR"}
			}
			args = args[1:]
		} else if err := want(1, 1, "unban ADDR"); err != nil {
			return err
		}
		var res map[string]string
		return cmd.call(ctx, http.MethodPost, "bans/rm?"+url.Values{"source": {args[0]}}.Encode(), nil, &res, func() error {
			_, err := fmt.Fprintf(cmd.stdout, "lifted the ban of %s\n", args[0])
			return err
		})
	case "ds":
		return cmd.ds(ctx, args)
	case "ul":
		if len(args) >= 2 && args[0] == "rm" && len(args) <= 3 {
			q := url.Values{"aor": {args[1]}}
			if len(args) == 3 {
				q.Set("contact", args[2])
			}
			var res struct {
				Removed int `json:"removed"`
			}
			return cmd.call(ctx, http.MethodPost, "ul/rm?"+q.Encode(), nil, &res, func() error {
				_, err := fmt.Fprintf(cmd.stdout, "removed %d binding(s)\n", res.Removed)
				return err
			})
		}
		if len(args) == 0 || args[0] != "show" || len(args) > 2 {
			return usageError{"ul: want ul show [AOR] or ul rm AOR [CONTACT]"}
		}
		q := "ul"
		if len(args) == 2 {
			q += "?aor=" + url.QueryEscape(args[1])
		}
		var bs []Binding
		return cmd.call(ctx, http.MethodGet, q, nil, &bs, func() error { return writeBindings(cmd.stdout, bs, now()) })
	}
	msg := fmt.Sprintf("unknown command %q", name)
	if s := didYouMean(name, append(slices.Clone(endpoints), "pprof", "wait-ready", "ban", "unban")); s != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", s)
	}
	return usageError{msg}
}

// waitReady polls /readyz until it answers 200, for up to the -timeout:
// a script that starts sipvisor in the background waits with it until the
// workers are up, where a request sent at once would be refused.
func (cmd *command) waitReady(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, cmd.timeout)
	defer cancel()
	last := "no answer yet"
	for {
		resp, err := cmd.c.send(ctx, http.MethodGet, "/readyz", nil)
		if err == nil {
			raw, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				_, err := fmt.Fprintln(cmd.stdout, "ready")
				return err
			}
			var r struct{ Reason string }
			if json.Unmarshal(raw, &r) == nil && r.Reason != "" {
				last = r.Reason
			} else {
				last = resp.Status
			}
		} else if ctx.Err() == nil {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not ready after %s: %s", cmd.timeout, last)
		case <-time.After(50 * time.Millisecond):
		}
	}
}

// asText asks for durations as the config writes them (2s, not 2), for a
// table; --json passes the server's numbers on unchanged.
func (cmd *command) asText() string {
	if cmd.json {
		return ""
	}
	return "?as=text"
}

// now is the clock `ul show` measures expiry against; tests fix it.
var now = time.Now

// call does one request; with --json it copies the answer to stdout as it
// came, otherwise it decodes it into into and runs show.
func (cmd *command) call(ctx context.Context, method, endpoint string, body []byte, into any, show func() error) error {
	raw, err := cmd.c.do(ctx, method, endpoint, body)
	if err != nil {
		return err
	}
	if cmd.json {
		_, err := cmd.stdout.Write(raw)
		return err
	}
	if into != nil {
		if err := json.Unmarshal(raw, into); err != nil {
			return fmt.Errorf("%s: unreadable answer from %s: %v", endpoint, cmd.c.base, err)
		}
	}
	return show()
}

func escapePath(p string) string {
	segs := strings.Split(p, "/")
	for i, s := range segs {
		segs[i] = url.PathEscape(s)
	}
	return strings.Join(segs, "/")
}

type client struct {
	base  *url.URL
	token string
	http  *http.Client
}

// do sends one request to /mi/<endpoint> and returns the body of a 2xx
// answer, or an error carrying the server's message.
func (c *client) do(ctx context.Context, method, endpoint string, body []byte) ([]byte, error) {
	resp, err := c.send(ctx, method, "/mi/"+endpoint, body)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("reading the answer from %s: %v", c.base, err)
	}
	if resp.StatusCode/100 == 2 {
		return raw, nil
	}
	return nil, c.refusal(resp, raw)
}

// send sends one request to path (from the root of the control address)
// and returns the answer, whatever its status; the caller closes its body.
func (c *client) send(ctx context.Context, method, path string, body []byte) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base.String()+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) {
			return nil, fmt.Errorf("cannot reach %s: connection refused (is sipvisor running? set -addr or SIPVISOR_CTL_ADDR)", c.base)
		}
		return nil, fmt.Errorf("cannot reach %s: %v", c.base, unwrapURL(err))
	}
	return resp, nil
}

// refusal is the error for an answer that is not a success, raw its body:
// the server's message, with the address and status where they help.
func (c *client) refusal(resp *http.Response, raw []byte) error {
	var e apiError
	msg := strings.TrimSpace(string(raw))
	if json.Unmarshal(raw, &e) == nil && e.Error != "" {
		msg = e.Error
	}
	if len(msg) > 500 {
		msg = msg[:500] + "…"
	}
	switch resp.StatusCode {
	case http.StatusUnauthorized:
		return fmt.Errorf("%s refused the token: %s (set -token or SIPVISOR_CTL_TOKEN)", c.base, msg)
	case http.StatusNotFound, http.StatusBadRequest, http.StatusMethodNotAllowed:
		return errors.New(msg)
	}
	return fmt.Errorf("%s answered %s: %s", c.base, resp.Status, msg)
}

// unwrapURL drops url.Error's "Get \"...\":" prefix, since the message
// already names the address.
func unwrapURL(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

// user is `ctl user add|rm|list`. The HA1 hashes are computed here, so the
// password crosses neither the control API nor the store.
func (cmd *command) user(ctx context.Context, args []string) error {
	split := func(s string) (string, string, error) {
		name, realm, ok := strings.Cut(s, "@")
		if !ok || name == "" || realm == "" {
			return "", "", usageError{fmt.Sprintf("user: want USER@REALM, as alice@example.com, have %q", s)}
		}
		return name, strings.ToLower(realm), nil
	}
	switch {
	case len(args) == 3 && args[0] == "add":
		name, realm, err := split(args[1])
		if err != nil {
			return err
		}
		a1 := name + ":" + realm + ":" + args[2]
		m, s := md5.Sum([]byte(a1)), sha256.Sum256([]byte(a1))
		body, _ := json.Marshal(User{Name: name, Realm: realm, HA1MD5: hex.EncodeToString(m[:]), HA1SHA256: hex.EncodeToString(s[:])})
		return cmd.call(ctx, http.MethodPost, "user/add", body, nil, func() error {
			_, err := fmt.Fprintf(cmd.stdout, "added %s@%s\n", name, realm)
			return err
		})
	case len(args) == 2 && args[0] == "rm":
		name, realm, err := split(args[1])
		if err != nil {
			return err
		}
		q := url.Values{"user": {name}, "realm": {realm}}
		return cmd.call(ctx, http.MethodPost, "user/rm?"+q.Encode(), nil, nil, func() error {
			_, err := fmt.Fprintf(cmd.stdout, "removed %s@%s\n", name, realm)
			return err
		})
	case len(args) == 1 && args[0] == "list":
		var us []User
		return cmd.call(ctx, http.MethodGet, "user", nil, &us, func() error {
			if len(us) == 0 {
				_, err := fmt.Fprintln(cmd.stdout, "no users")
				return err
			}
			for _, u := range us {
				if _, err := fmt.Fprintf(cmd.stdout, "%s@%s\n", u.Name, u.Realm); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return usageError{"user: want user add USER@REALM PASSWORD, user rm USER@REALM or user list"}
}
