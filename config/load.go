package config

import (
	"bytes"
	_ "embed"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"github.com/alecthomas/participle/v2/lexer"

	"github.com/sipvisor/sipvisor/location"
	"github.com/sipvisor/sipvisor/overload/slowstart"
	"github.com/sipvisor/sipvisor/overload/watermark"
	"github.com/sipvisor/sipvisor/profile"
	"github.com/sipvisor/sipvisor/script"
)

// DefaultText is the built-in config that `sipvisor` runs with no -f.
//
//go:embed default.cfg
var DefaultText string

// DefaultName is the file name the built-in config's positions carry.
const DefaultName = "<default>"

// maxIncludeDepth stops runaway nesting that is not a cycle (a file that
// includes a fresh copy of itself through ever longer paths).
const maxIncludeDepth = 16

// Error is one problem in a config, at the token that causes it. Load returns
// all of them joined with errors.Join; errors.As on the joined error or a type
// switch over Unwrap() []error gives them one by one.
type Error struct {
	Pos script.Pos
	Msg string
}

func (e *Error) Error() string { return e.Pos.String() + ": " + e.Msg }

// Default loads DefaultText. It panics only if the built-in text is broken,
// which a test rules out.
func Default() *Config {
	c, err := Load(DefaultName, []byte(DefaultText))
	if err != nil {
		panic("config: built-in default config is broken: " + err.Error())
	}
	return c
}

// LoadFile reads and loads the config at path, or the snapshot at path
// (see Snapshot).
func LoadFile(path string) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read config: %w", err)
	}
	if bytes.HasPrefix(src, []byte(snapshotMagic)) {
		return LoadSnapshot(src)
	}
	return Load(path, src)
}

// Load parses and validates src. name is used in positions, and include_file
// paths are relative to filepath.Dir(name). Every problem found is returned,
// each as an *Error. A syntax error drops only the statement or the item it
// is in, so the syntax errors after it are found too; but then the checks
// that need the whole file are not run, because checks on a partial file
// would report things that are not wrong.
func Load(name string, src []byte) (*Config, error) {
	return load(name, src, readInclude)
}

func load(name string, src []byte, read func(string) ([]byte, error)) (*Config, error) {
	l := &loader{
		read:     read,
		sources:  map[string][]byte{},
		setAt:    map[string]script.Pos{},
		profiles: map[string]script.Pos{},
		routes:   map[string]map[string]script.Pos{"route": {}, "onreply_route": {}, "failure_route": {}, "timer_route": {}},
	}
	l.readFile(name, src, script.Pos{})
	if !l.syntax {
		l.build()
	} else {
		// A name is wrong or right whatever else the file holds.
		for _, it := range l.items {
			if g := it.Global; g != nil {
				if _, ok := settingByName[g.Name.Val]; !ok || isQuoted(g.Name.Val) {
					l.errorf(pos(g.Name.Pos), "%s", unknownSetting(g.Name.Val))
				}
			}
		}
	}
	if len(l.errs) > 0 {
		return nil, l.joined()
	}
	l.cfg.File = name
	l.cfg.sources = l.sources
	l.cfg.At = l.setAt
	return l.cfg, nil
}

type loader struct {
	read    func(string) ([]byte, error)
	sources map[string][]byte // every file read, by the path it was read as
	errs    []*Error
	syntax  bool     // a syntax error: the items are not all there
	files   []string // in the order first read, to sort errors by file
	stack   []string // absolute paths of the includes being read
	items   []*itemAST
	cfg     *Config
	setAt   map[string]script.Pos // where each global was set
	first   *script.Pos           // first socket line, for "no main route"
	groups  []groupRef
	udpAt   []udpRef
	tlsAt   *script.Pos // the first tls: or wss: socket

	profiles map[string]script.Pos            // lower-case name → where defined
	routes   map[string]map[string]script.Pos // block kind → name → where defined
}

// groupRef remembers a worker count that must fit under its profile's
// ceiling, checked once every profile is known.
type groupRef struct {
	workers int
	profile string
	at      script.Pos
}

// udpRef is a UDP socket and where to point at when its count does not fit.
type udpRef struct {
	index int
	at    script.Pos
}

func pos(p lexer.Position) script.Pos {
	return script.Pos{File: p.Filename, Line: p.Line, Col: p.Column}
}

func (l *loader) errorf(p script.Pos, format string, args ...any) {
	l.errs = append(l.errs, &Error{Pos: p, Msg: fmt.Sprintf(format, args...)})
}

func (l *loader) joined() error {
	rank := map[string]int{}
	for i, f := range l.files {
		rank[f] = i
	}
	sort.SliceStable(l.errs, func(i, j int) bool {
		a, b := l.errs[i].Pos, l.errs[j].Pos
		if a.File != b.File {
			return rank[a.File] < rank[b.File]
		}
		if a.Line != b.Line {
			return a.Line < b.Line
		}
		return a.Col < b.Col
	})
	out := make([]error, 0, len(l.errs))
	seen := map[string]bool{}
	for _, e := range l.errs {
		if s := e.Error(); !seen[s] {
			seen[s] = true
			out = append(out, e)
		}
	}
	if len(out) > maxErrors {
		// A file that is not a config at all would otherwise bury the first,
		// useful lines under thousands of others.
		last := *out[maxErrors].(*Error)
		last.Msg = "too many errors; stopping here"
		out = append(out[:maxErrors], &last)
	}
	return errors.Join(out...)
}

// maxErrors is how many problems Load reports before it stops listing them.
const maxErrors = 100

// readFile parses one file and, in place of each include_file, the file it
// names, so that items come out in the order a reader sees them.
func (l *loader) readFile(name string, src []byte, from script.Pos) {
	abs, err := filepath.Abs(name)
	if err != nil {
		abs = name
	}
	for i, f := range l.stack {
		if f == abs {
			chain := append([]string{}, l.stack[i:]...)
			chain = append(chain, abs)
			for j := range chain {
				chain[j] = filepath.Base(chain[j])
			}
			l.syntaxf(from, "include cycle: %s", strings.Join(chain, " includes "))
			return
		}
	}
	if len(l.stack) >= maxIncludeDepth {
		l.syntaxf(from, "includes nest deeper than %d files", maxIncludeDepth)
		return
	}
	l.files = append(l.files, name)
	l.sources[name] = src
	l.stack = append(l.stack, abs)
	defer func() { l.stack = l.stack[:len(l.stack)-1] }()

	toks, end, bad := l.lexAll(name, src)
	var items []*itemAST
	for _, c := range l.split(toks, end, bad) {
		if it := l.parseItem(c); it != nil {
			items = append(items, it)
		}
	}
	for _, it := range items {
		if it.Include == nil {
			l.items = append(l.items, it)
			continue
		}
		p := pos(it.Include.Path.Pos)
		rel := unquote(it.Include.Path.Val)
		if rel == "" {
			l.syntaxf(p, "include_file wants a file name")
			continue
		}
		path := rel
		if !filepath.IsAbs(path) {
			path = filepath.Join(filepath.Dir(name), rel)
		}
		sub, err := l.read(path)
		if err != nil {
			l.syntaxf(p, "cannot read include file: %v", err)
			continue
		}
		l.readFile(path, sub, p)
	}
}

// build turns the items into a Config. Profiles and block names are collected
// first, so that unlike OpenSIPS the order of lines does not matter.
func (l *loader) build() {
	c := &Config{Params: map[string]string{}, Profiles: map[string]profile.Profile{}}
	l.cfg = c
	for i := range settings {
		s := &settings[i]
		if s.Default == "" || s.set == nil {
			continue
		}
		v, err := s.parse(s.Default)
		if err != nil {
			panic("config: default of " + s.Name + ": " + err.Error())
		}
		s.set(c, v)
	}
	c.UDPWorkers = Group{Workers: mustInt(settingByName["udp_workers"].Default)}
	c.TCPWorkers = Group{Workers: mustInt(settingByName["tcp_workers"].Default)}
	c.TimerWorkers = Group{Workers: mustInt(settingByName["timer_workers"].Default)}

	for _, it := range l.items {
		switch {
		case it.Profile != nil:
			l.profile(it.Profile)
		case it.Block != nil:
			l.declareBlock(it.Block)
		}
	}
	for _, it := range l.items {
		if it.Global != nil {
			l.global(it.Global)
		}
	}
	for k, p := range c.Profiles {
		p.Cooldown = c.AutoScalingCooldown
		c.Profiles[k] = p
	}
	for _, g := range l.groups {
		if p, ok := c.Profiles[g.profile]; ok && g.workers > p.UpTo {
			l.errorf(g.at, "%d workers exceed scale up to %d of profile %q", g.workers, p.UpTo, p.Name)
		}
	}
	// A UDP socket takes what it lacks from udp_workers, which may come later
	// in the file, so its count is checked only now.
	for _, u := range l.udpAt {
		s := c.Sockets[u.index]
		key, n := s.Profile, s.Workers
		if key == "" {
			key = c.UDPWorkers.Profile
		}
		if n == 0 {
			n = c.UDPWorkers.Workers
		}
		p, ok := c.Profiles[key]
		if !ok || n <= p.UpTo {
			continue
		}
		switch {
		case s.Workers > 0:
			l.errorf(u.at, "use_workers %d exceeds scale up to %d of profile %q", n, p.UpTo, p.Name)
		case s.Profile != "":
			l.errorf(u.at, "udp_workers = %d exceeds scale up to %d of profile %q; give this socket use_workers N", n, p.UpTo, p.Name)
		}
	}
	l.crossChecks()
	if _, err := location.ParseURL(c.LocationStore); err != nil {
		l.errorf(l.setAt["location_store"], "%v", err)
	}
	for _, a := range c.Auth.Algorithms {
		if a != "MD5" && a != "SHA-256" {
			l.errorf(l.setAt["auth_algorithms"], "auth_algorithms: unknown algorithm %q; want SHA-256 or MD5", a)
		}
	}
	if len(c.Auth.Algorithms) == 0 {
		l.errorf(l.setAt["auth_algorithms"], "auth_algorithms: want at least one of SHA-256, MD5")
	}
	if _, err := parseExempt(c.Params["ban_exempt"]); err != nil {
		l.errorf(l.setAt["ban_exempt"], "%v", err)
	}
	for _, o := range c.WSAllowedOrigins {
		if err := checkOrigin(o); err != nil {
			l.errorf(l.setAt["ws_allowed_origins"], "ws_allowed_origins: %v", err)
		}
	}
	for _, d := range c.Domains {
		if strings.ContainsAny(d, "@:;<>/") {
			l.errorf(l.setAt["domain"], "domain %q: want a host name such as example.com, without user, port or parameters", d)
		}
	}
	l.dispatcher()
	c.Script = l.script()
	if l.first != nil {
		if _, ok := c.Script.Routes[""]; !ok {
			l.errorf(*l.first, "sockets need a main route { ... } block to route their requests")
		}
	}
}

// Store is where registrations live: location_store parsed, a relative
// SQLite path made relative to the directory of the file that sets it (of
// the config file when it keeps its default; StateDir for the built-in
// config).
func (c *Config) Store() (location.Spec, error) {
	sp, err := location.ParseURL(c.LocationStore)
	if err != nil {
		return sp, err
	}
	file := c.File
	if at, ok := c.At["location_store"]; ok {
		file = at.File
	}
	sp = sp.Resolve(baseDir(file))
	if sp.Kind == location.KindSQLite {
		if abs, err := filepath.Abs(sp.Path); err == nil {
			sp.Path = abs
		}
	}
	return sp, nil
}

func mustInt(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil {
		panic(err)
	}
	return n
}

// unquote strips quotes and resolves \" \\ \n \r \t. Other backslashes stay,
// because scripts write regular expressions such as "^\+1" in strings.
func unquote(s string) string {
	if len(s) < 2 || (s[0] != '"' && s[0] != '\'') {
		return s
	}
	q := s[0]
	s = s[1 : len(s)-1]
	if q == '\'' || !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] != '\\' || i+1 == len(s) {
			b.WriteByte(s[i])
			continue
		}
		i++
		switch s[i] {
		case '"', '\\':
			b.WriteByte(s[i])
		case 'n':
			b.WriteByte('\n')
		case 'r':
			b.WriteByte('\r')
		case 't':
			b.WriteByte('\t')
		default:
			b.WriteByte('\\')
			b.WriteByte(s[i])
		}
	}
	return b.String()
}

func isQuoted(s string) bool { return len(s) > 0 && (s[0] == '"' || s[0] == '\'') }

// num reads a whole number token and checks it against [min, max].
func (l *loader) num(t *numTok, what string, min, max int) (int, bool) {
	p := pos(t.Pos)
	n, err := strconv.Atoi(t.Val)
	if err != nil {
		l.errorf(p, "%s wants a whole number, have %q", what, t.Val)
		return 0, false
	}
	if n < min || n > max {
		l.errorf(p, "%s %d is out of range %d..%d", what, n, min, max)
		return n, false
	}
	return n, true
}

// percent reads a token such as 70%; the sign is required as in OpenSIPS.
func (l *loader) percent(t *numTok, what string, min, max int) (int, bool) {
	if !strings.HasSuffix(t.Val, "%") {
		l.errorf(pos(t.Pos), "%s wants a percentage such as 70%%, have %q", what, t.Val)
		return 0, false
	}
	return l.num(&numTok{Pos: t.Pos, Val: strings.TrimSuffix(t.Val, "%")}, what, min, max)
}

func (l *loader) profile(a *profileAST) {
	name := unquote(a.Name.Val)
	np := pos(a.Name.Pos)
	if !validName(name) {
		l.errorf(np, "profile name %q must be letters, digits and underscores", name)
		return
	}
	key := strings.ToLower(name)
	if at, dup := l.profiles[key]; dup {
		l.errorf(np, "auto-scaling profile %q is already defined at %s (names ignore case)", name, at)
		return
	}
	l.profiles[key] = np

	p := profile.Profile{Name: name}
	ok := true
	var good bool
	p.UpTo, good = l.num(a.Up.Max, "scale up to", 1, 999)
	ok = ok && good
	p.UpLoad, good = l.percent(a.Up.Load, "scale up load", 1, 100)
	ok = ok && good
	p.UpCycles, good = l.num(a.Up.Cycles, "scale up cycles", 1, 1000)
	ok = ok && good
	p.Window = p.UpCycles
	if a.Up.Window != nil {
		p.Window, good = l.num(a.Up.Window, "within", 1, 1000)
		if good && p.UpCycles >= 1 && p.Window < p.UpCycles {
			l.errorf(pos(a.Up.Window.Pos), "window of %d cycles is shorter than the %d cycles it must find over %d%%", p.Window, p.UpCycles, p.UpLoad)
			good = false
		}
		ok = ok && good
	}
	if d := a.Down; d != nil {
		p.DownTo, good = l.num(d.Min, "scale down to", 0, 998)
		if good && p.UpTo >= 1 && p.DownTo >= p.UpTo {
			l.errorf(pos(d.Min.Pos), "scale down to %d must be less than scale up to %d", p.DownTo, p.UpTo)
			good = false
		}
		ok = ok && good
		p.DownLoad, good = l.percent(d.Load, "scale down load", 0, 100)
		if good && p.UpLoad >= 1 && p.DownLoad >= p.UpLoad {
			l.errorf(pos(d.Load.Pos), "scale down load %d%% must be below scale up load %d%%", p.DownLoad, p.UpLoad)
			good = false
		}
		ok = ok && good
		p.DownCycles, good = l.num(d.Cycles, "scale down cycles", 1, 1000)
		ok = ok && good
	}
	if ok {
		l.cfg.Profiles[key] = p
	}
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !(r == '_' || r >= '0' && r <= '9' || r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
			return false
		}
	}
	return true
}

// profileRef resolves a use_auto_scaling_profile argument to its key.
func (l *loader) profileRef(t *tok) (string, bool) {
	name := unquote(t.Val)
	key := strings.ToLower(name)
	if _, ok := l.profiles[key]; ok {
		return key, true
	}
	msg := fmt.Sprintf("auto-scaling profile %q is not defined", name)
	names := make([]string, 0, len(l.profiles))
	for n := range l.profiles {
		names = append(names, n)
	}
	sort.Strings(names)
	if m := didYouMean(key, names); m != "" {
		msg += fmt.Sprintf("; did you mean %q?", l.cfgProfileName(m))
	}
	l.errorf(pos(t.Pos), "%s", msg)
	return "", false
}

// cfgProfileName gives a profile's name as written, for messages.
func (l *loader) cfgProfileName(key string) string {
	if p, ok := l.cfg.Profiles[key]; ok {
		return p.Name
	}
	return key
}

func (l *loader) global(g *globalAST) {
	name := g.Name.Val
	np := pos(g.Name.Pos)
	vp := pos(g.Value.Pos)
	s, ok := settingByName[name]
	if !ok || isQuoted(name) {
		l.errorf(np, "%s", unknownSetting(name))
		return
	}
	raw := unquote(g.Value.Val)
	l.cfg.Params[name] = raw
	switch s.Kind {
	case kindSocket:
		l.socket(g, raw, vp)
		return
	case kindProfile, kindInclude:
		l.errorf(np, "%s is written without \"=\" rules of its own; see docs/CONFIG.md", name)
		return
	}
	if at, dup := l.setAt[name]; dup {
		l.errorf(np, "%s is already set at %s", name, at)
		return
	}
	l.setAt[name] = vp
	if s.Kind == kindGroup {
		l.group(s, g, raw, vp)
		return
	}
	for _, m := range g.Mods {
		l.errorf(pos(m.Pos), "%s takes no %s", name, m.Key)
	}
	if pathSettings[name] {
		raw = resolvePath(raw, vp.File)
	}
	v, err := s.parse(raw)
	if err != nil {
		l.errorf(vp, "%v", err)
		return
	}
	s.set(l.cfg, v)
}

// unknownSetting says that name is not a setting, and what may be meant.
func unknownSetting(name string) string {
	name = unquote(name)
	msg := fmt.Sprintf("unknown setting %q", name)
	if h, ok := settingHints[name]; ok {
		return msg + ": " + h
	}
	if m := didYouMean(strings.ToLower(name), settingNames()); m != "" {
		msg += fmt.Sprintf("; did you mean %q?", m)
	}
	return msg
}

func (l *loader) group(s *setting, g *globalAST, raw string, vp script.Pos) {
	n, err := strconv.Atoi(raw)
	if err != nil {
		l.errorf(vp, "%s wants a whole number of workers, have %q", s.Name, raw)
		return
	}
	if float64(n) < s.Min || float64(n) > s.Max {
		l.errorf(vp, "%s = %d is out of range %s", s.Name, n, s.rangeText())
		return
	}
	grp := Group{Workers: n}
	for _, m := range g.Mods {
		if m.Key != "use_auto_scaling_profile" {
			l.errorf(pos(m.Pos), "%s belongs on a socket line; %s sets the count itself", m.Key, s.Name)
			continue
		}
		if key, ok := l.profileRef(m.Arg); ok {
			grp.Profile = key
			l.groups = append(l.groups, groupRef{workers: n, profile: key, at: vp})
		}
	}
	switch s.Name {
	case "udp_workers":
		l.cfg.UDPWorkers = grp
	case "tcp_workers":
		l.cfg.TCPWorkers = grp
	case "timer_workers":
		l.cfg.TimerWorkers = grp
	}
}

// socket reads proto:host[:port]. Problems inside the address point at the
// part that is wrong, not at the start of the token.
func (l *loader) socket(g *globalAST, raw string, vp script.Pos) {
	at := func(off int) script.Pos {
		p := vp
		if isQuoted(g.Value.Val) {
			off++
		}
		p.Col += off
		return p
	}
	proto, rest, ok := strings.Cut(raw, ":")
	if !ok || rest == "" {
		l.errorf(vp, "%s wants udp:IP:PORT, tcp:IP:PORT, tls:IP:PORT, ws:IP:PORT or wss:IP:PORT, have %q", g.Name.Val, raw)
		return
	}
	proto = strings.ToLower(proto)
	if proto != "udp" && proto != "tcp" && proto != "tls" && proto != "ws" && proto != "wss" {
		l.errorf(vp, "protocol %q is not supported; want udp, tcp, tls, ws or wss", proto)
		return
	}
	hostOff := len(proto) + 1
	host, port := rest, "5060"
	switch proto {
	case "tls":
		port = "5061" // RFC 3261 19.1.2
	case "ws":
		port = "80" // RFC 7118 uses the ports of HTTP
	case "wss":
		port = "443"
	}
	portOff := -1
	if strings.HasPrefix(rest, "[") {
		end := strings.Index(rest, "]")
		if end < 0 {
			l.errorf(at(hostOff), "IPv6 address %q lacks its closing \"]\"", rest)
			return
		}
		host = rest[1:end]
		if tail := rest[end+1:]; tail != "" {
			if tail[0] != ':' {
				l.errorf(at(hostOff+end+1), "want :PORT after the address, have %q", tail)
				return
			}
			port, portOff = tail[1:], hostOff+end+2
		}
	} else if i := strings.LastIndex(rest, ":"); i >= 0 {
		host, port, portOff = rest[:i], rest[i+1:], hostOff+i+1
	}
	ip := net.ParseIP(host)
	if ip == nil {
		l.errorf(at(hostOff), "host %q is not an IP address", host)
		return
	}
	pn, err := strconv.Atoi(port)
	if err != nil || pn < 0 || pn > 65535 {
		l.errorf(at(portOff), "port %q is out of range 0..65535", port)
		return
	}
	sock := Socket{Proto: proto, Host: ip.String(), Port: pn, At: vp}
	good := true
	var profAt script.Pos
	for _, m := range g.Mods {
		mp := pos(m.Pos)
		switch m.Key {
		case "use_workers":
			if proto != "udp" {
				l.errorf(mp, "use_workers applies to UDP sockets; all TCP, TLS, WS and WSS sockets share tcp_workers")
				good = false
				continue
			}
			n, err := strconv.Atoi(unquote(m.Arg.Val))
			if err != nil || n < 1 || n > 999 {
				l.errorf(pos(m.Arg.Pos), "use_workers wants a whole number in 1..999, have %q", m.Arg.Val)
				good = false
				continue
			}
			sock.Workers = n
		case "use_auto_scaling_profile":
			if proto != "udp" {
				l.errorf(mp, "a TCP, TLS, WS or WSS socket cannot have its own profile; they all share one group: use tcp_workers = N use_auto_scaling_profile NAME")
				good = false
				continue
			}
			if key, ok := l.profileRef(m.Arg); ok {
				sock.Profile = key
				profAt = pos(m.Arg.Pos)
			}
		}
	}
	if !good {
		return
	}
	if pn != 0 {
		for _, o := range l.cfg.Sockets {
			// TCP, TLS, WS and WSS listen on one kind of socket: they cannot
			// share a port.
			sameKind := o.Proto == sock.Proto || o.Proto != "udp" && sock.Proto != "udp"
			if sameKind && o.Host == sock.Host && o.Port == sock.Port {
				if o.Proto != sock.Proto {
					l.errorf(vp, "socket %s:%s takes the port of %s:%s; TCP, TLS, WS and WSS need a port each", proto, net.JoinHostPort(sock.Host, port), o.Proto, net.JoinHostPort(o.Host, port))
				} else {
					l.errorf(vp, "socket %s:%s is listed twice", proto, net.JoinHostPort(sock.Host, port))
				}
				return
			}
		}
	}
	if proto == "udp" {
		if profAt == (script.Pos{}) {
			profAt = vp
		}
		l.udpAt = append(l.udpAt, udpRef{index: len(l.cfg.Sockets), at: profAt})
	}
	if l.first == nil {
		l.first = &vp
	}
	if (proto == "tls" || proto == "wss") && l.tlsAt == nil {
		l.tlsAt = &vp
	}
	l.cfg.Sockets = append(l.cfg.Sockets, sock)
}

// checkTLS reads the certificates now, so that a missing or broken file is
// an error at load (and at a reload, which then keeps the running config)
// rather than a failed handshake later.
func (l *loader) checkTLS() {
	c := l.cfg
	var err error
	switch {
	case l.tlsAt != nil:
		_, err = c.TLS.ServerConfig()
	case c.TLS.Certificate != "" || c.TLS.CAList != "":
		_, err = c.TLS.ClientConfig()
	}
	if err == nil {
		return
	}
	p, ok := l.posOf("tls_certificate", "tls_private_key", "tls_ca_list", "tls_verify_client")
	if !ok && l.tlsAt != nil {
		p = *l.tlsAt
	}
	l.errorf(p, "%v", err)
}

// parseHostPort checks IP:PORT and gives it back in canonical form.
func parseHostPort(text string) (string, error) {
	host, port, err := net.SplitHostPort(text)
	if err != nil {
		return "", fmt.Errorf("wants IP:PORT such as 127.0.0.1:8888, have %q", text)
	}
	ip := net.ParseIP(host)
	if ip == nil {
		return "", fmt.Errorf("wants an IP address, have %q", host)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 {
		return "", fmt.Errorf("port %q is out of range 0..65535", port)
	}
	return net.JoinHostPort(ip.String(), port), nil
}

// posOf gives where a setting was set, or where its partner was set when it
// kept its default, so cross-field errors point into the file.
func (l *loader) posOf(names ...string) (script.Pos, bool) {
	for _, n := range names {
		if p, ok := l.setAt[n]; ok {
			return p, true
		}
	}
	return script.Pos{}, false
}

func (l *loader) crossChecks() {
	c := l.cfg
	l.checkTLS()
	marks := c.Suspend.Watermarks()
	for _, m := range watermark.Monitors() {
		lo, hi := "suspend_"+string(m)+"_low", "suspend_"+string(m)+"_high"
		if err := watermark.Validate(marks[m], m.IsPercent()); err != nil {
			if p, ok := l.posOf(lo, hi); ok {
				l.errorf(p, "%s = %s, %s = %s: %v", lo, fmtNum(marks[m].Low), hi, fmtNum(marks[m].High), err)
			}
		}
	}
	if host, _, err := net.SplitHostPort(c.HTTPListen); err == nil && c.HTTPToken == "" {
		if ip := net.ParseIP(host); ip != nil && !ip.IsLoopback() {
			p, _ := l.posOf("http_listen")
			l.errorf(p, "http_listen %s is not a loopback address; set http_token so that not anyone who can reach it controls the server", c.HTTPListen)
		}
	}
	// A file that names manual mode means a ramp: a value of 0, which ctl
	// set may give a running ramp to end it, is a mistake here.
	if ss := c.SlowStart; ss.Mode == slowstart.Manual && ss.Value <= 0 {
		p, _ := l.posOf("slow_start_value", "slow_start_mode")
		l.errorf(p, "slow_start_mode manual needs slow_start_value above 0")
	}
	if err := c.SlowStart.Validate(); err != nil {
		name := "slow_start_mode"
		var fe *slowstart.FieldError
		if errors.As(err, &fe) {
			name = "slow_start_" + fe.Field
		}
		p, _ := l.posOf(name, "slow_start_mode")
		l.errorf(p, "%s: %v", name, err)
	}
	if err := c.Throttle.Config().Validate(); err != nil {
		p, _ := l.posOf("throttle_rtt_threshold", "throttle_count", "throttle_step")
		l.errorf(p, "%v", err)
	}
	if err := c.FlipHealth.Validate(); err != nil {
		p, _ := l.posOf("flip_window", "flip_threshold")
		l.errorf(p, "%v", err)
	}
}

func fmtNum(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// maxFileSize bounds an included file; a config is never this large, and the
// bound keeps include_file "/dev/zero" from eating the memory of the server.
const maxFileSize = 16 << 20

func readInclude(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, fmt.Errorf("%s is not a regular file", path)
	}
	if st.Size() > maxFileSize {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, maxFileSize)
	}
	return os.ReadFile(path)
}

// checkOrigin tells what is wrong with a web origin as ws_allowed_origins
// lists it: a browser's Origin header is scheme://host[:port], nothing
// more (RFC 6454), so anything else would never match.
func checkOrigin(o string) error {
	u, err := url.Parse(o)
	switch {
	case err != nil:
		return fmt.Errorf("origin %q: %v", o, err)
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("origin %q: want http://HOST or https://HOST[:PORT], as a browser's Origin header names a page", o)
	case u.Host == "" || u.User != nil || (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("origin %q: want scheme://host[:port] alone, without path, query or user", o)
	}
	return nil
}
