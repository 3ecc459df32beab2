package engine

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"strings"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"
	"github.com/icholy/digest"

	"github.com/sipvisor/sipvisor/worker"
)

// The HMAC on the stack is crypto/hmac's, for keys shorter and longer
// than a block.
func TestHMACSHA256(t *testing.T) {
	t.Parallel()
	for _, kl := range []int{0, 1, 32, 63, 64, 65, 100} {
		key := []byte(strings.Repeat("k", kl))
		for ml := 0; ml <= 64; ml += 8 {
			msg := []byte(strings.Repeat("m", ml))
			m := hmac.New(sha256.New, key)
			m.Write(msg)
			want := m.Sum(nil)
			if have := hmacSHA256(key, msg); string(have[:]) != string(want) {
				t.Errorf("key %d, message %d bytes: want %x, have %x", kl, ml, want, have)
			}
		}
	}
}

// credSamples are Authorization values as phones write them, and as they
// should not.
var credSamples = []string{
	`Digest username="alice", realm="example.com", nonce="abc", uri="sip:example.com", response="0123abcd", algorithm=MD5, cnonce="c0ffee", qop=auth, nc=00000001`,
	`Digest username="alice",realm="example.com",nonce="abc",uri="sip:example.com",response="0123abcd",cnonce="x",qop="auth",nc="0000000a"`,
	`digest username = "alice" , realm="r", nc=ff`,
	`DIGEST username="a"`,
	`Digest `,
	`Digest`,
	`Basic YWxpY2U6c2VjcmV0`,
	`Digest username="alice" realm="r"`,
	`Digest username="alice", nc=zz`,
	`Digest username="alice", nc=`,
	`Digest username="alice", realm="unterminated`,
	`Digest username="al\"ice", realm="r"`,
	`Digest username="ålice", realm="r"`,
	`Digest username=alice, realm=, nonce="n", nonce="m"`,
	`Digest username="alice",`,
	`Digest ="x"`,
	`Digest username`,
	`Digest username="alice", response="X", algorithm=SHA-256, opaque="o", userhash=true`,
	`Digest username="alice",	realm="tab"`,
	`Digest nc=-1`,
	`Digest nc=80000000`,
}

// parseCredBytes reads what digest.ParseCredentials reads, and refuses
// what it refuses, or leaves the value to it.
func TestParseCredBytes(t *testing.T) {
	t.Parallel()
	for _, s := range credSamples {
		checkCredBytes(t, s)
	}
}

func FuzzParseCredBytes(f *testing.F) {
	for _, s := range credSamples {
		f.Add(s)
	}
	f.Fuzz(checkCredBytes)
}

func checkCredBytes(t *testing.T, s string) {
	var c credBytes
	ok, plain := parseCredBytes([]byte(s), &c)
	want, err := digest.ParseCredentials(s)
	if !plain {
		return // the decoded path reads it
	}
	if ok != (err == nil) {
		t.Fatalf("%q: want accepted %v (%v), have %v", s, err == nil, err, ok)
	}
	if !ok {
		return
	}
	have := digest.Credentials{Username: string(c.username), Realm: string(c.realm), Nonce: string(c.nonce), URI: string(c.uri),
		Response: string(c.response), Algorithm: string(c.algorithm), Cnonce: string(c.cnonce), QOP: string(c.qop), Nc: c.nc}
	want.Opaque, want.Userhash = "", false // not read
	if have != *want {
		t.Fatalf("%q:\nwant %+v\nhave %+v", s, *want, have)
	}
}

// The response computed on the stack is digest.Digest's, MD5 and SHA-256.
func TestDigestResponse(t *testing.T) {
	t.Parallel()
	for _, sha := range []bool{false, true} {
		alg, ha1 := "MD5", "0cc175b9c0f1b6a831c399e269772661"
		if sha {
			alg, ha1 = "SHA-256", "ca978112ca1bbdcafac231b39a23dc4da786eff8147c4e72b9807785afee48bb"
		}
		for _, nc := range []int{1, 2, 255, 0x7fffffff} {
			ch := &digest.Challenge{Realm: "example.com", Nonce: "n0nce", Algorithm: alg, QOP: []string{"auth"}}
			want, err := digest.Digest(ch, digest.Options{Method: "REGISTER", URI: "sip:example.com", Username: "alice",
				A1: ha1, Cnonce: "c0ffee", Count: nc})
			if err != nil {
				t.Fatal(err)
			}
			var b [64]byte
			have := digestResponse(&b, sha, ha1, []byte("REGISTER"), []byte("sip:example.com"), []byte("n0nce"), nc, []byte("c0ffee"))
			if string(have) != want.Response {
				t.Errorf("%s, nc %d: want %s, have %s", alg, nc, want.Response, have)
			}
		}
	}
}

// A nonce is judged on the bytes as checkNonce judges it.
func TestCheckNonceBytes(t *testing.T) {
	t.Parallel()
	secret := []byte("0123456789abcdef0123456789abcdef")
	now := time.Now()
	forged := func(issued time.Time) string {
		var b [nonceLen]byte
		binary.BigEndian.PutUint64(b[:8], uint64(issued.Unix()))
		return base64.RawURLEncoding.EncodeToString(b[:])
	}
	good := newNonce(secret, now)
	for _, n := range []string{
		good, newNonce(secret, now.Add(-time.Hour)), newNonce(secret, now.Add(time.Hour)), newNonce([]byte("other"), now),
		forged(now), good[:len(good)-1], good + "A", good + "=", "", "!!!!", strings.Repeat("A", 200), "\n" + good,
	} {
		wv, ws := checkNonce(secret, n, now, 5*time.Minute)
		hv, hs := checkNonceBytes(secret, []byte(n), now, 5*time.Minute)
		if wv != hv || ws != hs {
			t.Errorf("%q: want valid %v stale %v, have %v %v", n, wv, ws, hv, hs)
		}
	}
}

var uriSamples = []string{
	"sip:alice@127.0.0.1:5060", "sip:alice@127.0.0.1", "sips:alice@example.com:5061;transport=tls", "sip:127.0.0.1:5070",
	"sip:alice@host;lr", "sip:alice@host;ob;transport=udp", "sip:+4930123@gw.example.com;user=phone", "SIP:alice@host",
	"sip:alice@host:05060", "sip:alice@host;k=", "sip:alice@host;=v", "sip:alice@host;;", "sip:alice:pw@host", "sip:al%41ice@host",
	"sip:alice@[::1]:5060", "sip:alice@host?subject=x", "sip:@host", "sip:alice@", "sip:alice@host:", "sip:alice@host:0",
	"tel:+4930123", "sip:alice@Host.Example.COM", "sip://alice@host", "sip:a.b-c_d@h-1.x", "sip:alice@host:65536",
}

// What canonicalURI accepts, sipgo writes back as it is: the decoded
// path files it so.
func TestCanonicalURI(t *testing.T) {
	t.Parallel()
	for _, s := range uriSamples {
		checkCanonicalURI(t, s)
	}
	for _, s := range []string{"sip:alice@127.0.0.1:5060", "sip:alice@host;ob;transport=udp", "sip:+4930123@gw.example.com;user=phone"} {
		if !canonicalURI([]byte(s)) {
			t.Errorf("%s: not taken", s)
		}
	}
}

func FuzzCanonicalURI(f *testing.F) {
	for _, s := range uriSamples {
		f.Add(s)
	}
	f.Fuzz(checkCanonicalURI)
}

func checkCanonicalURI(t *testing.T, s string) {
	if !canonicalURI([]byte(s)) {
		return
	}
	var u sip.Uri
	if err := sip.ParseUri(s, &u); err != nil {
		t.Fatalf("%q taken, and sipgo refuses it: %v", s, err)
	}
	if have := u.String(); have != s {
		t.Fatalf("%q taken, and sipgo writes it %q", s, have)
	}
}

// The bindings held for group commit on the bytes keep their strings in
// the batch's buffer, which the next batch writes over: each batch's
// REGISTERs are answered, and their bindings filed, as they asked.
func TestHeldBindingsKeepTheirStrings(t *testing.T) {
	w, st, pa := groupWorker(t, registrarScript)
	phone := newUA(t)
	from := phone.addr().String()
	batches := [][]string{{"a1", "bob-with-a-long-name", "c"}, {"d"}, {"eeeeeeeeeeeeeeeeeeeeeeeeeeeeeeee", "f", "g", "h", "i"}}
	for _, batch := range batches {
		for _, u := range batch {
			w.HandleMessage(&worker.Message{From: phone.addr(), Data: registerMsg(pa, phone.addr(), u)})
		}
		w.EndTurn()
		for _, u := range batch {
			res, raw := phone.recvResponse(200)
			cts := res.GetHeaders("Contact")
			if len(cts) != 1 || !strings.Contains(cts[0].Value(), "<sip:"+u+"@"+from+">") ||
				res.CallID().Value() != "c"+u+"@test" {
				t.Fatalf("reply to %s: want its one binding listed, have:\n%s", u, raw)
			}
		}
	}
	bs, err := st.List()
	if err != nil || len(bs) != 9 {
		t.Fatalf("bindings: want 9, have %+v, %v", bs, err)
	}
	for _, b := range bs {
		u, _, _ := strings.Cut(strings.TrimPrefix(b.AOR, "sip:"), "@")
		if b.AOR != "sip:"+u+"@"+pa.Addr().String() || b.Contact != "sip:"+u+"@"+from || b.CallID != "c"+u+"@test" ||
			b.Received != from || b.Proto != "udp" || b.CSeq != 1 {
			t.Errorf("binding of %s: have %+v", u, b)
		}
	}
}
