package ctl

import (
	"errors"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Kind is what a setting's number means, and so which values it accepts.
type Kind int

const (
	// Number is any finite number.
	Number Kind = iota
	// Percent is 0 to 100; a trailing % is accepted.
	Percent
	// Count is a whole number, 0 or more.
	Count
	// Seconds is 0 or more, as a number or a Go duration such as 500ms.
	Seconds
	// Bool is 0 or 1; true/false, yes/no and on/off are accepted, and JSON
	// shows it as true or false.
	Bool
)

func (k Kind) String() string {
	switch k {
	case Number:
		return "number"
	case Percent:
		return "percent"
	case Count:
		return "count"
	case Seconds:
		return "seconds"
	case Bool:
		return "bool"
	}
	return "kind(" + strconv.Itoa(int(k)) + ")"
}

// Parse turns text into a value of this kind, or says why it is not one.
func (k Kind) Parse(text string) (float64, error) {
	s := strings.TrimSpace(text)
	if s == "" {
		return 0, errors.New("no value given")
	}
	switch k {
	case Bool:
		switch strings.ToLower(s) {
		case "1", "true", "yes", "on":
			return 1, nil
		case "0", "false", "no", "off":
			return 0, nil
		}
		return 0, fmt.Errorf("%q is not a switch (want on/off, yes/no, true/false or 1/0)", text)
	case Percent:
		s = strings.TrimSpace(strings.TrimSuffix(s, "%"))
	case Seconds:
		if d, err := time.ParseDuration(s); err == nil {
			if d < 0 {
				return 0, fmt.Errorf("duration must be 0 or more, not %s", s)
			}
			return d.Seconds(), nil
		}
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil {
		return 0, fmt.Errorf("%q is not a number", text)
	}
	return v, k.check(v)
}

// check says why v is not a value of this kind, nil when it is.
func (k Kind) check(v float64) error {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return fmt.Errorf("%v is not a usable number", v)
	}
	switch k {
	case Percent:
		if v < 0 || v > 100 {
			return fmt.Errorf("percentage %s is outside 0–100", fmtNum(v))
		}
	case Count:
		if v < 0 {
			return fmt.Errorf("count must be 0 or more, not %s", fmtNum(v))
		}
		if v != math.Trunc(v) {
			return fmt.Errorf("count must be a whole number, not %s", fmtNum(v))
		}
		if v > 1<<53 {
			return fmt.Errorf("count %s is too large", fmtNum(v))
		}
	case Seconds:
		if v < 0 {
			return fmt.Errorf("seconds must be 0 or more, not %s", fmtNum(v))
		}
	case Bool:
		if v != 0 && v != 1 {
			return fmt.Errorf("switch must be 0 or 1, not %s", fmtNum(v))
		}
	}
	return nil
}

// ErrUnknownPath is wrapped by every error about a path that names no
// setting; the API answers it with 404.
var ErrUnknownPath = errors.New("unknown path")

// Params is a registry of live settings. Each is a leaf of a tree addressed
// by slash-separated paths; the supervisor registers a getter and a setter
// for each, so the value lives where it is used and Params only routes,
// parses and validates. Safe for concurrent use.
type Params struct {
	mu     sync.RWMutex
	leaves map[string]*param
	// setMu makes sets one at a time, so a setter that compares its value
	// with a sibling's (low < high) sees no concurrent change to it.
	setMu sync.Mutex
	// Changed, when set, is called after every successful set, outside
	// the setter: for state derived from many settings at once.
	Changed func(path string)
}

type param struct {
	get  func() float64
	set  func(float64) error
	kind Kind
}

// NewParams returns an empty registry.
func NewParams() *Params { return &Params{leaves: map[string]*param{}} }

// Register adds a setting at path. set may be nil for a read-only one; it is
// called only with a value valid for kind, and may refuse it by returning an
// error (say, a low watermark not under its high one), in which case it must
// leave the old value in force. A setter must not call Set. Register panics
// on a programming error: an empty or malformed path, a nil getter, a path
// registered twice, or one that would be both a leaf and a prefix.
func (p *Params) Register(path string, get func() float64, set func(float64) error, kind Kind) {
	if get == nil {
		panic("ctl: Register " + path + ": nil getter")
	}
	if path == "" || strings.HasPrefix(path, "/") || strings.HasSuffix(path, "/") || strings.Contains(path, "//") {
		panic(fmt.Sprintf("ctl: Register: malformed path %q", path))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.leaves == nil {
		p.leaves = map[string]*param{}
	}
	if _, ok := p.leaves[path]; ok {
		panic("ctl: Register " + path + ": registered twice")
	}
	for q := range p.leaves {
		if strings.HasPrefix(q, path+"/") || strings.HasPrefix(path, q+"/") {
			panic("ctl: Register " + path + ": conflicts with " + q)
		}
	}
	p.leaves[path] = &param{get: get, set: set, kind: kind}
}

// Paths lists every setting's path, sorted.
func (p *Params) Paths() []string {
	p.mu.RLock()
	defer p.mu.RUnlock()
	out := make([]string, 0, len(p.leaves))
	for q := range p.leaves {
		out = append(out, q)
	}
	sort.Strings(out)
	return out
}

// Kind returns the kind of the setting at path.
func (p *Params) Kind(path string) (Kind, error) {
	path = clean(path)
	p.mu.RLock()
	defer p.mu.RUnlock()
	if l, ok := p.leaves[path]; ok {
		return l.kind, nil
	}
	if p.isPrefixLocked(path) {
		return 0, p.notLeafLocked(path)
	}
	return 0, p.unknownLocked(path)
}

// Get returns the value at path: a float64 (a bool for a Bool setting) for a
// leaf, or for a prefix the subtree below it as nested map[string]any, ready
// for encoding/json. An empty path is the whole tree.
func (p *Params) Get(path string) (any, error) { return p.get(path, false) }

// GetText is Get for people: each duration is written as the config file
// writes it ("2s", "500ms") rather than as a number of seconds.
func (p *Params) GetText(path string) (any, error) { return p.get(path, true) }

func (p *Params) get(path string, text bool) (any, error) {
	path = clean(path)
	p.mu.RLock()
	if l, ok := p.leaves[path]; ok {
		p.mu.RUnlock()
		return l.value(text), nil
	}
	type found struct {
		rest []string
		l    *param
	}
	var sub []found
	for q, l := range p.leaves {
		if path == "" {
			sub = append(sub, found{strings.Split(q, "/"), l})
		} else if rest, ok := strings.CutPrefix(q, path+"/"); ok {
			sub = append(sub, found{strings.Split(rest, "/"), l})
		}
	}
	if len(sub) == 0 {
		err := p.unknownLocked(path)
		p.mu.RUnlock()
		return nil, err
	}
	p.mu.RUnlock()
	// Getters run outside the lock: they take the owner's locks, and a slow
	// one must not hold up Register.
	tree := map[string]any{}
	for _, f := range sub {
		m := tree
		for _, seg := range f.rest[:len(f.rest)-1] {
			next, _ := m[seg].(map[string]any)
			if next == nil {
				next = map[string]any{}
				m[seg] = next
			}
			m = next
		}
		m[f.rest[len(f.rest)-1]] = f.l.value(text)
	}
	return tree, nil
}

func (l *param) value(text bool) any { return l.kind.value(l.get(), text) }

// value is v as Get shows it: a bool for a Bool, a duration's text for
// Seconds when text is asked for, a number otherwise.
func (k Kind) value(v float64, text bool) any {
	switch {
	case k == Bool:
		return v != 0
	case k == Seconds && text:
		return FormatSeconds(v)
	}
	return v
}

// FormatSeconds writes a number of seconds as a config file writes a
// duration: 2s, 500ms, 2m, 1h, 1.5s.
func FormatSeconds(v float64) string {
	d := time.Duration(math.Round(v * float64(time.Second)))
	switch {
	case d == 0:
		return "0s"
	case d%time.Hour == 0:
		return strconv.FormatInt(int64(d/time.Hour), 10) + "h"
	case d%time.Minute == 0:
		return strconv.FormatInt(int64(d/time.Minute), 10) + "m"
	case d%time.Second == 0 || d > time.Second:
		return fmtNum(d.Seconds()) + "s"
	case d%time.Millisecond == 0:
		return strconv.FormatInt(int64(d/time.Millisecond), 10) + "ms"
	}
	return d.String()
}

// Set parses text as the setting's kind and hands it to the setter. Nothing
// changes unless every check passes: the path must name a leaf, the text must
// be a valid value, and the setter must accept it.
func (p *Params) Set(path, text string) error {
	_, err := p.swap(path, text)
	return err
}

// swap is Set returning the value in force before, read under the same lock
// so that no other set comes between.
func (p *Params) swap(path, text string) (old float64, err error) {
	path = clean(path)
	p.setMu.Lock()
	defer p.setMu.Unlock()
	p.mu.RLock()
	l, ok := p.leaves[path]
	if !ok {
		var err error
		if p.isPrefixLocked(path) {
			err = p.notLeafLocked(path)
		} else {
			err = p.unknownLocked(path)
		}
		p.mu.RUnlock()
		return 0, err
	}
	p.mu.RUnlock()
	if l.set == nil {
		return 0, fmt.Errorf("%s is read-only", path)
	}
	v, err := l.kind.Parse(text)
	if err != nil {
		return 0, fmt.Errorf("%s: %w", path, err)
	}
	old = l.get()
	if err := l.set(v); err != nil {
		return old, fmt.Errorf("%s: %w", path, err)
	}
	if p.Changed != nil {
		p.Changed(path)
	}
	return old, nil
}

func clean(path string) string { return strings.Trim(path, "/") }

func printable(path string) string {
	if path == "" {
		return "the root"
	}
	return path
}

func (p *Params) isPrefixLocked(path string) bool {
	if path == "" {
		return len(p.leaves) > 0
	}
	for q := range p.leaves {
		if strings.HasPrefix(q, path+"/") {
			return true
		}
	}
	return false
}

// notLeafLocked is the error for a prefix used where one setting is needed.
func (p *Params) notLeafLocked(path string) error {
	return fmt.Errorf("%s is a group of settings, not one: use one of %s", printable(path), strings.Join(p.childrenLocked(path), ", "))
}

// childrenLocked lists the paths one level below prefix, sorted.
func (p *Params) childrenLocked(prefix string) []string {
	seen := map[string]bool{}
	for q := range p.leaves {
		rest, ok := q, prefix == ""
		if !ok {
			rest, ok = strings.CutPrefix(q, prefix+"/")
		}
		if !ok {
			continue
		}
		head, _, _ := strings.Cut(rest, "/")
		if prefix != "" {
			head = prefix + "/" + head
		}
		seen[head] = true
	}
	out := make([]string, 0, len(seen))
	for c := range seen {
		out = append(out, c)
	}
	sort.Strings(out)
	return out
}

// unknownLocked is the error for a path that names nothing, with the
// closest known path or prefix when one is a likely typo.
func (p *Params) unknownLocked(path string) error {
	cands := map[string]bool{}
	for q := range p.leaves {
		segs := strings.Split(q, "/")
		for i := 1; i <= len(segs); i++ {
			cands[strings.Join(segs[:i], "/")] = true
		}
	}
	list := make([]string, 0, len(cands))
	for c := range cands {
		list = append(list, c)
	}
	sort.Strings(list)
	if s := didYouMean(path, list); s != "" {
		return fmt.Errorf("%w %q (did you mean %q?)", ErrUnknownPath, path, s)
	}
	return fmt.Errorf("%w %q", ErrUnknownPath, path)
}

// fmtNum writes v without exponent or trailing zeros.
func fmtNum(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }
