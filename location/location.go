// Package location holds SIP registrations: which contacts each address of
// record (AOR) is reachable at, until when.
//
// Registrations live outside the worker processes, so that scaling a group
// down or a worker crashing never loses one. Open picks the store from the
// location_store URL: an SQLite file (the default; it survives restarts) or
// Redis (several nodes share it, expiry as Redis TTLs), both of which each
// worker opens itself; or memory, kept by the supervisor and reached by the
// workers through NewRemote/Serve over the control channel, for tests.
package location

import (
	"container/heap"
	"errors"
	"fmt"
	"net/url"
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
	// Proto its transport ("udp", "tcp", "tls"): where to reach a contact
	// behind NAT, and the flow of one registered over a connection.
	Received string
	Proto    string
	// UserAgent is the registering client's User-Agent, for ul show.
	UserAgent string
	// Instance and RegID are the Contact's +sip.instance and reg-id of a
	// phone that registered for outbound (RFC 5626): a new REGISTER with
	// both replaces the binding of the same pair. Path is the REGISTER's
	// Path (RFC 3327), its URIs comma-separated in order: the route to the
	// contact through the proxies in front.
	Instance, RegID, Path string
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
	Expire(now time.Time) (int, error)
	// List returns every live binding, sorted by AOR then contact.
	List() ([]Binding, error)
	// Close releases the store's files or connections.
	Close() error
}

// A CallIDLister goes through the Call-IDs of the live bindings without
// making the bindings: what the supervisor's periodic count reads, which
// List would make it pay for every column of every binding.
type CallIDLister interface {
	// EachCallID calls fn with the REGISTER Call-ID of each live binding
	// ("" for none), in no order, and reports how many there were. The
	// bytes are fn's only for the call.
	EachCallID(fn func(callID []byte)) (int, error)
}

// EachCallID is st's EachCallID, or a walk over List for a store that has
// none.
func EachCallID(st Store, fn func(callID []byte)) (int, error) {
	if l, ok := st.(CallIDLister); ok {
		return l.EachCallID(fn)
	}
	bs, err := st.List()
	if err != nil {
		return 0, err
	}
	for _, b := range bs {
		fn([]byte(b.CallID))
	}
	return len(bs), nil
}

// A Refresher renews a binding in place when a REGISTER changes nothing
// of it but when it lapses and its CSeq: what a phone's periodic refresh
// asks, most of a registrar's work. Nothing is made for it, neither the
// strings of a binding nor the list the 200 OK reads.
type Refresher interface {
	// Refresh looks for the binding of b.Contact under aor and, when it
	// holds b's every field but Expires and CSeq, sets those two from b
	// and appends the live bindings of aor to dst, newest first, as
	// Register would return them. ok is false, with nothing changed and
	// dst as it was, when there is no such binding or b.Expires is not
	// after now: the caller saves b instead. Refresh keeps no reference
	// to aor or to b's strings, which may alias a buffer the caller
	// reuses; the bindings appended hold the store's own strings.
	Refresh(aor string, b *Binding, dst []Binding) (out []Binding, ok bool, err error)
}

// RefresherOf is the Refresher side of a store, if it has one.
func RefresherOf(s Store) (Refresher, bool) {
	if g, ok := s.(*guarded); ok {
		s = g.Store
	}
	r, ok := s.(Refresher)
	return r, ok
}

// ErrEmptyAOR is returned for a save or remove without an AOR.
var ErrEmptyAOR = errors.New("location: empty address of record")

// ErrUnavailable wraps every failure to reach the store (a Redis server
// down, a database file that cannot be written): a registrar answers 503
// with Retry-After, as the registration may well succeed later.
var ErrUnavailable = errors.New("location store unavailable")

// unavailable marks err as a failure to reach the store.
func unavailable(err error) error {
	if err == nil || errors.Is(err, ErrUnavailable) {
		return err
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// Key normalises an address of record to RFC 3261 section 10's canonical
// sip:user@domain, so that sip:Alice@Example.com,
// <sips:Alice@example.com:5060;transport=tcp> and sip:%41lice@example.com
// name the same registrations: the user part keeps its case (19.1.4) with
// escapes undone, the host is lower-cased, parameters, headers, a password
// and the default port are dropped, and sips is sip (one user, whichever
// transport reached them).
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
	if i := strings.IndexByte(u, ':'); i >= 0 && !strings.ContainsAny(u[:i], "@.[") {
		scheme = strings.ToLower(u[:i])
		u = u[i+1:]
	}
	if scheme == "sips" {
		scheme = "sip"
	}
	user, host := "", u
	if i := strings.LastIndexByte(u, '@'); i >= 0 {
		user, host = u[:i], u[i+1:]
	}
	if j := strings.IndexByte(user, ':'); j >= 0 {
		user = user[:j] // a password is not part of the identity
	}
	if strings.IndexByte(user, '%') >= 0 {
		if un, err := url.PathUnescape(user); err == nil {
			user = un
		}
	}
	host = strings.ToLower(host)
	host = strings.TrimSuffix(strings.TrimSuffix(host, ":5060"), ":5061")
	if user == "" {
		return scheme + ":" + host
	}
	return scheme + ":" + user + "@" + host
}

// DropPort is key, a key made by Key, without the port of its host:
// sip:carol@127.0.0.1:5070 is sip:carol@127.0.0.1, sip:carol@[::1]:5070 is
// sip:carol@[::1].
func DropPort(key string) string {
	host := Host(key)
	bare := host
	if strings.HasPrefix(host, "[") {
		if i := strings.IndexByte(host, ']'); i >= 0 {
			bare = host[:i+1]
		}
	} else if i := strings.LastIndexByte(host, ':'); i >= 0 && strings.Count(host, ":") == 1 {
		bare = host[:i]
	}
	return key[:len(key)-len(host)] + bare
}

// Host is the domain part of a key made by Key.
func Host(key string) string {
	if i := strings.LastIndexByte(key, '@'); i >= 0 {
		return key[i+1:]
	}
	if i := strings.IndexByte(key, ':'); i >= 0 {
		return key[i+1:]
	}
	return key
}

// Memory is the in-memory Store the supervisor keeps.
type Memory struct {
	mu   sync.Mutex
	aors map[string][]Binding
	// due orders the bindings by expiry, so that Expire reads what lapsed
	// and not every binding. A refresh or a removal leaves its binding's
	// earlier entry behind, dropped when it comes due, or when such
	// entries outnumber the bindings (compact).
	due expiryHeap
	// n is the bindings held.
	n int
	// Now is the clock used to hide lapsed bindings; tests replace it.
	Now func() time.Time

	usersOnce sync.Once
	u         *memUsers
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
	m.schedule(aor, b)
	if i >= 0 {
		list[i] = b
		return nil
	}
	m.aors[aor] = append(list, b)
	m.n++
	return nil
}

// Refresh implements Refresher.
func (m *Memory) Refresh(aor string, b *Binding, dst []Binding) ([]Binding, bool, error) {
	now := m.Now()
	if aor == "" || !b.Expires.After(now) {
		return dst, false, nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	list := m.aors[aor]
	i := indexContact(list, b.Contact)
	if i < 0 {
		return dst, false, nil
	}
	old := &list[i]
	if old.CallID != b.CallID || old.Received != b.Received || old.Proto != b.Proto || old.UserAgent != b.UserAgent ||
		old.Instance != b.Instance || old.RegID != b.RegID || old.Path != b.Path {
		return dst, false, nil
	}
	old.Expires, old.CSeq = b.Expires, b.CSeq
	// Filed under the binding's own strings, not the caller's.
	m.schedule(old.AOR, *old)
	n := len(dst)
	for _, x := range list {
		if x.Expires.After(now) {
			dst = append(dst, x)
		}
	}
	// sortNewest's order (stable, newest first) without sort's allocations:
	// an AOR has a few bindings.
	out := dst[n:]
	for j := 1; j < len(out); j++ {
		for k := j; k > 0 && out[k].Expires.After(out[k-1].Expires); k-- {
			out[k], out[k-1] = out[k-1], out[k]
		}
	}
	return dst, true, nil
}

// schedule files b's expiry; m.mu is held.
func (m *Memory) schedule(aor string, b Binding) {
	if len(m.due) > 2*m.n+64 {
		m.compact()
	}
	// heap.Push would box the entry in an interface, an allocation per
	// REGISTER; Fix moves the appended one up as Push does.
	m.due = append(m.due, expiry{at: b.Expires.UnixNano(), aor: aor, contact: b.Contact})
	heap.Fix(&m.due, len(m.due)-1)
}

// compact rebuilds due from the bindings held, dropping the entries that
// refreshes and removals left behind; m.mu is held.
func (m *Memory) compact() {
	m.due = m.due[:0]
	for aor, list := range m.aors {
		for _, b := range list {
			m.due = append(m.due, expiry{at: b.Expires.UnixNano(), aor: aor, contact: b.Contact})
		}
	}
	heap.Init(&m.due)
}

// expiry is when the binding of contact under aor lapses, if it still
// holds that expiry by then.
type expiry struct {
	at           int64 // unix ns
	aor, contact string
}

// expiryHeap is a min-heap of expiries (container/heap).
type expiryHeap []expiry

func (h expiryHeap) Len() int           { return len(h) }
func (h expiryHeap) Less(i, j int) bool { return h[i].at < h[j].at }
func (h expiryHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *expiryHeap) Push(x any)        { *h = append(*h, x.(expiry)) }
func (h *expiryHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
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
	m.n--
	list := m.aors[aor]
	list = append(list[:i], list[i+1:]...)
	if len(list) == 0 {
		delete(m.aors, aor)
		return
	}
	m.aors[aor] = list
}

// Register implements Store.
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
	sortNewest(out)
	return out, nil
}

// sortNewest puts the newest registration first: the likeliest to be
// reachable.
func sortNewest(bs []Binding) {
	sort.SliceStable(bs, func(i, j int) bool { return bs[i].Expires.After(bs[j].Expires) })
}

// sortList orders bindings by AOR, then contact, as List returns them.
func sortList(bs []Binding) {
	sort.Slice(bs, func(i, j int) bool {
		if bs[i].AOR != bs[j].AOR {
			return bs[i].AOR < bs[j].AOR
		}
		return bs[i].Contact < bs[j].Contact
	})
}

// Remove implements Store.
func (m *Memory) Remove(aor, contact string) error {
	if aor == "" {
		return ErrEmptyAOR
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if contact == "" {
		m.n -= len(m.aors[aor])
		delete(m.aors, aor)
		return nil
	}
	if i := indexContact(m.aors[aor], contact); i >= 0 {
		m.drop(aor, i)
	}
	return nil
}

// Close implements Store.
func (m *Memory) Close() error { return nil }

// Expire implements Store: it reads the bindings due by now, not every
// binding.
func (m *Memory) Expire(now time.Time) (int, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	n, at := 0, now.UnixNano()
	for len(m.due) > 0 && m.due[0].at <= at {
		e := heap.Pop(&m.due).(expiry)
		list := m.aors[e.aor]
		// The binding may have been refreshed (a later entry is due for
		// it) or removed since this entry was filed.
		if i := indexContact(list, e.contact); i >= 0 && !list[i].Expires.After(now) {
			m.drop(e.aor, i)
			n++
		}
	}
	return n, nil
}

// EachCallID implements CallIDLister, without List's copy and sort.
func (m *Memory) EachCallID(fn func(callID []byte)) (int, error) {
	now := m.Now()
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for _, list := range m.aors {
		for _, b := range list {
			if b.Expires.After(now) {
				fn([]byte(b.CallID))
				n++
			}
		}
	}
	return n, nil
}

// List implements Store.
func (m *Memory) List() ([]Binding, error) {
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
	sortList(out)
	return out, nil
}
