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

func TestWriteRequestRoundTrip(t *testing.T) {
	to := netip.MustParseAddrPort("127.0.0.1:40123")
	msg := []byte("INVITE sip:a@b.invalid SIP/2.0\r\n\r\n")
	flags, gotTo, gotMsg, ok := ParseWriteRequest(WriteRequest(FlowOutbound, to, msg))
	if !ok || flags != FlowOutbound || gotTo != to || string(gotMsg) != string(msg) {
		t.Fatalf("ParseWriteRequest = %d %v %q %v", flags, gotTo, gotMsg, ok)
	}
	flags, gotTo, gotMsg, ok = ParseWriteFrame(WriteFrame(0, to, msg))
	if !ok || flags != 0 || gotTo != to || string(gotMsg) != string(msg) {
		t.Fatalf("ParseWriteFrame = %d %v %q %v", flags, gotTo, gotMsg, ok)
	}
	if _, _, _, ok := ParseWriteRequest(PassRequest(0, to, to, msg)); ok {
		t.Fatal("a pass request read as a write request")
	}
	if _, _, _, ok := ParseWriteRequest([]byte("WRT1")); ok {
		t.Fatal("a truncated write request read")
	}
}
