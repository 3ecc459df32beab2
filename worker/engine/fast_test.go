package engine

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"
	"github.com/icholy/digest"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/internal/sipmsg"
	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/location"
	"github.com/sipvisor/sipvisor/script"
)

// A request looked up on its bytes is filed under the AOR the decoded
// path files it under.
func TestAppendAOR(t *testing.T) {
	t.Parallel()
	s, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	port := s.LocalAddr().(*net.UDPAddr).Port
	for _, domains := range [][]string{nil, {"Example.COM"}} {
		w, err := NewWorker(Options{Script: &script.Script{}, Sockets: []net.PacketConn{s}, Domains: domains,
			Listen: []config.Socket{{Proto: "udp", Host: "127.0.0.1", Port: port}}})
		if err != nil {
			t.Fatal(err)
		}
		for _, in := range []string{
			"sip:bob@example.com", "sip:Bob@EXAMPLE.com;transport=udp", "sip:bob@10.0.0.1:5062", "sip:example.com",
			"sip:bob@127.0.0.1", "sip:bob@127.0.0.1:" + strconv.Itoa(port), "sip:bob@localhost:" + strconv.Itoa(port), "sips:bob@example.com:5061",
			"sip:bob:secret@example.com",
		} {
			u, ok := sipmsg.ParseURI([]byte(in))
			if !ok {
				t.Fatalf("%s: not read", in)
			}
			var su sip.Uri
			if err := sip.ParseUri(in, &su); err != nil {
				t.Fatal(err)
			}
			have, ok := w.appendAOR(nil, &u)
			if want := w.aorOf(&su); !ok || string(have) != want {
				t.Errorf("domains %q, %s: want %q, have %q (%v)", domains, in, want, have, ok)
			}
		}
	}
}

// A call handled on the bytes sends what it sends when the script decodes
// every request at once (reading $ci first): the same requests to the
// callee and the same replies to the caller, header for header, once
// both are written out by sipgo and this server's branches and the
// sockets' ports are set aside.
func TestBytesPathSendsWhatDecodedSends(t *testing.T) {
	t.Parallel()
	run := func(routes string, onBytes bool) (uas, uac []string) {
		d := newCallDriverScript(t, routes)
		defer d.close()
		// A context is kept for the next request only when the script
		// decoded nothing.
		defer func() {
			if kept := d.w.fastCtx != nil; kept != onBytes {
				t.Fatalf("requests handled on the bytes: want %v, have %v", onBytes, kept)
			}
		}()
		c := d.calls(1)[0]
		msgs := [][]byte{c.inv, c.ringing, c.ok, c.ack, c.bye, c.byeOK}
		from := []netip.AddrPort{d.uac, d.uas, d.uas, d.uac, d.uac, d.uas}
		for i, m := range msgs {
			d.msg(from[i], m)
		}
		branch := regexp.MustCompile(regexp.QuoteMeta(d.w.branchPrefix) + `[0-9a-z]+`)
		read := func(s *net.UDPConn, n int) []string {
			var out []string
			buf := make([]byte, 65535)
			for range n {
				s.SetReadDeadline(time.Now().Add(5 * time.Second))
				k, err := s.Read(buf)
				if err != nil {
					t.Fatalf("want %d messages, have %d: %v", n, len(out), err)
				}
				raw := branch.ReplaceAll(buf[:k], []byte("z9hG4bK-proxy"))
				// The two runs' sockets have ports of their own.
				for i, p := range []uint16{d.pa.Port(), d.uac.Port(), d.uas.Port()} {
					raw = bytes.ReplaceAll(raw, []byte(strconv.Itoa(int(p))), []byte(strconv.Itoa(1111*(i+1))))
				}
				m, err := sip.ParseMessage(raw)
				if err != nil {
					t.Fatalf("%v in %q", err, raw)
				}
				out = append(out, m.String())
			}
			return out
		}
		// INVITE, ACK, BYE to the callee; 100, 180, 200, 200 to the caller.
		return read(d.socks[2], 3), read(d.socks[1], 4)
	}
	uasB, uacB := run(callScript, true)
	uasD, uacD := run(strings.Replace(callScript, "route {", "route {\n\t$var(decoded) = $ci;", 1), false)
	// As the built-in config and bench/sipvisor.cfg add: the NAT test, a
	// look at $du, a $du set. The bytes still serve.
	natScript := strings.Replace(callScript, "route {", "route {\n\tif (nat_uac_test(3)) { force_rport(); }", 1)
	natScript = strings.Replace(natScript, "\tif (!t_relay())", "\tif ($du != \"\")\n\t\tt_on_reply(\"nat\");\n\t$du = \"sip:@UAS@\";\n\tif (!t_relay())", 1)
	natScript += "onreply_route[nat] {\n\tif (nat_uac_test(1))\n\t\tfix_nated_contact();\n}\n"
	uasN, uacN := run(natScript, true)
	for i := range uasN {
		if uasN[i] != uasD[i] {
			t.Errorf("with the NAT test, to the callee, message %d:\non the bytes %q\ndecoded     %q", i, uasN[i], uasD[i])
		}
	}
	for i := range uacN {
		if uacN[i] != uacD[i] {
			t.Errorf("with the NAT test, to the caller, message %d:\non the bytes %q\ndecoded     %q", i, uacN[i], uacD[i])
		}
	}
	for i := range uasB {
		if uasB[i] != uasD[i] {
			t.Errorf("to the callee, message %d:\non the bytes %q\ndecoded     %q", i, uasB[i], uasD[i])
		}
	}
	for i := range uacB {
		if uacB[i] != uacD[i] {
			t.Errorf("to the caller, message %d:\non the bytes %q\ndecoded     %q", i, uacB[i], uacD[i])
		}
	}
	t.Run("REGISTER", testBytesPathRegisters)
}

// regCase is one REGISTER of TestBytesPathRegisters and whether the bytes
// path answers it without decoding.
type regCase struct {
	name    string
	msg     func(d *callDriver, nonce, stale string) []byte
	onBytes bool
}

// authRegister is a REGISTER of alice's from the UAC with a Contact at
// contact (a whole value), Expires expires (none when < 0) and, when
// password is set, her credentials for nonce with nonce-count nc.
func authRegister(d *callDriver, cseq int, contact string, expires int, password, nonce string, nc int, user string) []byte {
	const ruri = "sip:example.com"
	r := testkit.Register("sip:"+user+"@example.com", "", d.uac.String(), "reg-cmp", 0)
	r.Contact, r.Headers, r.CSeq, r.Rport = contact, nil, cseq, true
	if expires >= 0 {
		r.Headers = append(r.Headers, "Expires: "+strconv.Itoa(expires))
	}
	r.Headers = append(r.Headers, "User-Agent: bytes-test/1.0")
	if password != "" {
		ch := &digest.Challenge{Realm: "example.com", Nonce: nonce, Algorithm: "MD5", QOP: []string{"auth"}}
		cr, err := digest.Digest(ch, digest.Options{Method: "REGISTER", URI: ruri, Username: "alice", Password: password,
			Count: nc, Cnonce: "c0ffee"})
		if err != nil {
			panic(err)
		}
		r.Headers = append(r.Headers, "Authorization: "+cr.String())
	}
	return r.Bytes()
}

// A REGISTER handled on the bytes sends what it sends decoded: the same
// challenges, refusals and 200 OKs with the same Contacts, header for
// header, and leaves the same bindings and counts; a refresh of a binding
// with good credentials is handled without decoding, as are challenges.
func testBytesPathRegisters(t *testing.T) {
	ct := func(d *callDriver) string { return "<sip:alice@" + d.uac.String() + ">" }
	ct2 := func(d *callDriver) string { return "<sip:alice@" + d.uac.String() + ";transport=udp>" }
	cases := []regCase{
		{"challenge", func(d *callDriver, n, _ string) []byte { return authRegister(d, 1, ct(d), 3600, "", n, 0, "alice") }, true},
		{"new binding", func(d *callDriver, n, _ string) []byte {
			return authRegister(d, 2, ct(d), 3600, "alices", n, 1, "alice")
		}, false},
		{"refresh", func(d *callDriver, n, _ string) []byte {
			return authRegister(d, 3, ct(d), 3600, "alices", n, 2, "alice")
		}, true},
		{"refresh, expires param", func(d *callDriver, n, _ string) []byte {
			return authRegister(d, 4, ct(d)+";expires=1800", 3600, "alices", n, 3, "alice")
		}, true},
		{"refresh, default expiry", func(d *callDriver, n, _ string) []byte { return authRegister(d, 5, ct(d), -1, "alices", n, 4, "alice") }, true},
		{"wrong password", func(d *callDriver, n, _ string) []byte { return authRegister(d, 6, ct(d), 3600, "bobs", n, 5, "alice") }, true},
		{"replayed count", func(d *callDriver, n, _ string) []byte {
			return authRegister(d, 7, ct(d), 3600, "alices", n, 4, "alice")
		}, true},
		{"stale nonce", func(d *callDriver, _, s string) []byte {
			return authRegister(d, 8, ct(d), 3600, "alices", s, 1, "alice")
		}, true},
		{"another identity", func(d *callDriver, n, _ string) []byte {
			return authRegister(d, 9, ct(d), 3600, "alices", n, 6, "carol")
		}, true},
		{"second contact", func(d *callDriver, n, _ string) []byte {
			return authRegister(d, 10, ct2(d), 3600, "alices", n, 7, "alice")
		}, false},
		{"refresh beside another", func(d *callDriver, n, _ string) []byte {
			return authRegister(d, 11, ct(d), 3600, "alices", n, 8, "alice")
		}, true},
		{"unregister", func(d *callDriver, n, _ string) []byte {
			return authRegister(d, 12, ct2(d), 0, "alices", n, 9, "alice")
		}, false},
		{"bad wildcard", func(d *callDriver, n, _ string) []byte {
			return authRegister(d, 13, "*", 3600, "alices", n, 10, "alice")
		}, false},
		{"wildcard", func(d *callDriver, n, _ string) []byte { return authRegister(d, 14, "*", 0, "alices", n, 11, "alice") }, false},
		{"after the wildcard", func(d *callDriver, n, _ string) []byte {
			return authRegister(d, 15, ct(d), 3600, "alices", n, 12, "alice")
		}, false},
	}
	nonceRe := regexp.MustCompile(`nonce="[^"]*"`)
	run := func(routes string, onBytes bool) (replies []string, bindings string) {
		var stats Stats
		d := newCallDriverScript(t, routes)
		defer d.close()
		d.store.PutUser(location.NewUser("carol", "example.com", "carols"))
		_, secret, err := d.w.users()
		if err != nil {
			t.Fatal(err)
		}
		nonce := newNonce(secret, time.Now())
		stale := newNonce(secret, time.Now().Add(-time.Hour))
		buf := make([]byte, 65535)
		for _, c := range cases {
			d.w.fastCtx = nil
			d.msg(d.uac, c.msg(d, nonce, stale))
			if onBytes {
				if kept := d.w.fastCtx != nil; kept != c.onBytes {
					t.Errorf("%s: handled on the bytes: want %v, have %v", c.name, c.onBytes, kept)
				}
			}
			d.socks[1].SetReadDeadline(time.Now().Add(5 * time.Second))
			k, err := d.socks[1].Read(buf)
			if err != nil {
				t.Fatalf("%s: no reply: %v", c.name, err)
			}
			raw := nonceRe.ReplaceAll(buf[:k], []byte(`nonce="N"`))
			for i, p := range []uint16{d.pa.Port(), d.uac.Port(), d.uas.Port()} {
				raw = bytes.ReplaceAll(raw, []byte(strconv.Itoa(int(p))), []byte(strconv.Itoa(1111*(i+1))))
			}
			m, err := sip.ParseMessage(raw)
			if err != nil {
				t.Fatalf("%s: %v in %q", c.name, err, raw)
			}
			replies = append(replies, m.String())
			bs, err := d.store.Lookup("sip:alice@example.com")
			if err != nil {
				t.Fatal(err)
			}
			bindings += c.name + ":"
			for _, b := range bs {
				left := time.Until(b.Expires).Round(time.Minute)
				bindings += fmt.Sprintf(" %s %d %s %s %s %s %v;", b.Contact, b.CSeq, b.CallID, b.Received, b.Proto, b.UserAgent, left)
			}
			bindings += "\n"
		}
		bindings = strings.ReplaceAll(bindings, strconv.Itoa(int(d.uac.Port())), "2222")
		stats = d.w.Stats
		return append(replies, fmt.Sprintf("auth failures %d, replays %d, requests %d, malformed %d",
			stats.AuthFailures, stats.Replays, stats.Requests, stats.Malformed)), bindings
	}
	onB, bindB := run(callScript, true)
	dec, bindD := run(strings.Replace(callScript, "route {", "route {\n\t$var(decoded) = $ci;", 1), false)
	for i := range onB {
		name := "counts"
		if i < len(cases) {
			name = cases[i].name
		}
		if onB[i] != dec[i] {
			t.Errorf("%s:\non the bytes %q\ndecoded     %q", name, onB[i], dec[i])
		}
	}
	if bindB != bindD || bindB == "" {
		t.Errorf("bindings:\non the bytes %q\ndecoded     %q", bindB, bindD)
	}
}
