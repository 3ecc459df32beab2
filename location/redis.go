package location

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"
)

// Redis is a Store in a Redis server that several nodes share. Each binding
// is a key of its own whose TTL is the binding's expiry, so a binding lapses
// in Redis itself even if every node that wrote it is gone; an AOR's index
// is a sorted set of its contacts scored by expiry, which lapses with its
// last binding. Every call is one round trip (a Lua script). The nodes'
// clocks must agree (NTP), as each computes expiries with its own.
//
//	sipvisor:loc:{AOR}            sorted set: contact → expiry (Unix ms)
//	sipvisor:loc:{AOR}|CONTACT    the binding (wire.go's encoding), PXAT expiry
//
// The braces keep an AOR's keys in one Redis Cluster slot.
type Redis struct {
	c   *redis.Client
	url string

	secretMu sync.Mutex
	secret   []byte
	// Now is the clock used to hide lapsed bindings; tests replace it.
	Now func() time.Time
	// timeout bounds one call: redisTimeout, or longer in tests on a
	// loaded machine.
	timeout time.Duration
}

const redisPrefix = "sipvisor:loc:"

// redisTimeout bounds one call: under SIP's T1, so a client is answered
// before it retransmits even when Redis is slow.
const redisTimeout = 400 * time.Millisecond

func redisOptions(u string) (*redis.Options, error) {
	o, err := redis.ParseURL(u)
	if err != nil {
		return nil, err
	}
	// Fail fast: a worker waits for each call, and a registrar that cannot
	// reach its store answers 503 rather than retrying behind the client's
	// back. ParseURL's query parameters (dial_timeout=...) still win where
	// given, as they are not the zero defaults.
	if o.DialTimeout == 5*time.Second || o.DialTimeout == 0 {
		o.DialTimeout = 500 * time.Millisecond
	}
	if o.ReadTimeout == 0 || o.ReadTimeout == 3*time.Second {
		o.ReadTimeout = redisTimeout
	}
	if o.WriteTimeout == 0 || o.WriteTimeout == 3*time.Second {
		o.WriteTimeout = redisTimeout
	}
	if o.MaxRetries == 0 {
		// One: enough for a pooled connection that a restarted server
		// closed; more would keep a worker waiting on a server that is
		// gone, where the SIP client's retransmission does better.
		o.MaxRetries = 1
		o.MinRetryBackoff, o.MaxRetryBackoff = time.Millisecond, 10*time.Millisecond
	}
	if o.PoolSize == 0 {
		o.PoolSize = 4 // a worker asks one thing at a time
	}
	o.DisableIdentity = true
	return o, nil
}

// quietClient silences go-redis's own log lines (a failed dial printed to
// stderr): every failure reaches us as an error, which the registrar logs
// once a second with its count and the supervisor once per outage.
type quietClient struct{}

func (quietClient) Printf(context.Context, string, ...any) {}

var quiet sync.Once

// OpenRedis connects to the server at url (redis://HOST:PORT/DB) and checks
// that it answers.
func OpenRedis(url string) (*Redis, error) {
	quiet.Do(func() { redis.SetLogger(quietClient{}) })
	o, err := redisOptions(url)
	if err != nil {
		return nil, err
	}
	r := &Redis{c: redis.NewClient(o), url: redactURL(url), Now: time.Now, timeout: redisTimeout}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := r.c.Ping(ctx).Err(); err != nil {
		r.c.Close()
		return nil, err
	}
	return r, nil
}

func indexKey(aor string) string { return redisPrefix + "{" + aor + "}" }

// registerScript saves or removes one binding, drops the index's lapsed
// contacts, extends the index's TTL to its latest binding and returns the
// live bindings, newest first.
// KEYS[1] index; ARGV now_ms, contact, expires_ms, binding.
var registerScript = redis.NewScript(`
local idx, now, contact, exp = KEYS[1], tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local bkey = idx .. '|' .. contact
if exp > now then
	redis.call('SET', bkey, ARGV[4], 'PXAT', exp)
	redis.call('ZADD', idx, exp, contact)
else
	redis.call('DEL', bkey)
	redis.call('ZREM', idx, contact)
end
redis.call('ZREMRANGEBYSCORE', idx, '-inf', now)
local live = redis.call('ZRANGE', idx, '+inf', '(' .. now, 'BYSCORE', 'REV', 'WITHSCORES')
if #live == 0 then
	redis.call('DEL', idx)
	return {}
end
redis.call('PEXPIREAT', idx, live[2])
local keys = {}
for i = 1, #live, 2 do keys[#keys + 1] = idx .. '|' .. live[i] end
return redis.call('MGET', unpack(keys))
`)

// lookupScript returns the live bindings of KEYS[1], newest first.
// ARGV now_ms.
var lookupScript = redis.NewScript(`
local idx = KEYS[1]
local live = redis.call('ZRANGE', idx, '+inf', '(' .. ARGV[1], 'BYSCORE', 'REV')
if #live == 0 then return {} end
local keys = {}
for i = 1, #live do keys[i] = idx .. '|' .. live[i] end
return redis.call('MGET', unpack(keys))
`)

// removeScript drops the binding of ARGV[1] under KEYS[1], or all of them
// when ARGV[1] is empty.
var removeScript = redis.NewScript(`
local idx, contact = KEYS[1], ARGV[1]
if contact ~= '' then
	redis.call('DEL', idx .. '|' .. contact)
	redis.call('ZREM', idx, contact)
	return 1
end
local all = redis.call('ZRANGE', idx, 0, -1)
for i = 1, #all do redis.call('DEL', idx .. '|' .. all[i]) end
redis.call('DEL', idx)
return #all
`)

func ms(t time.Time) int64 { return t.UnixMilli() }

func (r *Redis) fail(op string, err error) error {
	if err == nil {
		return nil
	}
	return unavailable(fmt.Errorf("redis %s %s: %w", op, r.url, err))
}

// Save implements Store.
func (r *Redis) Save(aor string, b Binding) error {
	_, err := r.Register(aor, b)
	return err
}

// Register implements Store.
func (r *Redis) Register(aor string, b Binding) ([]Binding, error) {
	if aor == "" {
		return nil, ErrEmptyAOR
	}
	b.AOR = aor
	ctx, cancel := r.ctx()
	defer cancel()
	now := r.Now()
	exp := ms(b.Expires)
	if !b.Expires.After(now) {
		exp = 0
	}
	res, err := registerScript.Run(ctx, r.c, []string{indexKey(aor)},
		ms(now), b.Contact, exp, appendBinding(make([]byte, 0, 256), &b)).Slice()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, r.fail("register", err)
	}
	return decodeValues(res, now)
}

// Lookup implements Store.
func (r *Redis) Lookup(aor string) ([]Binding, error) {
	ctx, cancel := r.ctx()
	defer cancel()
	now := r.Now()
	res, err := lookupScript.Run(ctx, r.c, []string{indexKey(aor)}, ms(now)).Slice()
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, r.fail("lookup", err)
	}
	return decodeValues(res, now)
}

// decodeValues reads MGET's answer: a binding, or nil for one that lapsed
// between the two reads.
func decodeValues(vals []any, now time.Time) ([]Binding, error) {
	var out []Binding
	for _, v := range vals {
		s, ok := v.(string)
		if !ok {
			continue
		}
		rd := reader{b: []byte(s)}
		b := rd.base()
		if err := rd.end(); err != nil {
			return nil, fmt.Errorf("redis: unreadable binding: %w", err)
		}
		if b.Expires.After(now) {
			out = append(out, b)
		}
	}
	sortNewest(out)
	return out, nil
}

// Remove implements Store.
func (r *Redis) Remove(aor, contact string) error {
	if aor == "" {
		return ErrEmptyAOR
	}
	ctx, cancel := r.ctx()
	defer cancel()
	return r.fail("remove", removeScript.Run(ctx, r.c, []string{indexKey(aor)}, contact).Err())
}

// Expire implements Store: Redis expires each binding by its TTL, so there
// is nothing to do.
func (r *Redis) Expire(time.Time) (int, error) { return 0, nil }

// List implements Store: a SCAN over the binding keys, read in batches.
func (r *Redis) List() ([]Binding, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	now := r.Now()
	var out []Binding
	var cursor uint64
	for {
		keys, next, err := r.c.ScanType(ctx, cursor, redisPrefix+"*", 1000, "string").Result()
		if err != nil {
			return nil, r.fail("list", err)
		}
		if len(keys) > 0 {
			vals, err := r.c.MGet(ctx, keys...).Result()
			if err != nil {
				return nil, r.fail("list", err)
			}
			bs, err := decodeValues(vals, now)
			if err != nil {
				return nil, err
			}
			out = append(out, bs...)
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	sortList(out)
	return out, nil
}

// Close implements Store.
func (r *Redis) Close() error { return r.c.Close() }

// Users: sipvisor:user:REALM:NAME is a hash of the HA1s,
// sipvisor:nonce:NONCE the highest nonce-count seen (PX its lifetime), and
// sipvisor:secret the nonce key.
const (
	redisUserPrefix = "sipvisor:user:"
	redisNonce      = "sipvisor:nonce:"
	redisSecret     = "sipvisor:secret"
)

func userKey(name, realm string) string { return redisUserPrefix + realm + ":" + name }

// useNonceScript sets KEYS[1] to ARGV[1] (with PX ARGV[2]) when ARGV[1] is
// above its value, and reports whether it did.
var useNonceScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur and tonumber(cur) >= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return 1
`)

func (r *Redis) ctx() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), r.timeout)
}

// PutUser implements Users.
func (r *Redis) PutUser(u User) error {
	ctx, cancel := r.ctx()
	defer cancel()
	return r.fail("put user", r.c.HSet(ctx, userKey(u.Name, u.Realm), "md5", u.HA1MD5, "sha256", u.HA1SHA256).Err())
}

// GetUser implements Users.
func (r *Redis) GetUser(name, realm string) (User, bool, error) {
	ctx, cancel := r.ctx()
	defer cancel()
	m, err := r.c.HGetAll(ctx, userKey(name, realm)).Result()
	if err != nil {
		return User{}, false, r.fail("get user", err)
	}
	if len(m) == 0 {
		return User{}, false, nil
	}
	return User{Name: name, Realm: realm, HA1MD5: m["md5"], HA1SHA256: m["sha256"]}, true, nil
}

// RemoveUser implements Users.
func (r *Redis) RemoveUser(name, realm string) (bool, error) {
	ctx, cancel := r.ctx()
	defer cancel()
	n, err := r.c.Del(ctx, userKey(name, realm)).Result()
	return n > 0, r.fail("remove user", err)
}

// ListUsers implements Users.
func (r *Redis) ListUsers() ([]User, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var out []User
	var cursor uint64
	for {
		keys, next, err := r.c.ScanType(ctx, cursor, redisUserPrefix+"*", 1000, "hash").Result()
		if err != nil {
			return nil, r.fail("list users", err)
		}
		for _, k := range keys {
			rest := strings.TrimPrefix(k, redisUserPrefix)
			i := strings.LastIndexByte(rest, ':')
			if i < 0 {
				continue
			}
			m, err := r.c.HGetAll(ctx, k).Result()
			if err != nil {
				return nil, r.fail("list users", err)
			}
			out = append(out, User{Name: rest[i+1:], Realm: rest[:i], HA1MD5: m["md5"], HA1SHA256: m["sha256"]})
		}
		if cursor = next; cursor == 0 {
			break
		}
	}
	sortUsers(out)
	return out, nil
}

// UseNonce implements Users.
func (r *Redis) UseNonce(nonce string, nc uint32, ttl time.Duration) (bool, error) {
	ctx, cancel := r.ctx()
	defer cancel()
	n, err := useNonceScript.Run(ctx, r.c, []string{redisNonce + nonce}, nc, ttl.Milliseconds()).Int()
	if err != nil {
		return false, r.fail("use nonce", err)
	}
	return n == 1, nil
}

// Secret implements Users: the first node to ask makes it.
func (r *Redis) Secret() ([]byte, error) {
	r.secretMu.Lock()
	defer r.secretMu.Unlock()
	if r.secret != nil {
		return r.secret, nil
	}
	ctx, cancel := r.ctx()
	defer cancel()
	if err := r.c.SetNX(ctx, redisSecret, newSecret(), 0).Err(); err != nil {
		return nil, r.fail("secret", err)
	}
	key, err := r.c.Get(ctx, redisSecret).Bytes()
	if err != nil {
		return nil, r.fail("secret", err)
	}
	r.secret = key
	return key, nil
}
