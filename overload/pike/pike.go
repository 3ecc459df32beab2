// Package pike bans the sources of floods and password guessing, in the
// shape Kamailio operators know: its pike module counts requests per source
// address over a sampling window (reqs_density_per_unit per
// sampling_time_unit), and its sample configs keep failed authentications
// per source and per user in an htable, banning a source past a threshold
// for a while (ipban with autoexpire).
//
// The supervisor holds the one Table, the authority for who is banned: the
// places that read requests (its own front door, the workers that read
// their sockets directly, the TCP workers) count requests per source with
// a Counter of their own and report a source each time its count in the
// window grows by a step, and the script engine reports each failed digest
// authentication. The table's bans reach every reader as a List, looked up
// per datagram without a lock or an allocation.
//
// Nothing here does I/O or reads the clock: every call takes now, in unix
// ns.
//
// Invariant: a source in Policy.Exempt is never counted or banned; a ban
// lasts Policy.BanTime from when it was imposed, unless lifted; lifting a
// ban forgets the source's counts, so a lifted source starts afresh.
package pike

import (
	"cmp"
	"net/netip"
	"slices"
	"sync/atomic"
	"time"
)

// Reason is why a source was banned.
type Reason uint8

// The reasons, in metric label order.
const (
	ReasonPike Reason = iota // too many requests in a window
	ReasonAuth               // too many failed authentications
	NumReasons
)

func (r Reason) String() string {
	switch r {
	case ReasonPike:
		return "pike"
	case ReasonAuth:
		return "auth"
	}
	return "unknown"
}

// Policy is the thresholds in force. A zero count turns its check off.
type Policy struct {
	// Requests is how many requests a source may send within Window
	// (pike_requests, pike_window).
	Requests int
	Window   time.Duration
	// AuthPerSource is how many failed authentications a source may have
	// within AuthWindow; AuthPerUser how many a user may have from all
	// sources together, past which every source that fails for that user
	// again is banned at once (auth_failures_per_source,
	// auth_failures_per_user, auth_failure_window). The user is never
	// locked: a source that knows the password still authenticates, so
	// guessing from many addresses cannot lock a subscriber out.
	AuthPerSource, AuthPerUser int
	AuthWindow                 time.Duration
	// BanTime is how long a ban lasts (ban_time).
	BanTime time.Duration
	// Exempt are sources never counted nor banned (ban_exempt).
	Exempt []netip.Prefix
}

// On reports whether any check is on.
func (p Policy) On() bool { return p.Requests > 0 || p.AuthPerSource > 0 || p.AuthPerUser > 0 }

// Step is how much a reader's count of a source grows between two reports
// to the table: an eighth of Requests, so that the table's sum trails the
// truth by less than an eighth per reader while a flood costs a report per
// eighth of the threshold; 0 with the request check off.
func (p Policy) Step() uint32 {
	if p.Requests <= 0 {
		return 0
	}
	return uint32(max(p.Requests/8, 1))
}

// Exempted reports whether a is in Exempt.
func (p Policy) Exempted(a netip.Addr) bool { return exempted(p.Exempt, a) }

func exempted(ps []netip.Prefix, a netip.Addr) bool {
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// MaxBans bounds the bans in force, so that the list fits in one frame to
// the workers: past it, a new ban replaces the one that ends soonest.
const MaxBans = 2048

// maxCounted bounds the sources a table or a counter follows at once: a
// flood from many forged addresses, none of which pike would ban anyway,
// must not grow them without end. Sources past it go uncounted until the
// next sweep or window.
const maxCounted = 1 << 16

// Ban is one source refused.
type Ban struct {
	Source netip.Addr
	Reason Reason
	// Since and Until are unix ns.
	Since, Until int64
	// Count is what earned the ban: the requests in the window, or the
	// failed authentications.
	Count int
	// User is the user whose failed authentications earned it, for
	// ReasonAuth.
	User string
}

type window struct {
	start int64
	n     int
}

// add counts n at now in a window of length w, starting a new window when
// the last one is over, and returns the count.
func (c *window) add(n int, now int64, w time.Duration) int {
	if now-c.start >= int64(w) {
		c.start, c.n = now, 0
	}
	c.n += n
	return c.n
}

// Table is the authority: the counts it was told of, and the bans in
// force. It is not safe for concurrent use.
type Table struct {
	p     Policy
	reqs  map[netip.Addr]*window
	fails map[netip.Addr]*window
	users map[string]*window
	bans  map[netip.Addr]Ban
	// Imposed counts the bans imposed, by reason.
	Imposed [NumReasons]uint64
}

// NewTable makes a table applying p.
func NewTable(p Policy) *Table {
	return &Table{p: p, reqs: map[netip.Addr]*window{}, fails: map[netip.Addr]*window{},
		users: map[string]*window{}, bans: map[netip.Addr]Ban{}}
}

// SetPolicy applies p from now on: counts and bans in force stay, and a
// source newly exempt is lifted.
func (t *Table) SetPolicy(p Policy) (changed bool) {
	t.p = p
	for a := range t.bans {
		if p.Exempted(a) {
			t.Lift(a)
			changed = true
		}
	}
	return changed
}

// Policy is the policy in force.
func (t *Table) Policy() Policy { return t.p }

// Requests counts n requests of src at now; it reports the ban it imposed,
// if it did.
func (t *Table) Requests(src netip.Addr, n int, now int64) (Ban, bool) {
	src = src.Unmap()
	if t.p.Requests <= 0 || t.p.Exempted(src) || t.banned(src, now) {
		return Ban{}, false
	}
	c := t.reqs[src]
	if c == nil {
		if len(t.reqs) >= maxCounted {
			return Ban{}, false
		}
		c = &window{start: now}
		t.reqs[src] = c
	}
	if k := c.add(n, now, t.p.Window); k > t.p.Requests {
		return t.ban(src, ReasonPike, k, "", now), true
	}
	return Ban{}, false
}

// AuthFailed counts a failed authentication of user from src at now; it
// reports the ban it imposed, if it did.
func (t *Table) AuthFailed(src netip.Addr, user string, now int64) (Ban, bool) {
	src = src.Unmap()
	if t.p.AuthPerSource <= 0 && t.p.AuthPerUser <= 0 || t.p.Exempted(src) || t.banned(src, now) {
		return Ban{}, false
	}
	var k, u int
	if c := t.fails[src]; c != nil || len(t.fails) < maxCounted {
		if c == nil {
			c = &window{start: now}
			t.fails[src] = c
		}
		k = c.add(1, now, t.p.AuthWindow)
	}
	if c := t.users[user]; c != nil || len(t.users) < maxCounted {
		if c == nil {
			c = &window{start: now}
			t.users[user] = c
		}
		u = c.add(1, now, t.p.AuthWindow)
	}
	switch {
	case t.p.AuthPerSource > 0 && k >= t.p.AuthPerSource:
		return t.ban(src, ReasonAuth, k, user, now), true
	case t.p.AuthPerUser > 0 && u > t.p.AuthPerUser:
		return t.ban(src, ReasonAuth, k, user, now), true
	}
	return Ban{}, false
}

func (t *Table) ban(src netip.Addr, r Reason, count int, user string, now int64) Ban {
	if len(t.bans) >= MaxBans {
		var first netip.Addr
		var until int64
		for a, b := range t.bans {
			if !first.IsValid() || b.Until < until {
				first, until = a, b.Until
			}
		}
		delete(t.bans, first)
	}
	b := Ban{Source: src, Reason: r, Since: now, Until: now + int64(t.p.BanTime), Count: count, User: user}
	t.bans[src] = b
	delete(t.reqs, src)
	delete(t.fails, src)
	t.Imposed[r]++
	return b
}

func (t *Table) banned(a netip.Addr, now int64) bool {
	b, ok := t.bans[a]
	return ok && now < b.Until
}

// Banned reports whether a is banned at now.
func (t *Table) Banned(a netip.Addr, now int64) bool { return t.banned(a.Unmap(), now) }

// Lift ends a's ban, if it has one, and forgets its counts.
func (t *Table) Lift(a netip.Addr) bool {
	a = a.Unmap()
	_, ok := t.bans[a]
	delete(t.bans, a)
	delete(t.reqs, a)
	delete(t.fails, a)
	return ok
}

// Expire drops the bans over at now and the counts whose windows ended; it
// reports whether a ban ended.
func (t *Table) Expire(now int64) (changed bool) {
	for a, b := range t.bans {
		if now >= b.Until {
			delete(t.bans, a)
			changed = true
		}
	}
	for a, c := range t.reqs {
		if now-c.start >= int64(t.p.Window) {
			delete(t.reqs, a)
		}
	}
	for a, c := range t.fails {
		if now-c.start >= int64(t.p.AuthWindow) {
			delete(t.fails, a)
		}
	}
	for u, c := range t.users {
		if now-c.start >= int64(t.p.AuthWindow) {
			delete(t.users, u)
		}
	}
	return changed
}

// Empty reports whether the table holds neither a ban nor a count, so that
// nothing in it can end or expire.
func (t *Table) Empty() bool {
	return len(t.bans) == 0 && len(t.reqs) == 0 && len(t.fails) == 0 && len(t.users) == 0
}

// Bans lists the bans in force at now, the soonest to end first.
func (t *Table) Bans(now int64) []Ban {
	out := make([]Ban, 0, len(t.bans))
	for _, b := range t.bans {
		if now < b.Until {
			out = append(out, b)
		}
	}
	slices.SortFunc(out, func(a, b Ban) int {
		return cmp.Or(cmp.Compare(a.Until, b.Until), a.Source.Compare(b.Source))
	})
	return out
}

// Until is the bans in force as a List holds them: until when each source
// is refused, unix ns.
func (t *Table) Until() map[netip.Addr]int64 {
	m := make(map[netip.Addr]int64, len(t.bans))
	for a, b := range t.bans {
		m[a] = b.Until
	}
	return m
}

// List is the bans as the readers of sockets see them: a map replaced
// whole on each change, so that a lookup takes no lock. Safe for
// concurrent use.
type List struct {
	m     atomic.Pointer[map[netip.Addr]int64]
	reply atomic.Bool
}

// SetReply says whether a banned source's requests are answered 403 (true)
// or dropped (ban_action).
func (l *List) SetReply(reply bool) { l.reply.Store(reply) }

// Reply reports whether a banned source's requests are answered 403.
func (l *List) Reply() bool { return l.reply.Load() }

// Set replaces the list; m must not change afterwards.
func (l *List) Set(m map[netip.Addr]int64) { l.m.Store(&m) }

// Banned reports whether a is refused at now. An empty list costs a load
// and a length check.
func (l *List) Banned(a netip.Addr, now int64) bool {
	p := l.m.Load()
	if p == nil || len(*p) == 0 {
		return false
	}
	until, ok := (*p)[a.Unmap()]
	return ok && now < until
}

// Len is how many sources the list holds.
func (l *List) Len() int {
	if p := l.m.Load(); p != nil {
		return len(*p)
	}
	return 0
}

// Counter is a reader's count of requests per source, over fixed windows.
// It is used by one goroutine, and allocates only when a window sees a
// source first since the map last grew.
type Counter struct {
	window int64
	step   uint32
	exempt []netip.Prefix
	start  int64
	n      map[netip.Addr]uint32
}

// Set applies the policy's window, step and exemptions; a zero step turns
// the counter off.
func (c *Counter) Set(p Policy) {
	c.window, c.step, c.exempt = int64(p.Window), p.Step(), p.Exempt
	if c.n == nil {
		c.n = make(map[netip.Addr]uint32, 64)
	}
}

// SetStep sets the step alone, as the supervisor computed it from a
// Policy's Requests, which a reader does not know.
func (c *Counter) SetStep(step uint32) { c.step = step }

// Hit counts a request of src at now. It returns the step when src's count
// in the window reaches a multiple of it (to report to the table), else 0.
func (c *Counter) Hit(src netip.Addr, now int64) uint32 {
	if c.step == 0 {
		return 0
	}
	if now-c.start >= c.window {
		clear(c.n)
		c.start = now
	}
	src = src.Unmap()
	k, ok := c.n[src]
	if !ok {
		if len(c.n) >= maxCounted || exempted(c.exempt, src) {
			return 0
		}
	}
	k++
	c.n[src] = k
	if k%c.step == 0 {
		return c.step
	}
	return 0
}
