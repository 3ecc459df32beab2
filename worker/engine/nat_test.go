package engine

import (
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/location"
)

// A phone at 192.168.1.20:5060 behind a router that maps it to
// 203.0.113.7:40123: what nat_uac_test's flags see.
const natInvite = `INVITE sip:bob@127.0.0.1 SIP/2.0
Via: SIP/2.0/UDP 192.168.1.20:5060;branch=z9hG4bK-n;rport
From: <sip:alice@example.com>;tag=a
To: <sip:bob@example.com>
Call-ID: nat@x
CSeq: 1 INVITE
Contact: <sip:alice@192.168.1.20:5060>
Content-Type: application/sdp
Content-Length: 40

v=0
c=IN IP4 192.168.1.20
m=audio 4000 RTP/AVP 0
`

func natCtx(t *testing.T, raw, from string) *msgCtx {
	t.Helper()
	r := runOn(t, `route { exit; }`, fixture)
	m, err := sip.ParseMessage([]byte(strings.ReplaceAll(raw, "\n", "\r\n")))
	if err != nil {
		t.Fatal(err)
	}
	return r.w.newCtx(m.(*sip.Request), nil, source{proto: "udp", addr: netip.MustParseAddrPort(from), sock: -1})
}

func TestNatUACTest(t *testing.T) {
	t.Parallel()
	public := "203.0.113.7:40123"
	direct := strings.NewReplacer("192.168.1.20:5060", "203.0.113.7:40123", "192.168.1.20", "203.0.113.7").Replace(natInvite)
	for _, c := range []struct {
		name  string
		raw   string
		from  string
		flags int
		want  bool
	}{
		{"1 private Contact", natInvite, public, 1, true},
		{"2 Via address not the source", natInvite, public, 2, true},
		{"4 private Via", natInvite, public, 4, true},
		{"8 private SDP", natInvite, public, 8, true},
		{"16 Via port not the source port", natInvite, public, 16, true},
		{"32 private source", natInvite, public, 32, false},
		{"32 private source, from a CGNAT address", natInvite, "100.64.1.1:5060", 32, true},
		{"64 WebSocket, over UDP", natInvite, public, 64, false},
		{"128 Contact port not the source port", natInvite, public, 128, true},
		{"256 SDP address not the source", natInvite, public, 256, true},
		{"19 on a phone with a public address", direct, public, 19, false},
		{"511 on a phone with a public address", direct, public, 511 &^ 64, false},
		{"the same from where it says it is", natInvite, "192.168.1.20:5060", 2 | 16 | 128 | 256, false},
		{"3 behind NAT", natInvite, public, 3, true},
	} {
		ctx := natCtx(t, c.raw, c.from)
		if have := ctx.natTest(c.flags); have != c.want {
			t.Errorf("%s: nat_uac_test(%d): want %v, have %v", c.name, c.flags, c.want, have)
		}
	}
}

// fix_nated_contact points the Contact at the source; fix_nated_register
// has save() record it, lookup() route there ($du), and the keep-alives
// find it; a binding saved without it keeps its plain source and no $du.
func TestFixNated(t *testing.T) {
	t.Parallel()
	c := natCtx(t, natInvite, "203.0.113.7:40123")
	if !fnFixNatedContact(c, nil) || c.req.Contact().Address.String() != "sip:alice@203.0.113.7:40123" {
		t.Fatalf("fix_nated_contact: want the Contact at the source, have %s", c.req.Contact().Address.String())
	}
	if fnFixNatedRegister(c, nil) {
		t.Fatal("fix_nated_register on an INVITE: want false")
	}

	reg := `REGISTER sip:127.0.0.1 SIP/2.0
Via: SIP/2.0/UDP 192.168.1.20:5060;branch=z9hG4bK-r
From: <sip:alice@127.0.0.1>;tag=b
To: <sip:alice@127.0.0.1>
Call-ID: reg@x
CSeq: 1 REGISTER
Contact: <sip:alice@192.168.1.20:5060>
Expires: 60
Content-Length: 0

`
	c = natCtx(t, reg, "203.0.113.7:40123")
	w := c.w
	if !fnFixNatedRegister(c, nil) || !fnSave(c, nil) {
		t.Fatal("fix_nated_register and save: want true")
	}
	bs, _ := w.opt.Store.Lookup("sip:alice@127.0.0.1")
	if len(bs) != 1 || bs[0].Received != "sip:203.0.113.7:40123" || bs[0].Contact != "sip:alice@192.168.1.20:5060" {
		t.Fatalf("want the private contact kept and the source recorded as a URI, have %+v", bs)
	}
	inv := strings.NewReplacer("Contact: <sip:alice@192.168.1.20:5060>", "Contact: <sip:carol@127.0.0.1:5090>",
		"INVITE sip:bob@127.0.0.1", "INVITE sip:alice@127.0.0.1").Replace(natInvite)
	m, _ := sip.ParseMessage([]byte(strings.ReplaceAll(inv, "\n", "\r\n")))
	lc := w.newCtx(m.(*sip.Request), nil, source{proto: "udp", addr: netip.MustParseAddrPort("127.0.0.1:5090"), sock: -1})
	if !fnLookup(lc, nil) || lc.req.Recipient.String() != "sip:alice@192.168.1.20:5060" || lc.du != "sip:203.0.113.7:40123" {
		t.Fatalf("lookup: want $ru the contact and $du its received address, have %s and %q", lc.req.Recipient.String(), lc.du)
	}

	// Without fix_nated_register: the plain source, and no $du.
	c = natCtx(t, strings.ReplaceAll(reg, "alice", "dave"), "203.0.113.7:40124")
	fnSave(c, nil)
	bs, _ = c.w.opt.Store.Lookup("sip:dave@127.0.0.1")
	if len(bs) != 1 || bs[0].Received != "203.0.113.7:40124" {
		t.Fatalf("want the source as ip:port, have %+v", bs)
	}
	m, _ = sip.ParseMessage([]byte(strings.ReplaceAll(strings.ReplaceAll(inv, "alice@127.0.0.1", "dave@127.0.0.1"), "\n", "\r\n")))
	lc = c.w.newCtx(m.(*sip.Request), nil, source{proto: "udp", addr: netip.MustParseAddrPort("127.0.0.1:5090"), sock: -1})
	if !fnLookup(lc, nil) || lc.du != "" {
		t.Fatalf("lookup of a binding saved without fix_nated_register: want no $du, have %q", lc.du)
	}
}

func TestSDPAddrs(t *testing.T) {
	t.Parallel()
	body := []byte("v=0\r\nc=IN IP4 10.1.1.1\r\nm=audio 1 RTP/AVP 0\r\nc=IN IP4 224.2.1.1/127\r\nc=bad\r\n")
	if have := strings.Join(sdpAddrs(body), ","); have != "10.1.1.1,224.2.1.1" {
		t.Fatalf("want both c= addresses, have %q", have)
	}
}

// The keep-alive job sends an OPTIONS (or two CRLFs) from the SIP socket to
// each binding saved after fix_nated_register over UDP, and nothing to the
// others.
func TestNATKeepalive(t *testing.T) {
	t.Parallel()
	for _, method := range []string{"OPTIONS", "CRLF"} {
		w, st, _ := groupWorker(t, `route { exit; }`)
		w.opt.NATKeepaliveMethod = method
		phone, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer phone.Close()
		other, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		exp := time.Now().Add(time.Hour)
		st.Save("sip:alice@example.com", location.Binding{Contact: "sip:alice@192.168.1.20:5060", Expires: exp, Proto: "udp",
			Received: "sip:" + phone.LocalAddr().String()})
		st.Save("sip:bob@example.com", location.Binding{Contact: "sip:bob@192.168.1.21:5060", Expires: exp, Proto: "udp",
			Received: other.LocalAddr().String()})
		w.HandleJob(wire.JobNATKeepalive)
		buf := make([]byte, 2048)
		phone.SetReadDeadline(time.Now().Add(5 * time.Second))
		n, from, err := phone.ReadFromUDP(buf)
		if err != nil {
			t.Fatalf("%s: want a keep-alive at the phone's received address: %v", method, err)
		}
		got := string(buf[:n])
		if method == "CRLF" && got != "\r\n\r\n" || method == "OPTIONS" && !strings.HasPrefix(got, "OPTIONS sip:alice@192.168.1.20:5060 SIP/2.0\r\n") {
			t.Errorf("%s: want the keep-alive, have %q", method, got)
		}
		if from.AddrPort() != w.udpLocal[0] {
			t.Errorf("%s: want it from the SIP socket %v, have %v", method, w.udpLocal[0], from)
		}
		// Sent, if at all, before HandleJob returned: over loopback it
		// would be queued at the socket already.
		other.SetReadDeadline(time.Now().Add(200 * time.Millisecond))
		if _, _, err := other.ReadFromUDP(buf); err == nil {
			t.Errorf("%s: a binding saved without fix_nated_register got a keep-alive", method)
		}
	}
}
