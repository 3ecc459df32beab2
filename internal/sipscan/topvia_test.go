package sipscan

import (
	"strings"
	"testing"
)

// A proxy forwards a response without its own Via: the first value of the
// first Via header, and the header line too when it held only that value;
// every other byte stays as it came.
func TestWithoutTopVia(t *testing.T) {
	t.Parallel()
	head := "SIP/2.0 180 Ringing\r\n"
	rest := "From: <sip:a@b>;tag=1\r\nTo: <sip:c@d>;tag=2\r\nCall-ID: x\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n"
	for _, c := range []struct{ name, vias, want string }{
		{"own line", "Via: SIP/2.0/UDP p:5060;branch=z9hG4bKp\r\nVia: SIP/2.0/UDP u:5070;branch=z9hG4bKu\r\n",
			"Via: SIP/2.0/UDP u:5070;branch=z9hG4bKu\r\n"},
		{"first of a list", "Via: SIP/2.0/UDP p:5060;branch=z9hG4bKp, SIP/2.0/UDP u:5070;branch=z9hG4bKu\r\n",
			"Via: SIP/2.0/UDP u:5070;branch=z9hG4bKu\r\n"},
		{"list, spaces around the comma", "Via: SIP/2.0/UDP p;branch=z9hG4bKp ,  SIP/2.0/UDP u;branch=z9hG4bKu\r\n",
			"Via: SIP/2.0/UDP u;branch=z9hG4bKu\r\n"},
		{"list folded after the comma", "Via: SIP/2.0/UDP p;branch=z9hG4bKp,\r\n SIP/2.0/UDP u;branch=z9hG4bKu\r\n",
			"Via: SIP/2.0/UDP u;branch=z9hG4bKu\r\n"},
		{"compact form", "v: SIP/2.0/UDP p;branch=z9hG4bKp\r\nv: SIP/2.0/UDP u;branch=z9hG4bKu\r\n",
			"v: SIP/2.0/UDP u;branch=z9hG4bKu\r\n"},
		{"only one", "Via: SIP/2.0/UDP p;branch=z9hG4bKp\r\n", ""},
		{"IPv6 sent-by", "Via: SIP/2.0/UDP [::1]:5060;branch=z9hG4bKp,SIP/2.0/UDP u;branch=z9hG4bKu\r\n",
			"Via: SIP/2.0/UDP u;branch=z9hG4bKu\r\n"},
	} {
		t.Run(c.name, func(t *testing.T) {
			in := []byte(head + c.vias + rest)
			var m Msg
			if err := Scan(in, &m); err != nil {
				t.Fatal(err)
			}
			if got, want := string(m.WithoutTopVia(in)), head+c.want+rest; got != want {
				t.Fatalf("want\n%q\nhave\n%q", want, got)
			}
			if !strings.HasPrefix(string(in), head+c.vias) {
				t.Fatal("the input was changed")
			}
		})
	}
}
