package engine

import (
	"testing"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/overload"
)

// A request read from a connection is classified for admission as the
// front door classifies the same bytes read from a datagram: one
// classifier, whichever parse fed it.
func TestAdmissionClassOverConnections(t *testing.T) {
	t.Parallel()
	via := "127.0.0.1:5070"
	reg := func(callID string, expires int) testkit.Request {
		r := testkit.Register("sip:alice@example.com", "sip:alice@127.0.0.1:5070", via, callID, expires)
		r.Transport = "TCP"
		return r
	}
	with := func(r testkit.Request, f func(*testkit.Request)) testkit.Request { f(&r); return r }
	invite := testkit.Invite("sip:bob@example.com", via, "call")
	for _, c := range []struct {
		name string
		r    testkit.Request
		want overload.Class
	}{
		{"INVITE", invite, overload.ClassNew},
		{"re-INVITE", with(invite, func(r *testkit.Request) { r.ToTag = "b" }), overload.ClassExisting},
		{"SUBSCRIBE", with(invite, func(r *testkit.Request) { r.Method = "SUBSCRIBE" }), overload.ClassNew},
		{"REGISTER", reg("new", 3600), overload.ClassRegister},
		{"REGISTER removal", reg("gone", 0), overload.ClassRemoval},
		{"REGISTER without Expires", with(reg("x", 0), func(r *testkit.Request) { r.Headers = nil }), overload.ClassRegister},
		{"probe", testkit.Options("sip:127.0.0.1", via, "p"), overload.ClassProbe},
		{"OPTIONS to a user", testkit.Options("sip:bob@example.com", via, "o"), overload.ClassExisting},
		{"MESSAGE", with(invite, func(r *testkit.Request) { r.Method = "MESSAGE" }), overload.ClassExisting},
		{"CANCEL", with(invite, func(r *testkit.Request) { r.Method = "CANCEL" }), overload.ClassExisting},
	} {
		b := c.r.Bytes()
		var m sipscan.Msg
		if err := sipscan.Scan(b, &m); err != nil {
			t.Fatalf("%s: scan: %v", c.name, err)
		}
		parsed, err := sip.ParseMessage(b)
		if err != nil {
			t.Fatalf("%s: parse: %v", c.name, err)
		}
		overConn, _ := overload.Classify(admissionRequest(parsed.(*sip.Request)))
		overUDP, _ := overload.Classify(overload.RequestOf(&m))
		if overConn != c.want || overUDP != c.want {
			t.Errorf("%s: want %v, have %v over a connection and %v over UDP", c.name, c.want, overConn, overUDP)
		}
	}
}
