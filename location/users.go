package location

import (
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"
)

// User is a subscriber's credentials for digest authentication: never the
// password, only its HA1 hashes, H(user:realm:password), one per algorithm
// (RFC 3261 22.4, RFC 8760).
type User struct {
	Name  string `json:"user"`
	Realm string `json:"realm"`
	// HA1MD5 and HA1SHA256 are lower-case hex.
	HA1MD5    string `json:"ha1_md5"`
	HA1SHA256 string `json:"ha1_sha256"`
}

// NewUser computes the HA1 hashes of name's password in realm.
func NewUser(name, realm, password string) User {
	a1 := name + ":" + realm + ":" + password
	m := md5.Sum([]byte(a1))
	s := sha256.Sum256([]byte(a1))
	return User{Name: name, Realm: realm, HA1MD5: hex.EncodeToString(m[:]), HA1SHA256: hex.EncodeToString(s[:])}
}

// Users keeps subscribers' credentials and what digest authentication
// needs to share between every worker and node: the secret that signs
// nonces, and the highest nonce-count seen of each nonce. The SQLite,
// Redis and Memory stores implement it.
type Users interface {
	// PutUser adds or replaces u.
	PutUser(u User) error
	// GetUser returns name's credentials in realm; ok is false when there
	// are none. It keeps no reference to name or realm once it returns
	// (the User returned may hold them): they may alias a buffer the
	// caller reuses.
	GetUser(name, realm string) (u User, ok bool, err error)
	// RemoveUser drops name in realm and reports whether it was there.
	RemoveUser(name, realm string) (bool, error)
	// ListUsers returns every user, by realm then name.
	ListUsers() ([]User, error)
	// UseNonce records nonce-count nc of nonce and reports whether it is
	// higher than every count seen of it before (a replay is not); the
	// record lapses after ttl. It keeps no reference to nonce, which may
	// alias a buffer the caller reuses.
	UseNonce(nonce string, nc uint32, ttl time.Duration) (bool, error)
	// Secret returns the key that signs nonces, made once and shared by
	// every process using the store.
	Secret() ([]byte, error)
}

// ErrNoUsers is returned by UsersOf for a store that keeps no credentials.
var ErrNoUsers = errors.New("location store keeps no user credentials (use an sqlite or redis location_store)")

// UsersOf is the Users side of a store, if it has one.
func UsersOf(s Store) (Users, error) {
	if g, ok := s.(*guarded); ok {
		s = g.Store
	}
	if u, ok := s.(Users); ok {
		return u, nil
	}
	return nil, ErrNoUsers
}

func newSecret() []byte {
	b := make([]byte, 32)
	rand.Read(b)
	return b
}

func sortUsers(us []User) {
	sort.Slice(us, func(i, j int) bool {
		if us[i].Realm != us[j].Realm {
			return us[i].Realm < us[j].Realm
		}
		return us[i].Name < us[j].Name
	})
}

// memUsers is Memory's Users: one process only, for tests.
type memUsers struct {
	mu    sync.Mutex
	users map[[2]string]User
	// nonces are pointers so that a nonce used again is counted in place,
	// without storing its key again (the caller's string may be a view).
	nonces map[string]*nonceUse
	secret []byte
}

type nonceUse struct {
	nc      uint32
	expires time.Time
}

func (m *Memory) usersInit() *memUsers {
	m.usersOnce.Do(func() {
		m.u = &memUsers{users: map[[2]string]User{}, nonces: map[string]*nonceUse{}, secret: newSecret()}
	})
	return m.u
}

// PutUser implements Users.
func (m *Memory) PutUser(u User) error {
	mu := m.usersInit()
	mu.mu.Lock()
	defer mu.mu.Unlock()
	mu.users[[2]string{u.Name, u.Realm}] = u
	return nil
}

// GetUser implements Users.
func (m *Memory) GetUser(name, realm string) (User, bool, error) {
	mu := m.usersInit()
	mu.mu.Lock()
	defer mu.mu.Unlock()
	u, ok := mu.users[[2]string{name, realm}]
	return u, ok, nil
}

// RemoveUser implements Users.
func (m *Memory) RemoveUser(name, realm string) (bool, error) {
	mu := m.usersInit()
	mu.mu.Lock()
	defer mu.mu.Unlock()
	k := [2]string{name, realm}
	_, ok := mu.users[k]
	delete(mu.users, k)
	return ok, nil
}

// ListUsers implements Users.
func (m *Memory) ListUsers() ([]User, error) {
	mu := m.usersInit()
	mu.mu.Lock()
	out := make([]User, 0, len(mu.users))
	for _, u := range mu.users {
		out = append(out, u)
	}
	mu.mu.Unlock()
	sortUsers(out)
	return out, nil
}

// UseNonce implements Users.
func (m *Memory) UseNonce(nonce string, nc uint32, ttl time.Duration) (bool, error) {
	mu := m.usersInit()
	now := m.Now()
	mu.mu.Lock()
	defer mu.mu.Unlock()
	if len(mu.nonces) > 100000 {
		for k, v := range mu.nonces {
			if !v.expires.After(now) {
				delete(mu.nonces, k)
			}
		}
	}
	old, ok := mu.nonces[nonce]
	if ok && old.expires.After(now) && nc <= old.nc {
		return false, nil
	}
	if !ok {
		old = new(nonceUse)
		mu.nonces[strings.Clone(nonce)] = old
	}
	*old = nonceUse{nc: nc, expires: now.Add(ttl)}
	return true, nil
}

// Secret implements Users.
func (m *Memory) Secret() ([]byte, error) { return m.usersInit().secret, nil }
