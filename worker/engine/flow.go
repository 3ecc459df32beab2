package engine

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/location"
)

// Flows (RFC 5626): a phone that registered over a connection (TCP, TLS,
// and any stream transport) is reached over that connection, whatever its
// Contact says: it accepts no connections (no server certificate, a NAT
// in front) and may name an unroutable *.invalid host. lookup() sets the
// destination to the binding's flow, the connection's remote address and
// transport; the request goes there if this worker reads the connection,
// else the worker that does writes it (Options.WriteVia), and the phone's
// responses, which that worker reads, come back by the pid in their branch
// (passResponse). No worker reading it means the flow is gone: the request
// gets 430 Flow Failed (the phone registered with ;ob) or 480 Temporarily
// Unavailable, at once, and nothing connects to the phone, unless its
// contact names an IP address of its own (contactDest): a registration
// made over a connection for a contact that accepts them.
//
// In-dialog requests find the flow by the flow token of this server's
// Record-Route facing it (addRecordRoute, loose_route): the phone's 2xx
// names its own Contact, which is just as unreachable.

// errFlowGone is a request for a flow no worker reads any more.
var errFlowGone = errors.New("the connection the phone registered on is gone")

// flowCode is the answer for a request whose flow is gone (RFC 5626 5.3):
// 430 for a phone that asked for outbound, 480 for others, which know no
// 430.
func flowCode(ob bool) (int, string) {
	if ob {
		return 430, "Flow Failed"
	}
	return 480, "Temporarily Unavailable"
}

// flowURI is the $du of a flow: where the connection comes from, over its
// transport.
func flowURI(addr netip.AddrPort, proto string) string {
	host := addr.Addr().String()
	if addr.Addr().Is6() {
		host = "[" + host + "]"
	}
	return "sip:" + host + ":" + strconv.Itoa(int(addr.Port())) + ";transport=" + proto
}

// setFlow points the request at a flow: $du, marked so that target() does
// not connect to it.
func (c *msgCtx) setFlow(addr netip.AddrPort, proto string, ob bool) {
	c.du = flowURI(addr, proto)
	c.flowDu, c.flowOb, c.flowCaller = c.du, ob, false
}

// bindingFlow is the flow of a binding registered over a connection.
func bindingFlow(b *location.Binding) (netip.AddrPort, bool) {
	if !stream(b.Proto) || b.Received == "" {
		return netip.AddrPort{}, false
	}
	// fix_nated_register saves the source as a URI (nat.go): the address
	// is the same either way.
	rec, _, _ := strings.Cut(strings.TrimPrefix(b.Received, natReceivedPrefix), ";")
	ap, err := netip.ParseAddrPort(rec)
	if err != nil {
		return netip.AddrPort{}, false
	}
	return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), true
}

// contactDest is where a flow's contact itself leads, for when the flow is
// gone: only a contact that names an IP address, over the flow's
// transport, and did not ask for outbound; nil for one that only its
// flow reaches (*.invalid, a name, ;ob), which nothing connects to. names
// allows a host name, resolved as any next hop's is: for the flow of a
// caller, which may be a server.
func (w *Worker) contactDest(u *sip.Uri, flow dest, names bool) *dest {
	if hasOb(u) {
		return nil
	}
	if _, err := hostIPNoLookup(u.Host); err != nil && !names {
		return nil
	}
	d, err := w.resolve(u, flow.sock)
	if err != nil || d.proto != flow.proto || w.ownDest(d) {
		return nil
	}
	return &d
}

// hasOb reports whether a contact asked for outbound (RFC 5626 ;ob).
func hasOb(u *sip.Uri) bool {
	_, ok := u.UriParams.Get("ob")
	return ok
}

// writeVia has the worker that reads the connection from d.addr write b
// there, and reports whether it took it.
func (w *Worker) writeVia(d *dest, b []byte) bool {
	if w.opt.WriteVia == nil {
		return false
	}
	var flags byte
	if d.ob {
		flags |= wire.FlowOutbound
	}
	if d.alt != nil {
		flags |= wire.FlowDial
	}
	if !w.opt.WriteVia(flags, d.addr, b) {
		return false
	}
	w.Stats.WrittenVia++
	return true
}

// WriteConn writes on a connection this worker reads a message another
// worker made (worker.ConnWriter). A request it cannot write, the
// connection being gone since, is answered 480 or 430 to the worker whose
// branch it carries, as the asker would have had no holder answered.
func (w *Worker) WriteConn(to netip.AddrPort, flags byte, msg []byte) {
	if tc, ok := w.conns[to]; ok && !tc.closed {
		if err := tc.write(msg); err == nil {
			return
		}
	}
	if len(msg) > 8 && string(msg[:8]) == "SIP/2.0 " {
		w.Stats.SendErrors++
		return
	}
	m, err := w.parser.ParseSIP(msg)
	if err != nil {
		w.Stats.SendErrors++
		return
	}
	req, ok := m.(*sip.Request)
	if ok && flags&wire.FlowDial != 0 {
		// The contact has an address of its own: tried as it says, on a
		// connection of this worker's, whose responses go back by the
		// branch's pid as the flow's would have.
		if d, err := w.resolve(&req.Recipient, 0); err == nil && stream(d.proto) && !w.ownDest(d) {
			if c, err := w.connTo(d.addr, d.proto); err == nil && c.write(msg) == nil {
				return
			}
		}
	}
	w.Stats.SendErrors++
	if !ok || req.Method == sip.ACK || req.Via() == nil || req.CallID() == nil || req.CSeq() == nil || req.From() == nil || req.To() == nil {
		return
	}
	branch, _ := req.Via().Params.Get("branch")
	pid, ok := branchOwner([]byte(branch))
	if !ok || w.opt.PassResponse == nil {
		return
	}
	code, reason := flowCode(flags&wire.FlowOutbound != 0)
	w.opt.PassResponse(pid, "", buildReply(req, code, reason, localTag(req), nil))
}

// A flow token names a connection a client opened to this server: the
// user part of the Record-Route this server puts in a request on the side
// of that connection (RFC 5626 5.2), "ft" and, base64url, a flag byte (1:
// the phone asked for outbound; 2: the caller's side, a client that may be
// a server with a name of its own), the remote address (16 bytes IPv6-mapped,
// 2 of port) and an HMAC-SHA256 of those, cut to 8 bytes, under the
// store's shared key: any worker of any node sharing the store reads it,
// and nobody can make one that routes into another client's connection.
const flowTokenPrefix = "ft"

const flowTokenLen = 1 + 18 + 8

func (w *Worker) flowKey() []byte {
	_, secret, err := w.users()
	if err != nil {
		return nil
	}
	return secret
}

func flowMAC(key, b []byte) []byte {
	m := hmac.New(sha256.New, key)
	m.Write(b)
	return m.Sum(nil)[:8]
}

// Flags of a flow token.
const (
	flowTokenOb     = 1
	flowTokenCaller = 2
)

// flowToken is the token of the connection from addr, "" without a key.
func (w *Worker) flowToken(addr netip.AddrPort, flags byte) string {
	key := w.flowKey()
	if key == nil {
		return ""
	}
	b := make([]byte, 0, flowTokenLen)
	b = append(b, flags)
	ip := addr.Addr().As16()
	b = append(b, ip[:]...)
	b = append(b, byte(addr.Port()>>8), byte(addr.Port()))
	b = append(b, flowMAC(key, b)...)
	return flowTokenPrefix + base64.RawURLEncoding.EncodeToString(b)
}

// parseFlowToken reads a token flowToken made; ok is false for any other
// user part, or a token whose MAC does not hold.
func (w *Worker) parseFlowToken(user string) (addr netip.AddrPort, flags byte, ok bool) {
	if !strings.HasPrefix(user, flowTokenPrefix) {
		return addr, 0, false
	}
	b, err := base64.RawURLEncoding.DecodeString(user[len(flowTokenPrefix):])
	if err != nil || len(b) != flowTokenLen {
		return addr, 0, false
	}
	key := w.flowKey()
	if key == nil || !hmac.Equal(flowMAC(key, b[:19]), b[19:]) {
		return addr, 0, false
	}
	ip := netip.AddrFrom16([16]byte(b[1:17])).Unmap()
	return netip.AddrPortFrom(ip, uint16(b[17])<<8|uint16(b[18])), b[0], true
}

// inFlow is the flow a request came over, for the Record-Route on its
// side: a connection a client opened, so that the dialog's requests from
// the other side reach a caller that accepts no connections.
func (w *Worker) inFlow(src source) string {
	tc := src.conn
	if tc == nil || !tc.inbound {
		return ""
	}
	// Made once a connection rather than at each INVITE: it costs a MAC
	// and a string.
	if tc.flowTok == "" || tc.remote != src.addr {
		tok := w.flowToken(src.addr, flowTokenCaller)
		if tc.remote != src.addr {
			return tok
		}
		tc.flowTok = tok
	}
	return tc.flowTok
}

// outFlow is the flow a request leaves by, when lookup chose it.
func (w *Worker) outFlow(d dest) string {
	if !d.flow {
		return ""
	}
	var flags byte
	if d.ob {
		flags = flowTokenOb
	}
	return w.flowToken(d.addr, flags)
}

// pathOf is a REGISTER's Path (RFC 3327), its name-addrs in order: the
// proxies between this registrar and the phone, this one's neighbour
// first, the edge proxy last.
func pathOf(req *sip.Request) []string {
	var out []string
	for _, h := range req.GetHeaders("Path") {
		out = append(out, splitNameAddrs(h.Value())...)
	}
	return out
}

// splitNameAddrs splits a header value of comma-separated name-addrs,
// keeping commas inside <> and quotes.
func splitNameAddrs(v string) []string {
	var out []string
	depth, quoted, start := 0, false, 0
	for i := 0; i < len(v); i++ {
		switch c := v[i]; {
		case c == '"':
			quoted = !quoted
		case quoted:
		case c == '<':
			depth++
		case c == '>':
			depth--
		case c == ',' && depth == 0:
			if s := strings.TrimSpace(v[start:i]); s != "" {
				out = append(out, s)
			}
			start = i + 1
		}
	}
	if s := strings.TrimSpace(v[start:]); s != "" {
		out = append(out, s)
	}
	return out
}

// nameAddrURI parses the URI of a name-addr ("<sip:...>" or a bare URI).
func nameAddrURI(s string) (sip.Uri, bool) {
	if i := strings.IndexByte(s, '<'); i >= 0 {
		s = s[i+1:]
		if j := strings.IndexByte(s, '>'); j >= 0 {
			s = s[:j]
		}
	}
	var u sip.Uri
	if err := sip.ParseUri(strings.TrimSpace(s), &u); err != nil || u.Host == "" {
		return u, false
	}
	return u, true
}

// outboundOf says how a REGISTER's contact is to be filed under RFC 5626
// (section 6): with its +sip.instance and reg-id when the phone asked for
// outbound and the first hop supports it, this server reading the phone's
// connection itself or the edge proxy marking its Path with ;ob. refuse is
// a reg-id whose first hop lacks outbound (439). Over UDP straight to this
// server the contact is filed as RFC 3261 says: outbound over UDP keeps
// its flow alive with STUN on the SIP port, which this server does not
// answer.
func outboundOf(ct *sip.ContactHeader, path []string, src source) (instance, regID string, refuse bool) {
	instance, ok1 := param(ct.Params, "+sip.instance")
	regID, ok2 := param(ct.Params, "reg-id")
	if !ok1 || !ok2 || instance == "" || regID == "" {
		return "", "", false
	}
	if len(path) > 0 {
		u, ok := nameAddrURI(path[0])
		if !ok || !hasOb(&u) {
			return "", "", true
		}
		return instance, regID, false
	}
	if !stream(src.proto) {
		return "", "", false
	}
	return instance, regID, false
}

// replacedFlows are the removals that make a phone's new flow replace the
// older one of the same instance and reg-id (RFC 5626 6, step 3): its
// bindings under another contact.
func (w *Worker) replacedFlows(aor string, news []location.Binding, now time.Time) ([]location.Binding, error) {
	outbound := false
	for _, b := range news {
		outbound = outbound || b.Instance != ""
	}
	if !outbound {
		return nil, nil
	}
	// A REGISTER of this turn is visible, as to a lookup.
	w.EndTurn()
	old, err := w.opt.Store.Lookup(aor)
	if err != nil {
		return nil, err
	}
	var out []location.Binding
	for _, o := range old {
		if o.Instance == "" {
			continue
		}
		for _, n := range news {
			if n.Instance == o.Instance && n.RegID == o.RegID && n.Contact != o.Contact {
				out = append(out, location.Binding{Contact: o.Contact, Expires: now})
				break
			}
		}
	}
	return out, nil
}

// applyPath routes a request to a contact registered through proxies
// (RFC 3327 5.3): the Path as its Route set, $du its first hop.
func (c *msgCtx) applyPath(path string) bool {
	hops := splitNameAddrs(path)
	if len(hops) == 0 {
		return false
	}
	first, ok := nameAddrURI(hops[0])
	if !ok {
		return false
	}
	for i := len(hops) - 1; i >= 0; i-- {
		u, ok := nameAddrURI(hops[i])
		if !ok {
			continue
		}
		c.req.PrependHeader(&sip.RouteHeader{Address: u})
	}
	c.du = first.String()
	c.flowDu = ""
	return true
}
