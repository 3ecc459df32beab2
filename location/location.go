// Package location holds SIP registrations: which contacts each address of
// record (AOR) is reachable at, until when.
//
// Registrations live outside the worker processes (the supervisor holds the
// store), so that scaling a group down or a worker crashing never loses one.
// Workers reach the store through Store; the in-memory Memory is what the
// supervisor keeps, and NewRemote/Serve carry the same calls over the
// worker↔supervisor control channel. A networked store (Redis, for several
// nodes) is another implementation of the same interface.
package location

import (
	"errors"
	"sort"
	"strings"
	"sync"
	"time"
)

// Binding is one registered contact of an AOR.
type Binding struct {
	// AOR is the address of record, normalised by Key (sip:user@host).
	AOR string
	// Contact is the contact URI as registered.
	Contact string
	// Expires is when the binding lapses.
	Expires time.Time
	// CallID and CSeq of the REGISTER that last refreshed the binding.
	CallID string
	CSeq   uint32
	// Received is the source address the REGISTER came from (ip:port), and
	// Proto its transport ("udp" or "tcp"): where to reach a contact behind NAT.
	Received string
	Proto    string
	// UserAgent is the registering client's User-Agent, for ul show.
	UserAgent string
}

// Store keeps bindings by AOR. Implementations are safe for concurrent use.
type Store interface {
	// Save adds or refreshes b under aor; a binding whose Expires is not
	// after now removes that contact instead (Expires: 0).
	Save(aor string, b Binding) error
	// Register saves b as Save does and returns the live bindings of aor,
	// what a registrar's 200 OK lists: one step, one round trip for a
	// store in another process.
	Register(aor string, b Binding) ([]Binding, error)
	// Lookup returns the live bindings of aor, newest registration first;
	// none is not an error.
	Lookup(aor string) ([]Binding, error)
	// Remove drops the binding of contact under aor, or every binding of aor
	// when contact is "" (Contact: *).
	Remove(aor, contact string) error
	// Expire drops the bindings that lapsed by now and reports how many.
	Expire(now time.Time) int
	// List returns every live binding, sorted by AOR then contact.
	List() []Binding
}

// ErrEmptyAOR is returned for a save or remove without an AOR.
var ErrEmptyAOR = errors.New("location: empty address of record")

// Key normalises an AOR so that sip:Alice@Example.com and
// sip:Alice@example.com;transport=udp name the same registrations: the user
// part keeps its case (RFC 3261 19.1.4), the host does not, parameters and a
// default port are dropped.
func Key(uri string) string {
	u := strings.TrimSpace(uri)
	if i := strings.IndexByte(u, '<'); i >= 0 {
		u = u[i+1:]
		if j := strings.IndexByte(u, '>'); j >= 0 {
			u = u[:j]
		}
	}
	if i := strings.IndexAny(u, ";?"); i >= 0 {
		u = u[:i]
	}
	scheme := "sip"
	if i := strings.IndexByte(u, ':'); i >= 0 && !strings.ContainsAny(u[:i], "@.") {
		scheme = strings.ToLower(u[:i])
		u = u[i+1:]
	}
	user, host := "", u
	if i := strings.LastIndexByte(u, '@'); i >= 0 {
		user, host = u[:i], u[i+1:]
	}
	if j := strings.IndexByte(user, ':'); j >= 0 {
		user = user[:j] // a password is not part of the identity
	}
	host = strings.ToLower(host)
	host = strings.TrimSuffix(host, ":5060")
	if user == "" {
		return scheme + ":" + host
	}
	return scheme + ":" + user + "@" + host
}

// Memory is the in-memory Store the supervisor keeps.
type Memory struct {
	mu   sync.Mutex
	aors map[string][]Binding
	// Now is the clock used to hide lapsed bindings; tests replace it.
	Now func() time.Time
}

// NewMemory returns an empty in-memory store.
func NewMemory() *Memory {
	return &Memory{aors: map[string][]Binding{}, Now: time.Now}
}

// Save implements Store.
func (m *Memory) Save(aor string, b Binding) error {
	if aor == "" {
		return ErrEmptyAOR
	}
	b.AOR = aor
	m.mu.Lock()
	defer m.mu.Unlock()
	list := m.aors[aor]
	i := indexContact(list, b.Contact)
	if !b.Expires.After(m.Now()) {
		if i >= 0 {
			m.drop(aor, i)
		}
		return nil
	}
	if i >= 0 {
		list[i] = b
		return nil
	}
	m.aors[aor] = append(list, b)
	return nil
}

func indexContact(list []Binding, contact string) int {
	for i := range list {
		if list[i].Contact == contact {
			return i
		}
	}
	return -1
}

func (m *Memory) drop(aor string, i int) {
	list := m.aors[aor]
	list = append(list[:i], list[i+1:]...)
	if len(list) == 0 {
		delete(m.aors, aor)
		return
	}
	m.aors[aor] = list
}

// Lookup implements Store.
func (m *Memory) Register(aor string, b Binding) ([]Binding, error) {
	if err := m.Save(aor, b); err != nil {
		return nil, err
	}
	return m.Lookup(aor)
}

// Lookup implements Store.
func (m *Memory) Lookup(aor string) ([]Binding, error) {
	now := m.Now()
	m.mu.Lock()
	var out []Binding
	for _, b := range m.aors[aor] {
		if b.Expires.After(now) {
			out = append(out, b)
		}
	}
	m.mu.Unlock()
	// Newest registration first: the likeliest to be reachable.
	sort.SliceStable(out, func(i, j int) bool { return out[i].Expires.After(out[j].Expires) })
	return out, nil
}

// Remove implements Store.
func (m *Memory) Remove(aor, contact string) error {
	if aor == "" {
		return ErrEmptyAOR
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if contact == "" {
		delete(m.aors, aor)
		return nil
	}
	if i := indexContact(m.aors[aor], contact); i >= 0 {
		m.drop(aor, i)
	}
	return nil
}

// Expire implements Store.
func (m *Memory) Expire(now time.Time) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for aor, list := range m.aors {
		keep := list[:0]
		for _, b := range list {
			if b.Expires.After(now) {
				keep = append(keep, b)
			} else {
				n++
			}
		}
		if len(keep) == 0 {
			delete(m.aors, aor)
		} else {
			m.aors[aor] = keep
		}
	}
	return n
}

// List implements Store.
func (m *Memory) List() []Binding {
	now := m.Now()
	m.mu.Lock()
	var out []Binding
	for _, list := range m.aors {
		for _, b := range list {
			if b.Expires.After(now) {
				out = append(out, b)
			}
		}
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool {
		if out[i].AOR != out[j].AOR {
			return out[i].AOR < out[j].AOR
		}
		return out[i].Contact < out[j].Contact
	})
	return out
}
