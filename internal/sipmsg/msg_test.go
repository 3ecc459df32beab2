package sipmsg

import (
	"bytes"
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/sipvisor/sipvisor/internal/sipscan"
)

func crlf(s string) []byte { return []byte(strings.ReplaceAll(s, "\n", "\r\n")) }

const bye = `BYE sip:bob@10.0.0.2:5062 SIP/2.0
Via: SIP/2.0/UDP 10.0.0.1:5070;branch=z9hG4bK-1;rport
Via: SIP/2.0/UDP 10.0.0.9;branch=z9hG4bK-0
Route: <sip:192.0.2.1;lr>, <sip:192.0.2.2;lr>
Route: <sip:192.0.2.3;lr>
Max-Forwards: 70
From: <sip:alice@example.com>;tag=a
To: <sip:bob@example.com>;tag=b
Call-ID: c1
CSeq: 2 BYE
Content-Length: 4

body`

// The splice writer changes what a proxy changes and leaves every other
// byte as it came.
func TestSplice(t *testing.T) {
	var m Msg
	if err := m.Parse(crlf(bye)); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		s    Splice
		want string
	}{
		{"nothing", Splice{MaxForwards: -1}, bye},
		{"a Via, received and rport, Max-Forwards down, one Route out",
			Splice{Via: []byte("Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK-x\r\n"), Received: []byte("10.0.0.7"), Rport: 5071,
				MaxForwards: 69, DropRoutes: 1},
			`BYE sip:bob@10.0.0.2:5062 SIP/2.0
Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK-x
Via: SIP/2.0/UDP 10.0.0.1:5070;branch=z9hG4bK-1;rport=5071;received=10.0.0.7
Via: SIP/2.0/UDP 10.0.0.9;branch=z9hG4bK-0
Route: <sip:192.0.2.2;lr>
Route: <sip:192.0.2.3;lr>
Max-Forwards: 69
From: <sip:alice@example.com>;tag=a
To: <sip:bob@example.com>;tag=b
Call-ID: c1
CSeq: 2 BYE
Content-Length: 4

body`},
		{"two Routes out, Record-Route in",
			Splice{RecordRoute: [2][]byte{[]byte("Record-Route: <sip:192.0.2.1;lr>\r\n")}, MaxForwards: -1, DropRoutes: 2},
			`BYE sip:bob@10.0.0.2:5062 SIP/2.0
Record-Route: <sip:192.0.2.1;lr>
Via: SIP/2.0/UDP 10.0.0.1:5070;branch=z9hG4bK-1;rport
Via: SIP/2.0/UDP 10.0.0.9;branch=z9hG4bK-0
Route: <sip:192.0.2.3;lr>
Max-Forwards: 70
From: <sip:alice@example.com>;tag=a
To: <sip:bob@example.com>;tag=b
Call-ID: c1
CSeq: 2 BYE
Content-Length: 4

body`},
		{"every Route out", Splice{MaxForwards: -1, DropRoutes: 5}, strings.Replace(bye,
			"Route: <sip:192.0.2.1;lr>, <sip:192.0.2.2;lr>\nRoute: <sip:192.0.2.3;lr>\n", "", 1)},
	} {
		have := m.AppendSplice(nil, &c.s)
		if want := crlf(c.want); !bytes.Equal(have, want) {
			t.Errorf("%s:\nwant %q\nhave %q", c.name, want, have)
		}
	}
	var n Msg
	if err := n.Parse(crlf("ACK sip:b@h SIP/2.0\nv: SIP/2.0/TCP h;branch=z9hG4bK-2;received=1.1.1.1\nf: <sip:a@h>;tag=1\nt: <sip:b@h>;tag=2\ni: x\nCSeq: 1 ACK\n\n")); err != nil {
		t.Fatal(err)
	}
	have := n.AppendSplice(nil, &Splice{Received: []byte("10.0.0.7"), MaxForwards: 70, ContentLength: true})
	want := crlf("ACK sip:b@h SIP/2.0\nv: SIP/2.0/TCP h;branch=z9hG4bK-2;received=10.0.0.7\nf: <sip:a@h>;tag=1\nt: <sip:b@h>;tag=2\ni: x\nCSeq: 1 ACK\nMax-Forwards: 70\nContent-Length: 0\n\n")
	if !bytes.Equal(have, want) {
		t.Errorf("compact headers:\nwant %q\nhave %q", want, have)
	}
	if a := testing.AllocsPerRun(100, func() { have = m.AppendSplice(have[:0], &Splice{MaxForwards: 69, DropRoutes: 1}) }); a != 0 {
		t.Errorf("AppendSplice with room: want 0 allocations, have %v", a)
	}
	raw := crlf(bye)
	if a := testing.AllocsPerRun(100, func() { m.Parse(raw) }); a != 0 {
		t.Errorf("Parse: want 0 allocations, have %v", a)
	}
}

func TestParseErrors(t *testing.T) {
	var m Msg
	for _, c := range []struct {
		in   string
		want sipscan.Error
	}{
		{"", sipscan.ErrEmpty},
		{"BYE sip:b@h SIP/2.0\nVia: SIP/2.0/UDP h\n", sipscan.ErrTruncated},
		{"BYE sip:b@h SIP/2.0\nCall-ID: x\n\n", sipscan.ErrNoCSeq},
	} {
		err := m.Parse(crlf(c.in))
		if !errors.Is(err, c.want) {
			t.Errorf("%q: want %v, have %v", c.in, c.want, err)
		}
	}
}

func TestURI(t *testing.T) {
	for _, c := range []struct {
		in, scheme, user, host string
		port                   int
		lr, ok                 bool
	}{
		{"sip:bob@10.0.0.2:5062;lr", "sip", "bob", "10.0.0.2", 5062, true, true},
		{"sips:example.com", "sips", "", "example.com", 0, false, true},
		{"sip:[::1]:5060;transport=tcp;lr", "sip", "", "[::1]", 5060, true, true},
		{"sip:a:pw@h;lr?x=y", "sip", "a", "h", 0, true, true},
		{"tel:+123", "", "", "", 0, false, false},
		{"sip:h:99999", "", "", "", 0, false, false},
		{"sip:[::1", "", "", "", 0, false, false},
		{"sip:@", "", "", "", 0, false, false},
	} {
		u, ok := ParseURI(AddrSpec([]byte("<" + c.in + ">")))
		if ok != c.ok {
			t.Errorf("%q: want ok %v, have %v", c.in, c.ok, ok)
			continue
		}
		if !ok {
			continue
		}
		_, lr := u.Param("lr")
		if string(u.Scheme) != c.scheme || string(u.User) != c.user || string(u.Host) != c.host || u.Port != c.port || lr != c.lr {
			t.Errorf("%q: have %q %q %q %d lr %v", c.in, u.Scheme, u.User, u.Host, u.Port, lr)
		}
	}
}

func TestIPv4(t *testing.T) {
	for in, want := range map[string]bool{"127.0.0.1": true, "10.0.0.255": true, "0.0.0.0": true,
		"256.0.0.1": false, "1.2.3": false, "1.2.3.4.5": false, "01.2.3.4": false, "1..2.3": false, "": false, "a.b.c.d": false, "1.2.3.4.": false} {
		a, ok := IPv4([]byte(in))
		if ok != want {
			t.Errorf("%q: want %v, have %v", in, want, ok)
		}
		if ok && netip.AddrFrom4(a).String() != in {
			t.Errorf("%q: have %v", in, netip.AddrFrom4(a))
		}
	}
}

// A reply's top Via as force_rport leaves it: rport set whatever value it
// came with, and rport and received added, in the order asked, when absent;
// the extra lines of a reply go between its head and its end.
func TestReplyForceRport(t *testing.T) {
	for _, c := range []struct {
		via   string
		first bool
		want  string
	}{
		{"10.0.0.1:5070;branch=z9hG4bK-1;rport=7", false, "10.0.0.1:5070;branch=z9hG4bK-1;rport=5071;received=10.0.0.7"},
		{"10.0.0.1:5070;branch=z9hG4bK-1", false, "10.0.0.1:5070;branch=z9hG4bK-1;received=10.0.0.7;rport=5071"},
		{"10.0.0.1:5070;branch=z9hG4bK-1", true, "10.0.0.1:5070;branch=z9hG4bK-1;rport=5071;received=10.0.0.7"},
		{"10.0.0.1:5070;received=9.9.9.9;branch=z9hG4bK-1", true, "10.0.0.1:5070;received=10.0.0.7;branch=z9hG4bK-1;rport=5071"},
	} {
		var m Msg
		if err := m.Parse(crlf("REGISTER sip:h SIP/2.0\nVia: SIP/2.0/UDP " + c.via + "\nFrom: <sip:a@h>;tag=1\nTo: <sip:a@h>\nCall-ID: x\nCSeq: 1 REGISTER\n\n")); err != nil {
			t.Fatal(err)
		}
		s := Splice{Received: []byte("10.0.0.7"), Rport: 5071, ForceRport: true, RportFirst: c.first}
		have := AppendReplyEnd(append(m.AppendReplyHead(nil, 200, "OK", &s, []byte("t")), "Contact: <sip:a@h>\r\n"...))
		want := crlf("SIP/2.0 200 OK\nVia: SIP/2.0/UDP " + c.want + "\nFrom: <sip:a@h>;tag=1\nTo: <sip:a@h>;tag=t\nCall-ID: x\nCSeq: 1 REGISTER\n" +
			"Contact: <sip:a@h>\nServer: sipvisor\nContent-Length: 0\n\n")
		if !bytes.Equal(have, want) {
			t.Errorf("%s:\nwant %q\nhave %q", c.via, want, have)
		}
	}
}
