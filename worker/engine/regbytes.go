package engine

import (
	"bytes"
	"crypto/md5"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"net/netip"
	"strconv"
	"strings"
	"time"
	"unsafe"

	"github.com/sipvisor/sipvisor/internal/sipmsg"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/location"
	"github.com/sipvisor/sipvisor/script"
)

// A REGISTER on the bytes (fast.go, docs/DESIGN.md "The message path"):
// www_authorize reads the Authorization header where it lies and computes
// the digest into arrays on the stack, www_challenge writes its 401 by
// splicing, and save reads the Contact, Expires and User-Agent from the
// offsets. A refresh, a REGISTER that changes nothing of its binding but
// its expiry and CSeq, most of what a registrar sees, is renewed in place
// by a store that can (location.Refresher) and answered by splicing: it
// makes no object. Otherwise the binding is written at once or held for
// group commit, what its 200 OK needs of the request written aside
// (saveChangeBytes); its strings are made for the store to keep, or, held
// for a store that copies what it writes (location.Copier, SQLite), kept
// in the batch's buffer until the batch is written and answered. force_rport and
// fix_nated_register, which the built-in config runs for a phone behind
// NAT, are noted and applied as the decoded path applies them. Anything
// else (several Contacts, Contact: *, outbound, a Path, a Contact sipgo
// would write back otherwise, proxy_authorize, a REGISTER the script
// relays) decodes the request and runs as before, so that behaviour
// differs in nothing but cost: TestBytesPathSendsWhatDecodedSends compares
// the two REGISTER by REGISTER.

// regBytes is what a worker keeps to handle REGISTERs on the bytes.
type regBytes struct {
	// out is the bindings a refresh lists, reused.
	out []location.Binding
	// What the store is handed through its interfaces is written here,
	// where it lives already, not on the stack, which an interface call
	// would make it escape from: the realm, the AOR, the received
	// address, the binding; and a challenge's nonce, which crypto/rand
	// reads through one.
	realm [128]byte
	aor   [128]byte
	recv  [64]byte
	bind  location.Binding
	nonce [nonceLen]byte
	// one is the change a REGISTER written at once hands location.Apply.
	one [1]location.Change
	// held holds the strings of the bindings held for group commit into
	// a store that copies them (location.Copier), from the first
	// REGISTER of a batch until the next batch begins, by when its
	// replies are sent and its changes dropped (EndTurn).
	held []byte
}

// keep is b copied into w.reg.held, as a string that lasts until the
// next batch begins. The strings kept before a growth of held still
// read the array they were written in, which is not written again.
func (w *Worker) keep(b []byte) string {
	k := len(w.reg.held)
	w.reg.held = append(w.reg.held, b...)
	return str(w.reg.held[k:])
}

// str is b as a string without a copy, for a call that keeps no reference
// to it.
func str(b []byte) string { return unsafe.String(unsafe.SliceData(b), len(b)) }

// view is s as bytes without a copy, only to be read.
func view(s string) []byte { return unsafe.Slice(unsafe.StringData(s), len(s)) }

// hmacSHA256 is HMAC-SHA256 (RFC 2104) of msg, at most 64 bytes, under
// key, on the stack: crypto/hmac allocates its two hashes.
func hmacSHA256(key, msg []byte) [32]byte {
	var k [64]byte
	if len(key) > len(k) {
		s := sha256.Sum256(key)
		copy(k[:], s[:])
	} else {
		copy(k[:], key)
	}
	var in [128]byte
	for i := range k {
		in[i] = k[i] ^ 0x36
	}
	n := 64 + copy(in[64:], msg)
	inner := sha256.Sum256(in[:n])
	var out [96]byte
	for i := range k {
		out[i] = k[i] ^ 0x5c
	}
	copy(out[64:], inner[:])
	return sha256.Sum256(out[:])
}

// checkNonceBytes is checkNonce of a nonce on the bytes.
func checkNonceBytes(secret, nonce []byte, now time.Time, expire time.Duration) (valid, stale bool) {
	var b [nonceLen + 3]byte
	if base64.RawURLEncoding.DecodedLen(len(nonce)) > len(b) {
		return false, false
	}
	n, err := base64.RawURLEncoding.Decode(b[:], nonce)
	if err != nil || n != nonceLen {
		return false, false
	}
	mac := hmacSHA256(secret, b[:16])
	if subtle.ConstantTimeCompare(b[16:nonceLen], mac[:16]) != 1 {
		return false, false
	}
	issued := time.Unix(int64(binary.BigEndian.Uint64(b[:8])), 0)
	if now.Sub(issued) > expire || issued.After(now.Add(time.Minute)) {
		return true, true
	}
	return true, false
}

// credBytes is digest.Credentials as parseCredBytes reads them: each a
// sub-slice of the header.
type credBytes struct {
	username, realm, nonce, uri, response, algorithm, cnonce, qop []byte
	nc                                                            int
}

func isIdent(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-'
}

// parseCredBytes is digest.ParseCredentials of an Authorization value on
// its bytes. ok is false where that refuses the value; plain is false for
// one it would unescape or read as runes (a backslash or a byte beyond
// ASCII in a quoted string, a folded line), which only the decoded path
// reads as it does.
func parseCredBytes(v []byte, c *credBytes) (ok, plain bool) {
	*c = credBytes{}
	if bytes.IndexByte(v, '\r') >= 0 || bytes.IndexByte(v, '\n') >= 0 {
		return false, false
	}
	if len(v) < 7 || !foldEq(v[:7], "DIGEST ") {
		return false, true
	}
	p, i := v[7:], 0
	for first := true; ; first = false {
		for i < len(p) && p[i] == ' ' {
			i++
		}
		if i == len(p) {
			return true, true
		}
		if !first {
			if p[i] != ',' {
				return false, true
			}
			i++
			for i < len(p) && p[i] == ' ' {
				i++
			}
		}
		s := i
		for i < len(p) && isIdent(p[i]) {
			i++
		}
		key := p[s:i]
		for i < len(p) && p[i] == ' ' {
			i++
		}
		if i == len(p) || p[i] != '=' {
			return false, true
		}
		i++
		for i < len(p) && p[i] == ' ' {
			i++
		}
		var val []byte
		if i < len(p) && p[i] == '"' {
			i++
			s = i
			for i < len(p) && p[i] != '"' {
				if p[i] == '\\' || p[i] >= 0x80 {
					return false, false
				}
				i++
			}
			if i == len(p) {
				return false, true
			}
			val = p[s:i]
			i++
		} else {
			s = i
			for i < len(p) && isIdent(p[i]) {
				i++
			}
			val = p[s:i]
		}
		switch string(key) {
		case "username":
			c.username = val
		case "realm":
			c.realm = val
		case "nonce":
			c.nonce = val
		case "uri":
			c.uri = val
		case "response":
			c.response = val
		case "algorithm":
			c.algorithm = val
		case "cnonce":
			c.cnonce = val
		case "qop":
			c.qop = val
		case "nc":
			n, err := strconv.ParseInt(str(val), 16, 32)
			if err != nil {
				return false, true
			}
			c.nc = int(n)
		}
	}
}

// realmBytes is authRealm of www_authorize and www_challenge on the
// bytes, written into b when it is the To URI's host, with that URI. ok
// is false for what authRealm must read: an argument naming a variable,
// a host that is not plain ASCII or an IPv6 reference.
func (c *msgCtx) realmBytes(a []*script.Literal, b *[128]byte) (realm []byte, to sipmsg.URI, ok bool) {
	v, found := c.m.First(sipmsg.To)
	if !found {
		return nil, to, false
	}
	if to, ok = sipmsg.ParseURI(sipmsg.AddrSpec(v)); !ok || to.Host[0] == '[' || len(to.Host) > len(b) ||
		bytes.IndexByte(to.User, '%') >= 0 {
		return nil, to, false
	}
	if len(a) > 0 && (a[0].IsInt || strings.IndexByte(a[0].Str, '$') >= 0) {
		return nil, to, false
	}
	if len(a) > 0 && a[0].Str != "" {
		return view(a[0].Str), to, true
	}
	if c.w.isOwnAddr(str(to.Host), to.Port) {
		return view(c.w.home), to, true
	}
	realm = b[:0]
	for _, ch := range to.Host {
		if ch >= 0x80 {
			return nil, to, false
		}
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		realm = append(realm, ch)
	}
	return realm, to, true
}

// zeroHA1 stands for an unknown user's HA1, as authorize's.
const zeroHA1 = "00000000000000000000000000000000"

// authorizeBytes is www_authorize on the bytes. done is false, with
// nothing done, for what the decoded path must read.
func (c *msgCtx) authorizeBytes(a []*script.Literal) (ok, done bool) {
	w, m := c.w, c.m
	users, secret, err := w.users()
	if err != nil {
		return false, false // reported by the decoded path
	}
	realm, to, ok := c.realmBytes(a, &w.reg.realm)
	if !ok {
		return false, false
	}
	var cred credBytes
	found := false
	for i := range m.Headers {
		h := &m.Headers[i]
		if h.Kind != sipmsg.Other || !m.Named(h, "Authorization") {
			continue
		}
		ok, plain := parseCredBytes(m.Val(h), &cred)
		if !plain {
			return false, false
		}
		if ok && bytes.EqualFold(cred.realm, realm) {
			found = true
			break
		}
	}
	c.auth = authState{}
	if !found {
		return false, true
	}
	// What the decoded path reads otherwise is settled before anything
	// is counted: the two URIs, the algorithm.
	cu, ok1 := sipmsg.ParseURI(cred.uri)
	ru, ok2 := sipmsg.ParseURI(m.RequestURI)
	sha := foldEq(cred.algorithm, "SHA-256")
	alg := "MD5"
	if sha {
		alg = "SHA-256"
	}
	if !ok1 || !ok2 || !sha && len(cred.algorithm) > 0 && !foldEq(cred.algorithm, "MD5") {
		return false, false
	}
	if string(to.User) != string(cred.username) {
		c.authFailed(string(cred.username))
		return false, true
	}
	valid, stale := checkNonceBytes(secret, cred.nonce, time.Now(), w.opt.NonceExpire)
	if !valid {
		return false, true
	}
	if stale {
		c.auth.stale = true
		return false, true
	}
	if string(cred.qop) != "auth" || cred.nc <= 0 || len(cred.cnonce) == 0 ||
		!bytes.EqualFold(cu.Host, ru.Host) || portOr5060(cu.Port) != portOr5060(ru.Port) {
		return false, true
	}
	if !w.algorithmOffered(alg) {
		return false, true
	}
	u, known, err := users.GetUser(str(cred.username), str(realm))
	if err != nil {
		return c.storeFailedBytes("authorize", string(cred.username), err), true
	}
	ha1 := u.HA1MD5
	if sha {
		ha1 = u.HA1SHA256
	}
	if !known {
		ha1 = zeroHA1
	}
	var wb [64]byte
	want := digestResponse(&wb, sha, ha1, m.MethodBytes, cred.uri, cred.nonce, cred.nc, cred.cnonce)
	var lb [64]byte
	got := lb[:0]
	if len(cred.response) <= len(lb) {
		for _, ch := range cred.response {
			if 'A' <= ch && ch <= 'Z' {
				ch += 'a' - 'A'
			}
			got = append(got, ch)
		}
	}
	if subtle.ConstantTimeCompare(want, got) != 1 || !known {
		c.authFailed(string(cred.username))
		return false, true
	}
	fresh, err := users.UseNonce(str(cred.nonce), uint32(cred.nc), w.opt.NonceExpire+time.Minute)
	if err != nil {
		return c.storeFailedBytes("authorize", string(cred.username), err), true
	}
	if !fresh {
		w.Stats.Replays++
		return false, true
	}
	c.auth.header = "Authorization"
	return true, true
}

// digestResponse is the response RFC 2617 3.2.2.1 defines for qop=auth,
// MD5 or SHA-256, in lower-case hex in b, as digest.Digest computes it.
func digestResponse(b *[64]byte, sha bool, ha1 string, method, uri, nonce []byte, nc int, cnonce []byte) []byte {
	var buf [512]byte
	var hb [64]byte
	p := append(append(append(buf[:0], method...), ':'), uri...)
	ha2 := hexSum(hb[:], sha, p)
	p = append(append(buf[:0], ha1...), ':')
	p = append(append(p, nonce...), ':')
	var ncb [8]byte
	for i := 7; i >= 0; i-- {
		ncb[i] = "0123456789abcdef"[nc&0xf]
		nc >>= 4
	}
	p = append(append(p, ncb[:]...), ':')
	p = append(append(p, cnonce...), ":auth:"...)
	p = append(p, ha2...)
	return hexSum(b[:], sha, p)
}

// hexSum writes the MD5 or SHA-256 of p in lower-case hex into dst.
func hexSum(dst []byte, sha bool, p []byte) []byte {
	if sha {
		s := sha256.Sum256(p)
		return dst[:hex.Encode(dst, s[:])]
	}
	s := md5.Sum(p)
	return dst[:hex.Encode(dst, s[:])]
}

// storeFailedBytes is storeFailed for a request on the bytes, which it
// decodes to answer.
func (c *msgCtx) storeFailedBytes(op, aor string, err error) bool {
	if c.decode() {
		c.w.storeFailed(c, op, aor, err)
	}
	return false
}

// challengeBytes is www_challenge on the bytes.
func (c *msgCtx) challengeBytes(a []*script.Literal) (ok, done bool) {
	w := c.w
	if c.m.Method == sipscan.Ack {
		return false, true
	}
	if c.stx != nil {
		return false, false
	}
	_, secret, err := w.users()
	if err != nil {
		return false, false
	}
	realm, _, ok := c.realmBytes(a, &w.reg.realm)
	if !ok {
		return false, false
	}
	// newNonce, written where it is sent.
	nb := &w.reg.nonce
	binary.BigEndian.PutUint64(nb[:8], uint64(time.Now().Unix()))
	rand.Read(nb[8:16])
	mac := hmacSHA256(secret, nb[:16])
	copy(nb[16:], mac[:16])
	var nonce [44]byte
	base64.RawURLEncoding.Encode(nonce[:], nb[:])
	n := base64.RawURLEncoding.EncodedLen(nonceLen)
	// digest.Challenge.String's lines, one for each algorithm.
	var eb [512]byte
	e := eb[:0]
	for _, alg := range w.opt.AuthAlgorithms {
		e = append(e, "WWW-Authenticate: Digest realm="...)
		e = strconv.AppendQuote(e, str(realm))
		e = append(e, ", nonce="...)
		e = strconv.AppendQuote(e, str(nonce[:n]))
		if c.auth.stale {
			e = append(e, ", stale=true"...)
		}
		if alg != "" {
			e = append(append(e, ", algorithm="...), alg...)
		}
		e = append(e, ", qop=\"auth\"\r\n"...)
	}
	c.replyBytesWith(401, "Unauthorized", e)
	c.stopped = true
	return true, true
}

// consumeBytes is consume_credentials on the bytes: the header comes off
// when the request is decoded (decode), and a request with it is not
// relayed on its bytes.
func (c *msgCtx) consumeBytes() bool {
	if c.auth.header == "" {
		return false
	}
	c.bs.consumed = true
	return true
}

// replySplice is what a reply on the bytes changes of the top Via.
func (c *msgCtx) replySplice() sipmsg.Splice {
	return sipmsg.Splice{Received: c.bs.via.recv, Rport: c.bs.via.rport, ForceRport: c.bs.forceRport, RportFirst: c.bs.rportFirst}
}

// forceRportBytes is force_rport on the bytes: the top Via of the replies
// gets rport and received as the decoded path's gets them (sipgo's
// Params.Add, after noteReceived's), and they go to the source.
func (c *msgCtx) forceRportBytes() (ok, done bool) {
	if !c.src.addr.IsValid() {
		return false, true
	}
	if c.bs.forceRport {
		return true, true // set already, where they stand
	}
	v := &c.bs.via
	ip := c.src.addr.Addr().AppendTo(c.w.ipBuf[:0])
	a, isIP := sipmsg.IPv4(ip)
	if !isIP {
		return false, false
	}
	// Params.Add appends what is absent: received before rport when
	// noteReceived added it, after it otherwise.
	c.bs.rportFirst = v.recv == nil
	c.bs.forceRport = true
	v.recv, v.rport = ip, int(c.src.addr.Port())
	v.dest.addr = netipAddrPort(netip.AddrFrom4(a), v.rport)
	return true, true
}

// replyBytesWith is replyBytes with header lines of its own, CRLF ended.
func (c *msgCtx) replyBytesWith(code int, reason string, extra []byte) {
	var tb [16]byte
	tag := appendLocalTag(tb[:0], c.m)
	s := c.replySplice()
	w := c.w
	out := c.m.AppendReplyHead(w.wbuf[:0], code, reason, &s, tag)
	out = sipmsg.AppendReplyEnd(append(out, extra...))
	w.wbuf = out[:0]
	d := viaDestBytes(c.bs.via.dest, c.src)
	w.send(&d, out)
}

// saveBytes is save on the bytes, for the refresh of a binding (see
// above). done is false, with nothing done, for anything else.
func (c *msgCtx) saveBytes() (ok, done bool) {
	w, m := c.w, c.m
	if m.Method != sipscan.Register {
		return false, true
	}
	if !c.src.addr.IsValid() {
		return false, false
	}
	v, found := m.First(sipmsg.To)
	if !found {
		return false, false
	}
	to, ok := sipmsg.ParseURI(sipmsg.AddrSpec(v))
	if !ok || to.Host[0] == '[' {
		return false, false
	}
	if len(w.opt.Domains) > 0 && !w.served(str(to.Host)) && !w.isOwnAddr(str(to.Host), to.Port) {
		return false, false // 403, from the decoded path
	}
	aor, ok := w.appendAOR(w.reg.aor[:0], &to)
	if !ok {
		return false, false
	}
	expires := int64(defaultExpires)
	var ct, ua []byte
	contacts, expSeen, uaSeen := 0, false, false
	for i := range m.Headers {
		h := &m.Headers[i]
		switch {
		case h.Kind == sipmsg.Contact:
			for p := h.ValStart; p < h.ValEnd; {
				v, next, ok := m.Value(h, p)
				if !ok {
					break
				}
				contacts++
				ct, p = v, next
			}
		case h.Kind != sipmsg.Other:
		case m.Named(h, "Path"):
			return false, false
		case !expSeen && m.Named(h, "Expires"):
			expSeen = true
			v := m.Val(h)
			if len(v) == 0 {
				break
			}
			n, ok := digits(v)
			if !ok {
				return false, false // 400, or what sipgo makes of it
			}
			expires = n
		case !uaSeen && m.Named(h, "User-Agent"):
			uaSeen, ua = true, m.Val(h)
		}
	}
	if contacts != 1 {
		return false, false // none (a query), several, or none readable
	}
	uri := sipmsg.AddrSpec(ct)
	var params []byte
	if i := bytes.IndexByte(ct, '<'); i >= 0 {
		if j := bytes.IndexByte(ct[i:], '>'); j >= 0 {
			params = ct[i+j+1:]
		}
	} else if i := bytes.IndexAny(ct, "; \t"); i >= 0 {
		params = ct[i:]
	}
	cu, ok := sipmsg.ParseURI(uri)
	if !ok || bytes.IndexByte(params, '"') >= 0 {
		return false, false
	}
	exp := expires
	for p := params; len(p) > 0; {
		if p[0] != ';' {
			if isLWSByte(p[0]) {
				p = p[1:]
				continue
			}
			return false, false
		}
		p = p[1:]
		e := bytes.IndexByte(p, ';')
		if e < 0 {
			e = len(p)
		}
		k, val := p[:e], []byte(nil)
		p = p[e:]
		if j := bytes.IndexByte(k, '='); j >= 0 {
			k, val = k[:j], bytes.TrimSpace(k[j+1:])
		}
		k = bytes.TrimSpace(k)
		switch {
		case string(k) == "expires":
			if n, err := strconv.ParseInt(str(val), 10, 64); err == nil && n >= 0 {
				exp = n
			}
		case foldEq(k, "expires"), foldEq(k, "+sip.instance"), foldEq(k, "reg-id"):
			return false, false
		}
	}
	if exp != 0 && (w.served(str(cu.Host)) || w.isOwnAddr(str(cu.Host), cu.Port)) {
		return false, false // a loop the decoded path refuses and logs
	}
	// natReceived's: the source, as a URI after fix_nated_register.
	received := w.reg.recv[:0]
	if c.natReg {
		received = append(received, natReceivedPrefix...)
	}
	received = c.src.addr.AppendTo(received)
	now := time.Now()
	b := &w.reg.bind
	*b = location.Binding{
		Contact:   str(uri),
		Expires:   now.Add(time.Duration(exp) * time.Second),
		CallID:    str(m.CallID),
		CSeq:      m.CSeq,
		Received:  str(received),
		Proto:     c.src.proto,
		UserAgent: str(ua),
	}
	if exp == 0 {
		b.Expires = now
	}
	defer func() { *b = location.Binding{} }()
	// A refresh, at once: REGISTERs held for group commit go first.
	if r, isR := location.RefresherOf(w.opt.Store); isR && exp != 0 && len(w.regs.changes) == 0 {
		out, ok, err := r.Refresh(str(aor), b, w.reg.out[:0])
		if err == nil && ok {
			var eb [1024]byte
			c.replyBytesWith(200, "OK", appendRegistered(eb[:0], out, m.CallID))
			clear(out)
			w.reg.out = out[:0]
			return true, true
		}
	}
	if !canonicalURI(uri) {
		return false, false // filed as sipgo writes it back
	}
	// A new binding, a refresh or a removal: the store keeps its
	// strings, or, held for group commit into a store that copies them,
	// the batch does.
	rb := &w.regs
	nb := *b
	var aorS string
	if w.opt.GroupCommit && location.CopiesChanges(w.opt.Store) {
		if len(rb.changes) == 0 {
			w.reg.held = w.reg.held[:0]
		}
		aorS = w.keep(aor)
		nb.Contact, nb.CallID, nb.Received = w.keep(uri), w.keep(m.CallID), w.keep(received)
		if len(ua) > 0 {
			nb.UserAgent = w.keep(ua)
		}
	} else {
		aorS = string(aor)
		nb.Contact, nb.CallID, nb.Received = string(uri), string(m.CallID), string(received)
		if len(ua) > 0 {
			nb.UserAgent = string(ua)
		}
	}
	k := len(rb.binds)
	rb.binds = append(rb.binds, nb)
	ch := location.Change{AOR: aorS, Bindings: rb.binds[k:len(rb.binds):len(rb.binds)]}
	return c.saveChangeBytes(ch), true
}

// saveChangeBytes is saveChange for a REGISTER on the bytes. What its
// reply needs of the request, when it is held for group commit, is written
// aside at once: the datagram's buffer is the reader's again when the
// script is done.
func (c *msgCtx) saveChangeBytes(ch location.Change) bool {
	w, m := c.w, c.m
	b := &w.regs
	if !w.opt.GroupCommit {
		w.reg.one[0] = ch
		out, err := location.Apply(w.opt.Store, w.reg.one[:])
		w.reg.one[0] = location.Change{}
		clear(b.binds)
		b.binds = b.binds[:0]
		if err != nil || len(out) == 0 {
			return c.storeFailedBytes(changeOp(ch), ch.AOR, err)
		}
		var eb [1024]byte
		c.replyBytesWith(200, "OK", appendRegistered(eb[:0], out[0], m.CallID))
		return true
	}
	if len(b.changes) == 0 {
		b.since = time.Now()
	}
	var tb [16]byte
	s := c.replySplice()
	h0 := len(b.heads)
	b.heads = m.AppendReplyHead(b.heads, 200, "OK", &s, appendLocalTag(tb[:0], m))
	h0 += len("SIP/2.0 200 OK\r\n")
	h1 := len(b.heads)
	b.heads = append(b.heads, m.CallID...)
	b.changes = append(b.changes, ch)
	b.reqs = append(b.reqs, heldReg{src: c.src, dest: c.bs.via.dest, head: [3]int{h0, h1, len(b.heads)}})
	if len(b.changes) >= maxBatch {
		w.EndTurn()
	}
	return true
}

// canonicalURI reports whether sipgo writes uri back as it is (sip.Uri's
// String), which the decoded path files: a sip or sips URI in lower case,
// a user and a host of plain characters, a port without a leading zero,
// a few parameters of plain characters, each named once, with a value or
// none.
func canonicalURI(uri []byte) bool {
	plain := func(ch byte) bool {
		return 'a' <= ch && ch <= 'z' || 'A' <= ch && ch <= 'Z' || '0' <= ch && ch <= '9' || ch == '.' || ch == '-' || ch == '_'
	}
	var rest []byte
	switch {
	case bytes.HasPrefix(uri, []byte("sip:")):
		rest = uri[4:]
	case bytes.HasPrefix(uri, []byte("sips:")):
		rest = uri[5:]
	default:
		return false
	}
	if at := bytes.IndexByte(rest, '@'); at >= 0 {
		if at == 0 {
			return false
		}
		for _, ch := range rest[:at] {
			if !plain(ch) && ch != '+' {
				return false
			}
		}
		rest = rest[at+1:]
	}
	i := 0
	for i < len(rest) && plain(rest[i]) {
		i++
	}
	if i == 0 {
		return false
	}
	if i < len(rest) && rest[i] == ':' {
		i++
		d := i
		for i < len(rest) && '0' <= rest[i] && rest[i] <= '9' {
			i++
		}
		if i == d || i-d > 5 || rest[d] == '0' {
			return false
		}
	}
	// sipgo keeps one value of a parameter named twice.
	var keys [8][]byte
	for n := 0; i < len(rest); n++ {
		if rest[i] != ';' || n == len(keys) {
			return false
		}
		i++
		k := i
		for i < len(rest) && plain(rest[i]) {
			i++
		}
		if i == k {
			return false
		}
		keys[n] = rest[k:i]
		for _, o := range keys[:n] {
			if bytes.EqualFold(o, keys[n]) {
				return false
			}
		}
		if i < len(rest) && rest[i] == '=' {
			i++
			v := i
			for i < len(rest) && plain(rest[i]) {
				i++
			}
			if i == v {
				return false
			}
		}
	}
	return true
}

func isLWSByte(c byte) bool { return c == ' ' || c == '\t' }

// digits reads a number of at most 9 decimal digits and nothing else.
func digits(b []byte) (int64, bool) {
	if len(b) == 0 || len(b) > 9 {
		return 0, false
	}
	var n int64
	for _, ch := range b {
		if ch < '0' || ch > '9' {
			return 0, false
		}
		n = n*10 + int64(ch-'0')
	}
	return n, true
}

// appendRegistered appends the header lines of a REGISTER's 200 OK that
// list bs (replyRegistered's), for a REGISTER of Call-ID callID without a
// Path.
func appendRegistered(e []byte, bs []location.Binding, callID []byte) []byte {
	outbound := false
	for i := range bs {
		b := &bs[i]
		left := int(time.Until(b.Expires).Round(time.Second) / time.Second)
		e = append(e, "Contact: <"...)
		e = append(e, b.Contact...)
		e = append(e, ">;expires="...)
		e = strconv.AppendInt(e, int64(left), 10)
		if b.Instance != "" {
			e = append(e, ";+sip.instance="...)
			e = append(e, b.Instance...)
			e = append(e, ";reg-id="...)
			e = append(e, b.RegID...)
			outbound = outbound || b.CallID == string(callID)
		}
		e = append(e, "\r\n"...)
	}
	if outbound {
		e = append(e, "Require: outbound\r\nSupported: outbound\r\n"...)
	}
	return e
}

// replyHeld answers a REGISTER held on its bytes (saveChangeBytes) with
// code and the header lines extra.
func (w *Worker) replyHeld(r *heldReg, code int, reason string, extra []byte) {
	heads := w.regs.heads
	out := append(w.wbuf[:0], "SIP/2.0 "...)
	out = strconv.AppendInt(out, int64(code), 10)
	out = append(append(append(out, ' '), reason...), "\r\n"...)
	out = append(out, heads[r.head[0]:r.head[1]]...)
	out = sipmsg.AppendReplyEnd(append(out, extra...))
	w.wbuf = out[:0]
	d := r.dest
	w.send(&d, out)
}
