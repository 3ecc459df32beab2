package loadgen

import (
	"bytes"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/icholy/digest"
)

// challenger is a registrar and proxy in miniature that demands digest
// credentials: a request without valid ones gets 401 (REGISTER) or 407,
// checked with another digest implementation than sipload's; valid ones
// must be for the request's URI and name the user the request is for (the
// To user of a REGISTER, the From user of others), as sipvisor insists.
func challenger(t *testing.T, pass string) string {
	t.Helper()
	pc, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.MustParseAddrPort("127.0.0.1:0")))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	addr := pc.LocalAddr().String()
	e := newEndpoint("127.0.0.1", pc.LocalAddr().(*net.UDPAddr).Port, "", "UDP", "", "srv")
	chal := &digest.Challenge{Realm: "test", Nonce: "n0nce", Algorithm: "MD5", QOP: []string{"auth"}}
	go func() {
		buf := make([]byte, 65535)
		var m msg
		for {
			n, from, err := pc.ReadFromUDPAddrPort(buf)
			if err != nil {
				return
			}
			if m.scan(buf[:n]) != nil || m.isResp || string(m.method) == "ACK" {
				continue
			}
			method := string(m.method)
			name, code, who := "Proxy-Authorization", 407, m.from
			if method == "REGISTER" {
				name, code, who = "Authorization", 401, m.to
			}
			ok := method == "BYE"
			if v := headerValue(buf[:n], name); v != nil && !ok {
				cr, err := digest.ParseCredentials(string(v))
				if err == nil {
					want, err := digest.Digest(chal, digest.Options{Method: method, URI: cr.URI, Username: cr.Username,
						Password: pass, Cnonce: cr.Cnonce, Count: cr.Nc})
					ok = err == nil && want.Response == cr.Response && cr.URI == string(m.ruri) &&
						string(userOf(who)) == cr.Username
				}
			}
			var out []byte
			switch {
			case !ok:
				hdr := "WWW-Authenticate"
				if code == 407 {
					hdr = "Proxy-Authenticate"
				}
				out = e.response(nil, &m, code, "Unauthorized", "c", false, hdr+": "+chal.String()+"\r\n", nil)
			case method == "INVITE":
				out = e.response(nil, &m, 200, "OK", "c", true, "", e.sdp)
			default:
				out = e.response(nil, &m, 200, "OK", "c", false, "", nil)
			}
			pc.WriteToUDPAddrPort(out, from)
		}
	}()
	return addr
}

// The built-in scenarios answer a challenge once a call with -au/-ap, as
// the hand-written ones did: register for each registering user, uac and
// options as -au (who is also their From user); wrong credentials fail
// the call after one answer.
func TestBuiltinsAnswerChallenges(t *testing.T) {
	t.Parallel()
	target := challenger(t, "s3cret")
	for _, tc := range []struct {
		name     string
		o        Options
		ok, fail int64
	}{
		{"register", Options{Scenario: "register", Service: "load", AuthPass: "s3cret", MaxCalls: 2}, 2, 0},
		{"register refreshing", Options{Scenario: "register", Service: "load", AuthPass: "s3cret", MaxCalls: 4, Users: 2}, 4, 0},
		{"uac", Options{Scenario: "uac", Service: "bob", AuthUser: "alice", AuthPass: "s3cret", MaxCalls: 2}, 2, 0},
		{"options", Options{Scenario: "options", AuthUser: "alice", AuthPass: "s3cret", MaxCalls: 2}, 2, 0},
		{"wrong password", Options{Scenario: "register", Service: "load", AuthPass: "wrong", MaxCalls: 2}, 0, 2},
		{"no password", Options{Scenario: "uac", AuthUser: "alice", MaxCalls: 2}, 0, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			o := tc.o
			o.Target, o.Schedule, o.T1 = target, Constant(20), 50*time.Millisecond
			var msgs bytes.Buffer
			o.TraceMsg = &msgs
			st := runClient(t, o)
			challenged := tc.ok + tc.fail
			if o.AuthPass == "" {
				challenged = 0
			}
			if st.Succeeded != tc.ok || st.Failed != tc.fail || st.Failed4xx != tc.fail || st.Challenged != challenged {
				t.Errorf("want %d succeeded, %d failed (4xx), %d challenged; have %+v\n%s", tc.ok, tc.fail, challenged, st.Counts, msgs.String())
			}
		})
	}
}
