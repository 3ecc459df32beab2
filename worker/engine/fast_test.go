package engine

import (
	"bytes"
	"net"
	"net/netip"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/internal/sipmsg"
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
}
