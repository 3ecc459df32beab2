package location

import (
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// Kinds of store, the scheme of a location_store URL.
const (
	KindSQLite = "sqlite"
	KindRedis  = "redis"
	KindMemory = "memory"
)

// Spec is a parsed location_store URL.
type Spec struct {
	Kind string
	// Path is the SQLite database file.
	Path string
	// URL is the Redis URL as written (redis:// or rediss://).
	URL string
}

func (sp Spec) String() string {
	switch sp.Kind {
	case KindSQLite:
		return "sqlite:" + sp.Path
	case KindRedis:
		return redactURL(sp.URL)
	}
	return sp.Kind + ":"
}

// Shared reports whether each process opens the store itself (a file or a
// server), rather than reaching the supervisor's copy.
func (sp Spec) Shared() bool { return sp.Kind != KindMemory }

// ParseURL reads a location_store value: sqlite:PATH, redis://HOST:PORT/DB
// (or rediss:// for TLS), or memory (tests only: the supervisor keeps
// the bindings, and a restart loses them).
func ParseURL(s string) (Spec, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "memory") {
		return Spec{Kind: KindMemory}, nil
	}
	scheme, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Spec{}, fmt.Errorf("location store %q: want sqlite:PATH, redis://HOST:PORT/DB or memory", s)
	}
	switch strings.ToLower(scheme) {
	case "sqlite":
		path := strings.TrimPrefix(rest, "//")
		if path == "" {
			return Spec{}, fmt.Errorf("location store %q: sqlite: wants a file path, as in sqlite:location.db", s)
		}
		return Spec{Kind: KindSQLite, Path: path}, nil
	case "redis", "rediss":
		if _, err := redisOptions(s); err != nil {
			return Spec{}, fmt.Errorf("location store %q: %w", redactURL(s), err)
		}
		return Spec{Kind: KindRedis, URL: s}, nil
	case "memory":
		if rest != "" {
			return Spec{}, fmt.Errorf("location store %q: memory: takes nothing after the colon", s)
		}
		return Spec{Kind: KindMemory}, nil
	}
	return Spec{}, fmt.Errorf("location store %q: unknown kind %q; want sqlite, redis or memory", s, scheme)
}

// Resolve makes a relative SQLite path relative to dir (the config file's).
func (sp Spec) Resolve(dir string) Spec {
	if sp.Kind == KindSQLite && !filepath.IsAbs(sp.Path) && dir != "" {
		sp.Path = filepath.Join(dir, sp.Path)
	}
	return sp
}

// redactURL hides a password in a Redis URL, for logs and errors.
func redactURL(s string) string {
	at := strings.LastIndexByte(s, '@')
	i := strings.Index(s, "://")
	if at < 0 || i < 0 || at < i {
		return s
	}
	if c := strings.IndexByte(s[i+3:at], ':'); c >= 0 {
		return s[:i+3+c] + ":xxxxx" + s[at:]
	}
	return s
}

// Open opens the store sp names and checks that it answers: a store out of
// reach is an error here, at start, rather than at the first REGISTER. The
// store it returns fails fast for a while after each failure to reach its
// server or file (see guarded).
func Open(sp Spec) (Store, error) { return open(sp, failPause) }

// OpenUnpaused opens as Open does, but its calls always ask the store, as
// Expire and List do. It is the supervisor's: its calls are an operator's
// (ctl ul show, ctl user) or its own periodic ones, one at a time and none
// on the path of a message, so a pause would save the store nothing, and
// each must see the store as it is now rather than the failure of a call
// made before it came back.
func OpenUnpaused(sp Spec) (Store, error) { return open(sp, 0) }

func open(sp Spec, pause time.Duration) (Store, error) {
	var (
		st  Store
		err error
	)
	switch sp.Kind {
	case KindSQLite:
		st, err = OpenSQLite(sp.Path)
	case KindRedis:
		st, err = OpenRedis(sp.URL)
	case KindMemory:
		return NewMemory(), nil
	default:
		return nil, fmt.Errorf("location store: unknown kind %q", sp.Kind)
	}
	if err != nil {
		return nil, fmt.Errorf("location store %s: %w", sp, err)
	}
	return &guarded{Store: st, name: sp.String(), pause: pause, now: time.Now}, nil
}

// failPause is how long a store that could not be reached is not asked
// again: a Redis server that vanished without a word costs a dial timeout
// per request, and a worker that waits for each would fall behind on
// everything else it does.
const failPause = time.Second

// guarded fails calls at once, for pause after a call found the store out
// of reach, then lets the next call try again. With no pause it only keeps
// the store's type for UsersOf.
type guarded struct {
	Store
	name  string
	pause time.Duration
	now   func() time.Time

	mu        sync.Mutex
	downUntil time.Time
	lastErr   error
}

func (g *guarded) check() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.pause == 0 || g.downUntil.IsZero() || !g.now().Before(g.downUntil) {
		return nil
	}
	return fmt.Errorf("%w: %s: %v (not asked again for %v)", ErrUnavailable, g.name, g.lastErr, g.pause)
}

func (g *guarded) note(err error) error {
	if err == nil || !errors.Is(err, ErrUnavailable) {
		return err
	}
	g.mu.Lock()
	g.downUntil, g.lastErr = g.now().Add(g.pause), err
	g.mu.Unlock()
	return err
}

func (g *guarded) Save(aor string, b Binding) error {
	if err := g.check(); err != nil {
		return err
	}
	return g.note(g.Store.Save(aor, b))
}

func (g *guarded) Register(aor string, b Binding) ([]Binding, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	bs, err := g.Store.Register(aor, b)
	return bs, g.note(err)
}

// Apply implements Batcher: guarded stores are all Batchers, doing the
// changes one at a time when the store beneath is not one.
func (g *guarded) Apply(changes []Change) ([][]Binding, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	out, err := Apply(g.Store, changes)
	return out, g.note(err)
}

func (g *guarded) Lookup(aor string) ([]Binding, error) {
	if err := g.check(); err != nil {
		return nil, err
	}
	bs, err := g.Store.Lookup(aor)
	return bs, g.note(err)
}

func (g *guarded) Remove(aor, contact string) error {
	if err := g.check(); err != nil {
		return err
	}
	return g.note(g.Store.Remove(aor, contact))
}

// Expire and List are the supervisor's periodic calls: they always try,
// so that they notice the store's return as soon as it is back.
func (g *guarded) Expire(now time.Time) (int, error) {
	n, err := g.Store.Expire(now)
	g.reset(err)
	return n, g.note(err)
}

func (g *guarded) List() ([]Binding, error) {
	bs, err := g.Store.List()
	g.reset(err)
	return bs, g.note(err)
}

// EachCallID implements CallIDLister, as List.
func (g *guarded) EachCallID(fn func(callID []byte)) (int, error) {
	n, err := EachCallID(g.Store, fn)
	g.reset(err)
	return n, g.note(err)
}

func (g *guarded) reset(err error) {
	if err == nil {
		g.mu.Lock()
		g.downUntil = time.Time{}
		g.mu.Unlock()
	}
}
