package loadgen

import (
	"testing"

	"github.com/sipvisor/sipvisor/internal/sipscan"
)

// Every request sipload's built-in scenarios send must get past sipvisor's
// front door: a REGISTER whose From tag carried the Call-ID's "@" was once
// answered 400 there.
func TestRequestsPassTheFrontDoorScanner(t *testing.T) {
	t.Parallel()
	for _, name := range []string{"uac", "register", "options"} {
		o := Options{Scenario: name, Target: "127.0.0.1:5060", AuthUser: "bob", Users: 2}
		if err := o.defaults(); err != nil {
			t.Fatal(err)
		}
		e := newEndpoint("127.0.0.1", 5070, "127.0.0.1:5060", "UDP", "service", "run")
		x := &xrole{core: &core{o: &o, ep: e}, sc: o.XML, pid: "7", remIP: "127.0.0.1", remPort: 5060, locPort: 5070}
		cl := &call{n: 42, callID: x.callID(42), x: &xstate{cseq: 1, peerTag: []byte("t1"), routes: []byte{},
			nextURL: []byte("sip:service@127.0.0.1:5080"), vars: make([]xvar, len(o.XML.vars))}}
		for i, c := range o.XML.cmds {
			if c.kind != cmdSend {
				continue
			}
			b, err := x.build(nil, cl, c.msg, c, i)
			if err != nil {
				t.Fatalf("%s: %s: %v", name, c.method, err)
			}
			var m sipscan.Msg
			if err := sipscan.Scan(b, &m); err != nil {
				t.Errorf("%s: %s: want it scanned, have %v\n%s", name, c.method, err, b)
			}
		}
	}
}
