package wire

import (
	"net/netip"
	"testing"
)

func TestPassRequestRoundTrip(t *testing.T) {
	t.Parallel()
	to, from := netip.MustParseAddrPort("127.0.0.1:40000"), netip.MustParseAddrPort("[2001:db8::1]:5060")
	sock, gotTo, gotFrom, msg, ok := ParsePassRequest(PassRequest(3, to, from, []byte("BYE sip:a SIP/2.0\r\n\r\n")))
	if !ok || sock != 3 || gotTo != to || gotFrom != from || string(msg) != "BYE sip:a SIP/2.0\r\n\r\n" {
		t.Errorf("want 3 %v %v and the message, have %v %d %v %v %q", to, from, ok, sock, gotTo, gotFrom, msg)
	}
	for _, b := range [][]byte{nil, []byte("PAS1"), AdmitRequest(1, []byte("x")), PassRequest(0, to, from, nil)} {
		if _, _, _, _, ok := ParsePassRequest(b); ok {
			t.Errorf("%q: want not a pass request", b)
		}
	}
	f := MessageFrame(2, from, 7, []byte("x"))
	if s, a, at := ParseMsgHeader(f); s != 2 || a != from || at != 7 || string(f[MsgHeaderLen:]) != "x" {
		t.Errorf("frame: want 2 %v 7 x, have %d %v %d %q", from, s, a, at, f[MsgHeaderLen:])
	}
}
