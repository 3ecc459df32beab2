package engine

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"strings"
	"time"

	"github.com/emiago/sipgo/sip"
	"github.com/icholy/digest"

	"github.com/sipvisor/sipvisor/location"
	"github.com/sipvisor/sipvisor/script"
	"github.com/sipvisor/sipvisor/worker/engine/txn"
)

// Digest authentication (RFC 3261 section 22, RFC 8760), as OpenSIPS's and
// Kamailio's auth modules script it: www_authorize or proxy_authorize
// checks the credentials, and when they fail the script answers with
// www_challenge or proxy_challenge.
//
// A nonce is signed, not remembered: its issue time, 8 random bytes and an
// HMAC-SHA256 of both under a secret every worker and node reads from the
// location store, so any of them can check a nonce another issued. What
// must be remembered, the highest nonce-count used with each nonce, is
// kept in the store too, so a replay is refused on whichever worker or node
// it reaches. Parsing and computing digests is github.com/icholy/digest's
// on the decoded path; on the bytes (regbytes.go) the same is done without
// allocating, and tested against it.

// authState is what www_authorize left for www_challenge and
// consume_credentials.
type authState struct {
	stale  bool   // the nonce was good but expired
	header string // the accepted credentials' header name
}

const nonceLen = 8 + 8 + 16

func (w *Worker) users() (location.Users, []byte, error) {
	if w.authUsers == nil {
		u, err := location.UsersOf(w.opt.Store)
		if err != nil {
			return nil, nil, err
		}
		w.authUsers = u
	}
	if w.authSecret == nil {
		s, err := w.authUsers.Secret()
		if err != nil {
			return nil, nil, err
		}
		w.authSecret = s
	}
	return w.authUsers, w.authSecret, nil
}

func nonceMAC(secret, head []byte) []byte {
	m := hmacSHA256(secret, head)
	return m[:16]
}

func newNonce(secret []byte, now time.Time) string {
	var b [nonceLen]byte
	binary.BigEndian.PutUint64(b[:8], uint64(now.Unix()))
	rand.Read(b[8:16])
	copy(b[16:], nonceMAC(secret, b[:16]))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// checkNonce reports whether nonce was signed with secret, and whether it
// is older than expire.
func checkNonce(secret []byte, nonce string, now time.Time, expire time.Duration) (valid, stale bool) {
	b, err := base64.RawURLEncoding.DecodeString(nonce)
	if err != nil || len(b) != nonceLen || !hmac.Equal(b[16:], nonceMAC(secret, b[:16])) {
		return false, false
	}
	issued := time.Unix(int64(binary.BigEndian.Uint64(b[:8])), 0)
	if now.Sub(issued) > expire || issued.After(now.Add(time.Minute)) {
		return true, true
	}
	return true, false
}

// authRealm is the realm argument, or the domain of the To (www) or From
// (proxy) URI when it is empty, as Kamailio does; one of this server's own
// addresses stands for its home domain, as in an AOR.
func (c *msgCtx) authRealm(a []*script.Literal, proxy bool) string {
	if len(a) > 0 {
		if r := c.expand(a[0]); r != "" {
			return r
		}
	}
	u := &c.req.To().Address
	if proxy {
		u = &c.req.From().Address
	}
	if c.w.isOwnAddr(u.Host, u.Port) {
		return c.w.home
	}
	return strings.ToLower(u.Host)
}

func fnWWWAuthorize(c *msgCtx, a []*script.Literal) bool {
	if c.m != nil {
		if ok, done := c.authorizeBytes(a); done {
			return ok
		}
		if !c.decode() {
			return false
		}
	}
	return c.authorize(a, false)
}

func fnProxyAuthorize(c *msgCtx, a []*script.Literal) bool { return c.authorize(a, true) }

func fnWWWChallenge(c *msgCtx, a []*script.Literal) bool {
	if c.m != nil {
		if ok, done := c.challengeBytes(a); done {
			return ok
		}
		if !c.decode() {
			return false
		}
	}
	return c.challenge(a, false)
}

func fnProxyChallenge(c *msgCtx, a []*script.Literal) bool { return c.challenge(a, true) }

func fnConsumeCredentials(c *msgCtx, _ []*script.Literal) bool {
	if c.m != nil {
		return c.consumeBytes()
	}
	if c.req == nil || c.auth.header == "" {
		return false
	}
	c.req.RemoveHeader(c.auth.header)
	return true
}

func (c *msgCtx) authorize(a []*script.Literal, proxy bool) bool {
	if c.req == nil {
		return false
	}
	w := c.w
	c.auth = authState{}
	name := "Authorization"
	if proxy {
		name = "Proxy-Authorization"
	}
	realm := c.authRealm(a, proxy)
	var cred *digest.Credentials
	for _, h := range c.req.GetHeaders(name) {
		cr, err := digest.ParseCredentials(h.Value())
		if err == nil && strings.EqualFold(cr.Realm, realm) {
			cred = cr
			break
		}
	}
	if cred == nil {
		return false
	}
	// Credentials vouch for the user they name only: alice's may not
	// register bob or call as bob (Kamailio's auth_check with its
	// identity flag).
	id := &c.req.To().Address
	if proxy {
		id = &c.req.From().Address
	}
	if id.User != cred.Username {
		c.authFailed(cred.Username)
		return false
	}
	users, secret, err := w.users()
	if err != nil {
		w.storeFailed(c, "authorize", cred.Username, err)
		return false
	}
	now := time.Now()
	valid, stale := checkNonce(secret, cred.Nonce, now, w.opt.NonceExpire)
	if !valid {
		return false
	}
	if stale {
		c.auth.stale = true
		return false
	}
	// qop=auth is what the challenge offers; without it there is no
	// nonce-count, and no way to refuse a replay.
	if cred.QOP != "auth" || cred.Nc <= 0 || cred.Cnonce == "" || !w.uriMatches(cred.URI, &c.req.Recipient) {
		return false
	}
	alg := strings.ToUpper(cred.Algorithm)
	if alg == "" {
		alg = "MD5"
	}
	if !w.algorithmOffered(alg) {
		return false
	}
	u, ok, err := users.GetUser(cred.Username, realm)
	if err != nil {
		w.storeFailed(c, "authorize", cred.Username, err)
		return false
	}
	ha1 := u.HA1MD5
	if alg == "SHA-256" {
		ha1 = u.HA1SHA256
	}
	if !ok {
		// An unknown user costs what a known one does, so that timing
		// does not tell them apart either.
		ha1 = strings.Repeat("0", len(ha1)+32)
	}
	want, err := digest.Digest(&digest.Challenge{Realm: cred.Realm, Nonce: cred.Nonce, Algorithm: cred.Algorithm, QOP: []string{"auth"}, Opaque: cred.Opaque},
		digest.Options{Method: string(c.req.Method), URI: cred.URI, Username: cred.Username, A1: ha1, Cnonce: cred.Cnonce, Count: cred.Nc})
	if err != nil || subtle.ConstantTimeCompare([]byte(want.Response), []byte(strings.ToLower(cred.Response))) != 1 || !ok {
		c.authFailed(cred.Username)
		return false
	}
	fresh, err := users.UseNonce(cred.Nonce, uint32(cred.Nc), w.opt.NonceExpire+time.Minute)
	if err != nil {
		w.storeFailed(c, "authorize", cred.Username, err)
		return false
	}
	if !fresh {
		w.Stats.Replays++
		return false
	}
	c.auth.header = name
	return true
}

// authFailed reports credentials that failed: a wrong password, an
// unknown user, or a user's credentials for another identity. A request
// without credentials, a stale nonce or a replay is no guess at a password.
func (c *msgCtx) authFailed(user string) {
	c.w.Stats.AuthFailures++
	if c.w.opt.AuthFailed != nil && c.src.addr.IsValid() {
		c.w.opt.AuthFailed(c.src.addr.Addr().Unmap(), user)
	}
}

// uriMatches reports whether the digest's uri names the host of the
// Request-URI (RFC 2617 3.2.2.5), so that credentials cannot be moved to a
// request for another server. The user part is not compared: SIPp, and
// some phones, put the server's address alone in uri; a replay to
// another user is refused anyway, by the nonce-count.
func (w *Worker) uriMatches(uri string, ruri *sip.Uri) bool {
	var u sip.Uri
	if err := sip.ParseUri(uri, &u); err != nil {
		return false
	}
	port := func(p int) int {
		if p == 0 {
			return 5060
		}
		return p
	}
	return strings.EqualFold(u.Host, ruri.Host) && port(u.Port) == port(ruri.Port)
}

func (w *Worker) algorithmOffered(alg string) bool {
	for _, a := range w.opt.AuthAlgorithms {
		if a == alg {
			return true
		}
	}
	return false
}

func (c *msgCtx) challenge(a []*script.Literal, proxy bool) bool {
	if c.req == nil || c.req.Method == sip.ACK {
		return false
	}
	w := c.w
	_, secret, err := w.users()
	if err != nil {
		w.storeFailed(c, "challenge", "", err)
		return false
	}
	realm := c.authRealm(a, proxy)
	code, reason, name := 401, "Unauthorized", "WWW-Authenticate"
	if proxy {
		code, reason, name = 407, "Proxy Authentication Required", "Proxy-Authenticate"
	}
	nonce := newNonce(secret, time.Now())
	var extra []string
	for _, alg := range w.opt.AuthAlgorithms {
		ch := digest.Challenge{Realm: realm, Nonce: nonce, Algorithm: alg, QOP: []string{"auth"}, Stale: c.auth.stale}
		extra = append(extra, name+": "+ch.String())
	}
	if c.stx != nil && c.stx.State == txn.Trying {
		w.replyTx(c.stx, code, reason, extra)
	} else {
		w.replyStateless(c.req, c.src, code, reason, extra)
	}
	c.stopped = true
	return true
}

// replyTx is reply with extra header lines, for a final reply.
func (w *Worker) replyTx(t *serverTx, code int, reason string, extra []string) {
	w.sendFinal(t, w.txReply(t, code, reason, extra), code)
}
