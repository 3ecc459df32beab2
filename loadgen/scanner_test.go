package loadgen

import (
	"testing"

	"github.com/sipvisor/sipvisor/internal/sipscan"
)

// Every request sipload sends must get past sipvisor's front door: a
// REGISTER whose From tag carried the Call-ID's "@" was once answered 400
// there.
func TestRequestsPassTheFrontDoorScanner(t *testing.T) {
	t.Parallel()
	e := newEndpoint("127.0.0.1", 5070, "127.0.0.1:5060", "UDP", "service", "run")
	c := &call{n: 42, callID: string(e.callID(nil, 42)), cseq: 1, ruri: []byte("sip:service@127.0.0.1:5060"),
		to: []byte("<sip:service@127.0.0.1:5060>;tag=t1"), target: []byte("sip:service@127.0.0.1:5080")}
	for _, r := range []struct {
		name string
		b    []byte
	}{
		{"INVITE", e.invite(nil, c)},
		{"ACK", e.ack(nil, c, true)},
		{"BYE", e.bye(nil, c)},
		{"REGISTER", e.register(nil, c, "user1", 3600)},
		{"OPTIONS", e.options(nil, c)},
	} {
		var m sipscan.Msg
		if err := sipscan.Scan(r.b, &m); err != nil {
			t.Errorf("%s: want it scanned, have %v\n%s", r.name, err, r.b)
		}
	}
}
