package engine

import (
	"net/netip"
	"strings"
	"testing"
)

// outboundScript registers and routes to registered users.
const outboundScript = `route {
	if (is_method("REGISTER")) { save("location"); exit; }
	if (!lookup("location")) { sl_send_reply(404, "Not Found"); exit; }
	if (!t_relay()) sl_send_reply(500, "Relay Failed");
}
`

// registerVia is a REGISTER for alice that a proxy in front (edge) passes
// on with its Path; contact params follow the Contact's URI.
func registerVia(pa, edge netip.AddrPort, branch, callID, contact, params, path string) string {
	return "REGISTER sip:" + pa.String() + ` SIP/2.0
Via: SIP/2.0/UDP ` + edge.String() + `;branch=z9hG4bK-` + branch + `
Via: SIP/2.0/TCP 192.0.2.7:5060;branch=z9hG4bK-phone` + branch + `
Max-Forwards: 69
From: <sip:alice@` + pa.String() + `>;tag=a` + branch + `
To: <sip:alice@` + pa.String() + `>
Call-ID: ` + callID + `
CSeq: 1 REGISTER
Supported: path, outbound
Path: ` + path + `
Contact: <` + contact + `>` + params + `
Expires: 600
Content-Length: 0

`
}

// A phone registered for outbound (RFC 5626) through an edge proxy that
// marks its Path with ;ob: the 200 OK requires outbound and echoes the
// Path; a new flow of the same instance and reg-id replaces the old one,
// another reg-id adds one; a reg-id behind a proxy without ;ob is refused
// 439; and a call to the phone goes to the edge proxy with the Path as its
// Route set (RFC 3327).
func TestOutboundRegistrarAndPath(t *testing.T) {
	p := startProxy(t, outboundScript, nil)
	edge := newUA(t)
	pa := p.addr()
	path := "<sip:" + edge.addr().String() + ";lr;ob>"
	inst := `;+sip.instance="<urn:uuid:00000000-0000-1000-8000-000a95a0e128>"`

	edge.send(pa, registerVia(pa, edge.addr(), "r1", "reg1@x", "sip:alice@a1.invalid;transport=tcp;ob", inst+";reg-id=1", path))
	res, raw := edge.recvResponse(200)
	if h := res.GetHeader("Require"); h == nil || !strings.Contains(h.Value(), "outbound") {
		t.Errorf("200 OK of an outbound REGISTER: want Require: outbound, have:\n%s", raw)
	}
	if h := res.GetHeader("Path"); h == nil || h.Value() != path {
		t.Errorf("200 OK: want the Path echoed, have:\n%s", raw)
	}
	if !strings.Contains(raw, "reg-id=1") || !strings.Contains(raw, "+sip.instance=") {
		t.Errorf("200 OK: want the contact listed with its instance and reg-id, have:\n%s", raw)
	}

	// The phone's flow broke; it registers a new one with the same reg-id.
	edge.send(pa, registerVia(pa, edge.addr(), "r2", "reg1@x", "sip:alice@a2.invalid;transport=tcp;ob", inst+";reg-id=1", path))
	_, raw = edge.recvResponse(200)
	if strings.Contains(raw, "a1.invalid") || !strings.Contains(raw, "a2.invalid") {
		t.Errorf("the new flow of reg-id 1: want it to replace the old one, have:\n%s", raw)
	}
	edge.send(pa, registerVia(pa, edge.addr(), "r3", "reg2@x", "sip:alice@b1.invalid;transport=tcp;ob", inst+";reg-id=2", path))
	_, raw = edge.recvResponse(200)
	if !strings.Contains(raw, "a2.invalid") || !strings.Contains(raw, "b1.invalid") {
		t.Errorf("a flow of reg-id 2: want it beside reg-id 1's, have:\n%s", raw)
	}

	edge.send(pa, registerVia(pa, edge.addr(), "r4", "reg3@x", "sip:alice@c1.invalid;transport=tcp;ob", inst+";reg-id=3",
		"<sip:"+edge.addr().String()+";lr>"))
	edge.recvResponse(439)

	// A call: to the edge proxy, routed by the Path, for the newest contact.
	caller := newUA(t)
	caller.send(pa, invite(pa, caller.addr(), "sip:alice@"+pa.String(), "call1@x", "z9hG4bK-c1", 70))
	req, raw := edge.recvRequest("INVITE")
	if rt := req.GetHeader("Route"); rt == nil || !strings.Contains(rt.Value(), edge.addr().String()) || !strings.Contains(rt.Value(), "ob") {
		t.Errorf("INVITE to a contact registered through a Path: want the Path as Route, have:\n%s", raw)
	}
	if req.Recipient.Host != "b1.invalid" && req.Recipient.Host != "a2.invalid" {
		t.Errorf("INVITE: want a registered contact as the Request-URI, have %s", req.Recipient.String())
	}
	edge.respond(pa, req, 486, "Busy Here")
	caller.recvResponse(100)
	caller.recvResponse(486)
}

// A flow token reads back as the connection it names, and one altered in
// any byte, or made under another key, does not.
func TestFlowToken(t *testing.T) {
	p := startProxy(t, outboundScript, nil)
	var tok string
	addr := netip.MustParseAddrPort("192.0.2.7:40312")
	p.do(func() { tok = p.w.flowToken(addr, flowTokenOb) })
	if tok == "" {
		t.Fatal("no flow token")
	}
	p.do(func() {
		got, flags, ok := p.w.parseFlowToken(tok)
		if !ok || got != addr || flags != flowTokenOb {
			t.Errorf("the token read back: want %v with ob, have %v %v %v", addr, got, flags, ok)
		}
		for i := len(flowTokenPrefix); i < len(tok); i++ {
			b := []byte(tok)
			b[i] ^= 1
			if _, _, ok := p.w.parseFlowToken(string(b)); ok {
				t.Errorf("a token altered at byte %d was taken", i)
			}
		}
	})
	other := startProxy(t, outboundScript, nil)
	other.do(func() {
		if _, _, ok := other.w.parseFlowToken(tok); ok {
			t.Error("a token made under another store's key was taken")
		}
	})
}
