package engine

import (
	"net/netip"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"
	"github.com/icholy/digest"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/location"
	"github.com/sipvisor/sipvisor/script"
)

// www_authorize accepts the right password once per nonce-count, and
// refuses everything else alike: a wrong password, an unknown user, a
// replay, a nonce it did not sign, credentials for another Request-URI.
func TestWWWAuthorize(t *testing.T) {
	t.Parallel()
	store := location.NewMemory()
	store.PutUser(location.NewUser("alice", "example.com", "right"))
	store.PutUser(location.NewUser("bob", "example.com", "bobs"))
	// Failures reach the supervisor's table of bans: guesses only.
	var failed []string
	w, err := NewWorker(Options{Script: &script.Script{}, Store: store, AuthAlgorithms: []string{"MD5", "SHA-256"},
		Listen:     []config.Socket{{Proto: "udp", Host: "127.0.0.1", Port: 5060}},
		AuthFailed: func(src netip.Addr, user string) { failed = append(failed, src.String()+" "+user) }})
	if err != nil {
		t.Fatal(err)
	}
	_, secret, err := w.users()
	if err != nil {
		t.Fatal(err)
	}
	const ruri = "sip:example.com"
	creds := func(user, pass, nonce, alg, uri string, nc int) string {
		ch := &digest.Challenge{Realm: "example.com", Nonce: nonce, Algorithm: alg, QOP: []string{"auth"}}
		cr, err := digest.Digest(ch, digest.Options{Method: "REGISTER", URI: uri, Username: user, Password: pass, Count: nc, Cnonce: "c0ffee"})
		if err != nil {
			t.Fatal(err)
		}
		return cr.String()
	}
	check := func(auth string) (bool, authState) {
		t.Helper()
		raw := "REGISTER " + ruri + " SIP/2.0\r\nVia: SIP/2.0/UDP 10.0.0.9:5070;branch=z9hG4bK-a\r\n" +
			"From: <sip:alice@example.com>;tag=1\r\nTo: <sip:alice@example.com>\r\nCall-ID: a@x\r\nCSeq: 1 REGISTER\r\n" +
			"Authorization: " + auth + "\r\nContent-Length: 0\r\n\r\n"
		m, err := sip.ParseMessage([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		c := w.newCtx(m.(*sip.Request), nil, source{proto: "udp", addr: netip.MustParseAddrPort("10.0.0.9:5070"), sock: -1})
		ok := c.authorize(nil, false)
		return ok, c.auth
	}
	now := time.Now()
	n1, n2, n3 := newNonce(secret, now), newNonce(secret, now), newNonce(secret, now)
	old := newNonce(secret, now.Add(-time.Hour))
	forged := newNonce([]byte("another secret"), now)
	for _, c := range []struct {
		name, auth  string
		want, stale bool
		failed      string // reported as a failed authentication, "" for none
	}{
		{"right password, MD5", creds("alice", "right", n1, "MD5", ruri, 1), true, false, ""},
		{"the same nonce-count again (a replay)", creds("alice", "right", n1, "MD5", ruri, 1), false, false, ""},
		{"the next nonce-count", creds("alice", "right", n1, "MD5", ruri, 2), true, false, ""},
		{"right password, SHA-256", creds("alice", "right", n2, "SHA-256", ruri, 1), true, false, ""},
		{"wrong password", creds("alice", "wrong", n3, "MD5", ruri, 1), false, false, "10.0.0.9 alice"},
		{"unknown user", creds("mallory", "right", n3, "MD5", ruri, 2), false, false, "10.0.0.9 mallory"},
		{"expired nonce", creds("alice", "right", old, "MD5", ruri, 1), false, true, ""},
		{"nonce signed by someone else", creds("alice", "right", forged, "MD5", ruri, 1), false, false, ""},
		{"another Request-URI", creds("alice", "right", n3, "MD5", "sip:other.example", 3), false, false, ""},
		{"not digest", "Basic YWxpY2U6cmlnaHQ=", false, false, ""},
		{"another user's credentials", creds("bob", "bobs", n3, "MD5", ruri, 4), false, false, "10.0.0.9 bob"},
	} {
		failed = nil
		ok, st := check(c.auth)
		if ok != c.want || st.stale != c.stale {
			t.Errorf("%s: want %v (stale %v), have %v (stale %v)", c.name, c.want, c.stale, ok, st.stale)
		}
		if want := c.failed; len(failed) != min(len(want), 1) || want != "" && failed[0] != want {
			t.Errorf("%s: reported failures %q, want %q", c.name, failed, want)
		}
	}
	if w.Stats.Replays != 1 {
		t.Errorf("want 1 replay counted, have %d", w.Stats.Replays)
	}
}

// A nonce is valid only as signed, and stale once older than its expiry.
func TestNonce(t *testing.T) {
	t.Parallel()
	nonce := newNonce([]byte("k"), time.Now())
	if ok, stale := checkNonce([]byte("k"), nonce, time.Now(), time.Minute); !ok || stale {
		t.Fatalf("fresh nonce: want valid, have %v %v", ok, stale)
	}
	if ok, stale := checkNonce([]byte("k"), nonce, time.Now().Add(2*time.Minute), time.Minute); !ok || !stale {
		t.Fatalf("old nonce: want valid and stale, have %v %v", ok, stale)
	}
	for _, bad := range []string{nonce[:len(nonce)-2] + "AA", "", "not base64!", nonce + "A"} {
		if ok, _ := checkNonce([]byte("k"), bad, time.Now(), time.Minute); ok {
			t.Errorf("nonce %q: want invalid", bad)
		}
	}
}
