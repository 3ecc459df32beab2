package loadgen

import (
	"crypto/md5"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"hash"
	"math/rand/v2"
	"strings"
)

// authParam finds name=value or name="value" in a Digest challenge.
func authParam(chal, name string) (string, bool) {
	s := chal
	if i := strings.IndexByte(s, ' '); i >= 0 && strings.EqualFold(s[:i], "Digest") {
		s = s[i+1:]
	}
	for len(s) > 0 {
		s = strings.TrimLeft(s, " \t,")
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return "", false
		}
		k := strings.TrimSpace(s[:eq])
		s = s[eq+1:]
		var v string
		if strings.HasPrefix(s, `"`) {
			end := strings.IndexByte(s[1:], '"')
			if end < 0 {
				return "", false
			}
			v, s = s[1:1+end], s[2+end:]
		} else {
			end := strings.IndexByte(s, ',')
			if end < 0 {
				end = len(s)
			}
			v, s = strings.TrimSpace(s[:end]), s[end:]
		}
		if strings.EqualFold(k, name) {
			return v, true
		}
	}
	return "", false
}

// digestHeader answers a 401 (Authorization) or 407 (Proxy-Authorization)
// Digest challenge as RFC 2617 and RFC 7616 define it, with MD5 or
// SHA-256, qop auth or auth-int, in the header line SIPp's [authentication]
// writes.
func digestHeader(code int, chal, user, pass, method, uri string, body []byte, nc uint32, rng *rand.Rand) (string, error) {
	if !strings.HasPrefix(strings.ToLower(strings.TrimSpace(chal)), "digest") {
		return "", fmt.Errorf("authentication: challenge %q is not Digest", clip([]byte(chal)))
	}
	realm, ok := authParam(chal, "realm")
	if !ok {
		return "", fmt.Errorf("authentication: no realm in %q", clip([]byte(chal)))
	}
	nonce, ok := authParam(chal, "nonce")
	if !ok {
		return "", fmt.Errorf("authentication: no nonce in %q", clip([]byte(chal)))
	}
	algo, _ := authParam(chal, "algorithm")
	var newHash func() hash.Hash
	switch strings.ToUpper(algo) {
	case "", "MD5":
		algo, newHash = "MD5", md5.New
	case "SHA-256":
		algo, newHash = "SHA-256", sha256.New
	default:
		return "", fmt.Errorf("authentication: algorithm %s is not supported (MD5 and SHA-256 are)", algo)
	}
	qop := ""
	if q, ok := authParam(chal, "qop"); ok {
		opts := strings.Split(q, ",")
		for _, o := range opts {
			if strings.TrimSpace(o) == "auth" {
				qop = "auth"
			}
		}
		if qop == "" {
			for _, o := range opts {
				if strings.TrimSpace(o) == "auth-int" {
					qop = "auth-int"
				}
			}
		}
	}
	cnonce := fmt.Sprintf("%08x", rng.Uint32())
	resp := digestResponse(newHash, user, realm, pass, method, uri, nonce, fmt.Sprintf("%08x", nc), cnonce, qop, body)
	name := "Proxy-Authorization"
	if code == 401 {
		name = "Authorization"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "%s: Digest username=\"%s\",realm=\"%s\"", name, user, realm)
	if qop != "" {
		fmt.Fprintf(&b, ",cnonce=\"%s\",nc=%08x,qop=%s", cnonce, nc, qop)
	}
	fmt.Fprintf(&b, ",uri=\"%s\",nonce=\"%s\",response=\"%s\",algorithm=%s", uri, nonce, resp, algo)
	if op, ok := authParam(chal, "opaque"); ok {
		fmt.Fprintf(&b, ",opaque=\"%s\"", op)
	}
	return b.String(), nil
}

// digestResponse is the request-digest of RFC 2617 3.2.2.1 (and RFC 7616
// 3.4.1 for SHA-256): H(H(A1):nonce[:nc:cnonce:qop]:H(A2)).
func digestResponse(newHash func() hash.Hash, user, realm, pass, method, uri, nonce, nc, cnonce, qop string, body []byte) string {
	h := func(s string) string {
		x := newHash()
		x.Write([]byte(s))
		return hex.EncodeToString(x.Sum(nil))
	}
	ha1 := h(user + ":" + realm + ":" + pass)
	a2 := method + ":" + uri
	if qop == "auth-int" {
		a2 += ":" + h(string(body))
	}
	ha2 := h(a2)
	if qop == "" {
		return h(ha1 + ":" + nonce + ":" + ha2)
	}
	return h(ha1 + ":" + nonce + ":" + nc + ":" + cnonce + ":" + qop + ":" + ha2)
}

var (
	md5New    = md5.New
	sha256New = sha256.New
)
