package engine

import (
	"bytes"
	"fmt"
	"net"
	"net/netip"
	"path/filepath"
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
	t.Run("TCP", testBytesPathOverTCP)
}

// regCase is one REGISTER of testBytesPathRegisters: its CSeq, Contact
// (a whole value; alice's at the UAC when empty), Expires (none when < 0),
// user, password (no credentials when empty), nonce-count and whether it
// uses a stale nonce; and whether the bytes path answers it without
// decoding.
type regCase struct {
	name     string
	contact  string
	expires  int
	user     string
	password string
	nc       int
	stale    bool
	onBytes  bool
}

// regMode is how testBytesPathRegisters runs its REGISTERs: the routes
// before callScript's, the top Via's sent-by ("" for the UAC's address)
// and whether it asks for rport, the store.
type regMode struct {
	name   string
	prefix string
	via    string
	rport  bool
	sqlite bool
}

// authRegister is the REGISTER c describes, from the UAC, with the
// credentials for nonce.
func authRegister(d *callDriver, mode *regMode, cseq int, c *regCase, nonce string) []byte {
	const ruri = "sip:example.com"
	via := mode.via
	if via == "" {
		via = d.uac.String()
	}
	r := testkit.Register("sip:"+c.user+"@example.com", "", via, "reg-cmp", 0)
	r.Contact, r.Headers, r.CSeq, r.Rport = c.contact, nil, cseq, mode.rport
	if r.Contact == "" {
		r.Contact = "<sip:alice@" + d.uac.String() + ">"
	}
	if c.expires >= 0 {
		r.Headers = append(r.Headers, "Expires: "+strconv.Itoa(c.expires))
	}
	r.Headers = append(r.Headers, "User-Agent: bytes-test/1.0")
	if c.password != "" {
		ch := &digest.Challenge{Realm: "example.com", Nonce: nonce, Algorithm: "MD5", QOP: []string{"auth"}}
		cr, err := digest.Digest(ch, digest.Options{Method: "REGISTER", URI: ruri, Username: "alice", Password: c.password,
			Count: c.nc, Cnonce: "c0ffee"})
		if err != nil {
			panic(err)
		}
		r.Headers = append(r.Headers, "Authorization: "+cr.String())
	}
	return r.Bytes()
}

// A REGISTER handled on the bytes sends what it sends decoded: the same
// challenges, refusals and 200 OKs with the same Contacts, header for
// header, and leaves the same bindings and counts, into the memory store
// (which refreshes a binding in place) written at once, and into SQLite
// with group commit (REGISTERs held to the end of the loop's turn).
func testBytesPathRegisters(t *testing.T) {
	const udp = "<sip:alice@@UAC@;transport=udp>"
	cases := []regCase{
		{name: "challenge", expires: 3600, user: "alice", onBytes: true},
		{name: "new binding", expires: 3600, user: "alice", password: "alices", nc: 1, onBytes: true},
		{name: "refresh", expires: 3600, user: "alice", password: "alices", nc: 2, onBytes: true},
		{name: "refresh, expires param", contact: "<sip:alice@@UAC@>;expires=1800", expires: 3600, user: "alice", password: "alices", nc: 3, onBytes: true},
		{name: "refresh, default expiry", expires: -1, user: "alice", password: "alices", nc: 4, onBytes: true},
		{name: "wrong password", expires: 3600, user: "alice", password: "bobs", nc: 5, onBytes: true},
		{name: "replayed count", expires: 3600, user: "alice", password: "alices", nc: 4, onBytes: true},
		{name: "stale nonce", expires: 3600, user: "alice", password: "alices", nc: 1, stale: true, onBytes: true},
		{name: "another identity", expires: 3600, user: "carol", password: "alices", nc: 6, onBytes: true},
		{name: "second contact", contact: udp, expires: 3600, user: "alice", password: "alices", nc: 7, onBytes: true},
		{name: "refresh beside another", expires: 3600, user: "alice", password: "alices", nc: 8, onBytes: true},
		{name: "unregister", contact: udp, expires: 0, user: "alice", password: "alices", nc: 9, onBytes: true},
		{name: "bad wildcard", contact: "*", expires: 3600, user: "alice", password: "alices", nc: 10},
		{name: "wildcard", contact: "*", expires: 0, user: "alice", password: "alices", nc: 11},
		{name: "display name", contact: `"Alice" <sip:alice@@UAC@>`, expires: 3600, user: "alice", password: "alices", nc: 12, onBytes: true},
		{name: "not as sipgo writes it", contact: "<SIP:alice@@UAC@>", expires: 3600, user: "alice", password: "alices", nc: 13},
		{name: "outbound", contact: `<sip:alice@@UAC@>;+sip.instance="<urn:uuid:1>";reg-id=1`, expires: 3600, user: "alice", password: "alices", nc: 14},
		{name: "two contacts", contact: "<sip:alice@@UAC@>, " + udp, expires: 3600, user: "alice", password: "alices", nc: 15},
		{name: "the last refresh", expires: 3600, user: "alice", password: "alices", nc: 16, onBytes: true},
	}
	nonceRe := regexp.MustCompile(`nonce="[^"]*"`)
	run := func(mode *regMode, decoded bool) (replies []string, bindings string) {
		routes := strings.Replace(callScript, "route {", "route {\n"+mode.prefix, 1)
		if decoded {
			routes = strings.Replace(routes, "route {", "route {\n\t$var(decoded) = $ci;", 1)
		}
		onBytes, sqlite := !decoded, mode.sqlite
		d := newCallDriverScript(t, routes)
		defer d.close()
		var st location.Store = d.store
		if sqlite {
			sq, err := location.Open(location.Spec{Kind: location.KindSQLite, Path: filepath.Join(t.TempDir(), "location.db")})
			if err != nil {
				t.Fatal(err)
			}
			defer sq.Close()
			st = sq
			d.w.opt.Store, d.w.opt.GroupCommit = sq, true
		}
		users, err := location.UsersOf(st)
		if err != nil {
			t.Fatal(err)
		}
		users.PutUser(location.NewUser("alice", "example.com", "alices"))
		users.PutUser(location.NewUser("carol", "example.com", "carols"))
		_, secret, err := d.w.users()
		if err != nil {
			t.Fatal(err)
		}
		nonce := newNonce(secret, time.Now())
		stale := newNonce(secret, time.Now().Add(-time.Hour))
		for i, c := range cases {
			c.contact = strings.ReplaceAll(c.contact, "@UAC@", d.uac.String())
			n := nonce
			if c.stale {
				n = stale
			}
			d.w.fastCtx = nil
			d.msg(d.uac, authRegister(d, mode, i+1, &c, n))
			if onBytes {
				if kept := d.w.fastCtx != nil; kept != c.onBytes {
					t.Errorf("%s: handled on the bytes: want %v, have %v", c.name, c.onBytes, kept)
				}
			}
			// Group commit: two REGISTERs of a turn share a write.
			if i%2 == 1 {
				d.w.EndTurn()
			}
			bs, err := st.Lookup("sip:alice@example.com")
			if err != nil {
				t.Fatal(err)
			}
			bindings += c.name + ":"
			for _, b := range bs {
				left := time.Until(b.Expires).Round(time.Minute)
				bindings += fmt.Sprintf(" %s %d %s %s %s %s %s %v;", b.Contact, b.CSeq, b.CallID, b.Received, b.Proto, b.UserAgent, b.Instance, left)
			}
			bindings += "\n"
		}
		d.w.EndTurn()
		buf := make([]byte, 65535)
		for range cases {
			d.socks[1].SetReadDeadline(time.Now().Add(5 * time.Second))
			k, err := d.socks[1].Read(buf)
			if err != nil {
				t.Fatalf("%d replies: %v", len(replies), err)
			}
			raw := nonceRe.ReplaceAll(buf[:k], []byte(`nonce="N"`))
			for i, p := range []uint16{d.pa.Port(), d.uac.Port(), d.uas.Port()} {
				raw = bytes.ReplaceAll(raw, []byte(strconv.Itoa(int(p))), []byte(strconv.Itoa(1111*(i+1))))
			}
			m, err := sip.ParseMessage(raw)
			if err != nil {
				t.Fatalf("%v in %q", err, raw)
			}
			replies = append(replies, m.String())
		}
		bindings = strings.ReplaceAll(bindings, strconv.Itoa(int(d.uac.Port())), "2222")
		s := d.w.Stats
		return append(replies, fmt.Sprintf("auth failures %d, replays %d, requests %d, malformed %d, store errors %d",
			s.AuthFailures, s.Replays, s.Requests, s.Malformed, s.StoreErrors)), bindings
	}
	// The built-in config's NAT test: a phone whose Via names its private
	// address is answered at its source, and filed with it.
	const nat = "\tif (nat_uac_test(3)) {\n\t\tforce_rport();\n\t\tif (is_method(\"REGISTER\"))\n\t\t\tfix_nated_register();\n\t}\n"
	for _, mode := range []regMode{
		{name: "memory", rport: true},
		{name: "sqlite, group commit", rport: true, sqlite: true},
		{name: "behind NAT", prefix: nat, via: "10.0.0.5:5060", rport: true},
		{name: "behind NAT, no rport", prefix: nat, via: "10.0.0.5:5062", sqlite: true},
		{name: "force_rport, same host", prefix: "\tforce_rport();\n", via: "127.0.0.1:5062"},
		{name: "force_rport twice, rport", prefix: "\tforce_rport();\n\tforce_rport();\n", via: "127.0.0.1:5062", rport: true},
	} {
		onB, bindB := run(&mode, false)
		dec, bindD := run(&mode, true)
		for i := range onB {
			if onB[i] != dec[i] {
				t.Errorf("%s, reply %d:\non the bytes %q\ndecoded     %q", mode.name, i, onB[i], dec[i])
			}
		}
		if bindB != bindD {
			t.Errorf("%s, bindings:\non the bytes %q\ndecoded     %q", mode.name, bindB, bindD)
		}
	}
}
