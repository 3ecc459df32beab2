package engine

import (
	"bytes"
	"net/netip"
	"strconv"
	"strings"
	"unsafe"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/internal/sipmsg"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/overload/oc"
	"github.com/sipvisor/sipvisor/script"
	"github.com/sipvisor/sipvisor/worker/engine/txn"
)

// The message path on the bytes (docs/DESIGN.md, "The message path").
//
// A request is read once into offsets (package sipmsg) and the script runs
// on them: the functions a dialog's requests go through (onBytes) read
// the offsets and note what they change (Max-Forwards, the Routes
// loose_route takes off), and t_relay writes the relayed request by
// splicing those changes into the bytes as received. Decoding into sipgo's
// objects, dozens of allocations per request, happens only when the script
// asks for something else: the first such function or pseudo-variable
// decodes the request (msgCtx.decode), with the changes noted so far
// applied, and the script goes on with it as before. A transaction made on
// the bytes keeps the request it relayed, which is what it resends, and
// its keys; its own replies (a 408, a 480) read that back when one is due
// (txRequest).
//
// What takes this path: an INVITE that starts a dialog, a request in a
// dialog (a To tag) other than an INVITE or a CANCEL, and a REGISTER
// (regbytes.go, which a REGISTER that is relayed leaves), that came over UDP
// through the front door or, a REGISTER excepted, over a TCP or TLS
// connection, whose top Via names an IPv4 address, and whose next hop is an IPv4
// address over UDP, or over TCP or TLS for one read from a connection (the
// Request-URI, or the contact lookup found, not behind NAT nor over a flow
// or Path). Everything else takes the decoded path from the start, as it
// did before, so behaviour differs in nothing but cost.

// onBytes are the functions that run on the offsets; any other decodes
// the request first.
var onBytes = map[string]bool{
	"mf_process_maxfwd_header": true,
	"has_totag":                true,
	"nat_uac_test":             true,
	"sl_send_reply":            true,
	"is_myself":                true,
	"record_route":             true,
	"lookup":                   true,
	"is_method":                true,
	"loose_route":              true,
	"t_check_trans":            true,
	"t_relay":                  true,
	"www_authorize":            true,
	"www_challenge":            true,
	"consume_credentials":      true,
	"save":                     true,
	"force_rport":              true,
	"fix_nated_register":       true,
}

// spareSlack is how much more than the request a transaction made on its
// bytes keeps room for in its replies: a Record-Route, a To tag, a
// Contact.
const spareSlack = 160

// bytesState is what the script changed of a request on the bytes, read
// by the functions on the bytes, decode and the splice; a worker's one is
// reused, since one request at a time runs on the bytes.
type bytesState struct {
	ruri       string     // the Request-URI lookup set, "" for the one received
	ruriURI    sipmsg.URI // ruri, read
	mf         int        // the Max-Forwards to write, -1 for the one received
	dropRoutes int        // the Route values loose_route took off
	via        viaFix     // what the top Via gets, and where replies go
	consumed   bool       // consume_credentials took the credentials off
	// force_rport set rport and received on the top Via (via's recv and
	// rport), rport first when both were added (forceRport).
	forceRport, rportFirst bool
}

// viaFix is what RFC 3261 18.2.1 and RFC 3581 add to the top Via of a
// request read from src, and where replies to it go (viaDest).
type viaFix struct {
	recv  []byte // received to set; nil for none
	rport int    // rport to set; 0 for none
	host  []byte // sent-by host
	port  int    // sent-by port, 0 when absent
	dest  dest
}

// handleBytes takes a request on the bytes when it may (see above) and
// reports whether it did.
func (w *Worker) handleBytes(data []byte, src source) bool {
	if src.direct || !src.addr.IsValid() {
		return false
	}
	// Over a connection, TCP and TLS: a WebSocket client's Via names no
	// address of its own to read.
	if src.conn != nil {
		if src.proto != "tcp" && src.proto != "tls" {
			return false
		}
	} else if src.proto != "udp" {
		return false
	}
	// What never takes this path is not scanned twice.
	if bytes.HasPrefix(data, []byte("CANCEL ")) || bytes.HasPrefix(data, []byte("SIP/2.0 ")) {
		return false
	}
	m := &w.fmsg
	if m.Parse(data) != nil || !m.IsRequest {
		return false
	}
	// A REGISTER is outside a dialog (regbytes.go).
	if m.Method == sipscan.Register && m.HasToTag || m.Method != sipscan.Register && m.HasToTag == (m.Method == sipscan.Invite) {
		return false
	}
	switch m.Method {
	case sipscan.Cancel, sipscan.OtherMethod, sipscan.NoMethod:
		return false
	}
	if m.Method.String() != string(m.MethodBytes) {
		return false
	}
	// A REGISTER over a connection files a flow (replacedFlows, outbound):
	// the decoded path's.
	if src.conn != nil && m.Method == sipscan.Register {
		return false
	}
	f, ok := w.fixVia(m, src)
	if !ok {
		return false
	}
	w.Stats.Requests++
	if w.ackOfStatelessReplyBytes(m, &f) {
		w.Stats.StatelessAcks++
		return true
	}
	if src.conn != nil {
		if w.refusedOnConn(m, src) {
			return true
		}
		w.noteSessionBytes(m)
	}
	c := w.fastCtx
	if c == nil {
		c = new(msgCtx)
	}
	w.fastCtx = nil
	w.bs = bytesState{mf: -1, via: f}
	*c = msgCtx{w: w, src: src, m: m, bs: &w.bs, raw: data}
	w.raw = data
	c.run(w.opt.Script.Routes[""])
	w.raw = nil
	if c.m != nil {
		// Nothing decoded: nothing the script did can hold the context.
		c.m = nil
		w.fastCtx = c
	}
	return true
}

// fixVia reads the top Via of m as onRequest fixes it.
func (w *Worker) fixVia(m *sipmsg.Msg, src source) (f viaFix, ok bool) {
	sb := m.SentBy
	f.host = sb
	if i := bytes.LastIndexByte(sb, ':'); i >= 0 {
		n, err := strconv.Atoi(string(sb[i+1:]))
		if err != nil || n <= 0 || n > 65535 {
			return f, false
		}
		f.host, f.port = sb[:i], n
	}
	if len(f.host) == 0 || f.host[0] == '[' || bytes.IndexByte(f.host, ':') >= 0 {
		return f, false
	}
	v, ok := m.First(sipmsg.Via)
	if !ok {
		return f, false
	}
	var recvP, rportP []byte
	rportSeen := false
	if i := bytes.IndexByte(v, ';'); i >= 0 {
		for p := v[i:]; len(p) > 0; {
			p = p[1:]
			e := bytes.IndexByte(p, ';')
			if e < 0 {
				e = len(p)
			}
			k, val := p[:e], []byte(nil)
			if j := bytes.IndexByte(k, '='); j >= 0 {
				k, val = k[:j], bytes.TrimSpace(k[j+1:])
			}
			k = bytes.TrimSpace(k)
			switch {
			case string(k) == "received":
				recvP = val
			case string(k) == "rport":
				rportP, rportSeen = val, true
			}
			p = p[e:]
		}
	}
	ip := src.addr.Addr().AppendTo(w.ipBuf[:0])
	same := string(f.host) == string(ip)
	if !same {
		f.recv = ip
	}
	if rportSeen && len(rportP) == 0 {
		f.rport = int(src.addr.Port())
		if same {
			f.recv = ip
		}
	}
	host, port := f.host, f.port
	if f.recv != nil {
		host = f.recv
	} else if len(recvP) > 0 {
		host = recvP
	}
	if f.rport != 0 {
		port = f.rport
	} else if len(rportP) > 0 {
		if n, err := strconv.Atoi(string(rportP)); err == nil {
			port = n
		}
	}
	if port == 0 {
		port = 5060
	}
	d := dest{proto: "udp", sock: src.sock}
	switch t := m.Transport; {
	case foldEq(t, "TCP"):
		d.proto = "tcp"
	case foldEq(t, "TLS"):
		d.proto = "tls"
	case foldEq(t, "WS"):
		d.proto = "ws"
	case foldEq(t, "WSS"):
		d.proto = "wss"
	}
	a, ok := sipmsg.IPv4(host)
	if !ok {
		return f, false // a name: viaDest resolves it
	}
	d.addr = netipAddrPort(netip.AddrFrom4(a), port)
	f.dest = d
	return f, true
}

func foldEq(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c, d := b[i], s[i]
		if 'a' <= c && c <= 'z' {
			c -= 'a' - 'A'
		}
		if 'a' <= d && d <= 'z' {
			d -= 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// decode makes the sipgo request of a context on the bytes, with what the
// script changed so far, for the functions and pseudo-variables that read
// it. It reports false, having stopped the script, when sipgo refuses a
// message the scanner took.
func (c *msgCtx) decode() bool {
	m := c.m
	if m == nil {
		return true
	}
	c.m = nil
	w := c.w
	msg, err := w.parser.ParseSIP(m.Raw)
	req, ok := msg.(*sip.Request)
	if err != nil || !ok || req.Via() == nil || req.CallID() == nil || req.CSeq() == nil || req.From() == nil || req.To() == nil {
		w.Stats.Malformed++
		w.log.Debug("malformed sip message", "from", c.src.addr.String(), "error", err)
		c.stopped = true
		return false
	}
	repairVias(req)
	w.noteReceived(req, c.src)
	if c.bs.forceRport {
		forceRport(req, c.src)
	}
	if c.bs.mf >= 0 {
		if mf := req.MaxForwards(); mf != nil {
			*mf = sip.MaxForwardsHeader(c.bs.mf)
		} else {
			h := sip.MaxForwardsHeader(c.bs.mf)
			req.AppendHeader(&h)
		}
	}
	for range c.bs.dropRoutes {
		req.RemoveHeader("Route")
	}
	if c.bs.consumed {
		req.RemoveHeader(c.auth.header)
	}
	if c.bs.ruri != "" {
		var u sip.Uri
		if sip.ParseUri(c.bs.ruri, &u) == nil {
			req.Recipient = u
		}
	}
	c.req = req
	return true
}

// appendServerKeyBytes is appendServerKey of a request on the bytes.
func appendServerKeyBytes(b []byte, m *sipmsg.Msg, f *viaFix, ack bool) []byte {
	method := m.MethodBytes
	if ack {
		method = []byte("INVITE")
	}
	return txn.AppendServerKey(b, m.Branch, f.host, f.port, method)
}

// appendDialogKey is dialogKey of a request on the bytes.
func appendDialogKey(b []byte, m *sipmsg.Msg) []byte {
	return txn.AppendDialogKey(b, m.CallID, m.FromTag, m.CSeq)
}

// ackOfStatelessReplyBytes is ackOfStatelessReply on the bytes.
func (w *Worker) ackOfStatelessReplyBytes(m *sipmsg.Msg, f *viaFix) bool {
	if m.Method != sipscan.Ack || len(m.ToTag) > 13 {
		return false
	}
	var tb [16]byte
	if string(appendLocalTag(tb[:0], m)) != string(m.ToTag) {
		return false
	}
	w.keyBuf = appendServerKeyBytes(w.keyBuf[:0], m, f, true)
	return w.serverTx(w.keyBuf) == nil
}

// absorbBytes is absorb on the bytes.
func (c *msgCtx) absorbBytes() bool {
	w := c.w
	ack := c.m.Method == sipscan.Ack
	w.keyBuf = appendServerKeyBytes(w.keyBuf[:0], c.m, &c.bs.via, ack)
	t := w.serverTx(w.keyBuf)
	if t == nil {
		return false
	}
	if ack {
		return w.ackTx(t)
	}
	w.Stats.Retransmissions++
	if t.Last != nil {
		d := viaDestBytes(c.bs.via.dest, t.src)
		w.send(&d, t.Last)
	}
	return true
}

// viaDestBytes is viaDest of a request on the bytes whose Via leads to d:
// back on the connection src while it is open, else d.
func viaDestBytes(d dest, src source) dest {
	if src.conn != nil && !src.conn.closed {
		return dest{proto: src.conn.proto(), addr: src.addr, conn: src.conn, sock: -1}
	}
	return d
}

// destBytes is dest of a request on the bytes whose next hop is its
// Request-URI (or $du), when that names an address over UDP, or over TCP
// or TLS for a request read from a connection (one read over UDP may be
// the holder's to relay: passToHolder).
func (c *msgCtx) destBytes() (dest, bool) {
	u, ok := c.bs.ruriURI, c.bs.ruri != ""
	switch {
	case c.du != "":
		// $du as dest reads it; ParseURI only reads the string's bytes.
		du := strings.Trim(c.du, "<> ")
		u, ok = sipmsg.ParseURI(unsafe.Slice(unsafe.StringData(du), len(du)))
	case !ok:
		u, ok = sipmsg.ParseURI(c.m.RequestURI)
	}
	if !ok || !foldEq(u.Scheme, "sip") {
		return dest{}, false
	}
	sock := c.src.sock
	if sock < 0 {
		sock = 0
	}
	d := dest{proto: "udp", sock: sock}
	if t, ok := u.Param("transport"); ok && !foldEq(t, "udp") {
		switch {
		case c.src.conn == nil:
			return d, false
		case foldEq(t, "tcp"):
			d.proto = "tcp"
		case foldEq(t, "tls"):
			d.proto = "tls"
		default:
			return d, false
		}
	}
	port := u.Port
	if port == 0 {
		port = 5060
		if d.proto == "tls" {
			port = 5061
		}
	}
	a, ok := sipmsg.IPv4(u.Host)
	if !ok {
		return d, false
	}
	d.addr = netipAddrPort(netip.AddrFrom4(a), port)
	return d, true
}

// splice writes the request on the bytes as relayed to d, with this
// server's Via naming a new branch, into dst; the branch's name is the
// bytes after prefix in the returned Via.
func (c *msgCtx) splice(dst []byte, d *dest, rr [2][]byte) []byte {
	w := c.w
	local, proto := w.localFor(*d)
	if d.proto == "udp" && d.sock >= 0 && d.sock < len(w.replyPort) {
		local = netip.AddrPortFrom(local.Addr(), w.replyPort[d.sock])
		d.reply = true
	}
	w.branchSeq++
	var bb [64]byte
	branch := strconv.AppendUint(append(bb[:0], w.branchPrefix...), w.branchSeq, 36)
	var vb [256]byte
	via := appendVia(vb[:0], proto, local, branch)
	if w.ocOffer(d) {
		// RFC 7339 toward a destination of the sets, as withVia offers it.
		via = append(oc.AppendOffer(via[:len(via)-2]), "\r\n"...)
	}
	s := sipmsg.Splice{RequestURI: c.bs.ruri, Via: via, Received: c.bs.via.recv, Rport: c.bs.via.rport, RecordRoute: rr,
		MaxForwards: c.bs.mf, DropRoutes: c.bs.dropRoutes, ContentLength: stream(d.proto)}
	return c.m.AppendSplice(dst, &s)
}

// relayBytes is t_relay on the bytes. done is false, with nothing done,
// for what the decoded path must handle.
func (c *msgCtx) relayBytes() (ok, done bool) {
	w, m := c.w, c.m
	if c.stx != nil || c.flowDu != "" || c.rrDone || c.ds != nil || c.onReply != "" || c.onFailure != "" ||
		c.bs.consumed || c.bs.forceRport || m.Method == sipscan.Register {
		return false, false
	}
	if c.absorbBytes() {
		c.stopped = true
		return true, true
	}
	d, ok := c.destBytes()
	if !ok || w.ownDest(d) || stream(d.proto) && !w.connBytes(&d) {
		return false, false
	}
	var rb0, rb1 [128]byte
	var rr [2][]byte
	if c.rr {
		if rr, ok = c.recordRoutes(&d, &rb0, &rb1); !ok {
			return false, false
		}
		c.rrDone = true
	}
	if m.Method == sipscan.Ack {
		out := c.splice(w.wbuf[:0], &d, rr)
		w.wbuf = out[:0]
		return w.send(&d, out) == nil, true
	}
	out := c.splice(w.wbuf[:0], &d, rr)
	w.wbuf = out[:0]
	invite := m.Method == sipscan.Invite
	// Both transactions are one pair from the worker's free list
	// (txpool.go): a branch is the rule (serial forking only). Their keys
	// are written once into the pair's key bytes (the server's, the
	// dialog's for an INVITE, the branch's, of which the branch is the
	// head), and what they keep to resend into its buffer (the request as
	// relayed and an INVITE's 100 Trying).
	p := w.newPair()
	k := appendServerKeyBytes(p.keys[:0], m, &c.bs.via, false)
	sk := len(k)
	if invite {
		k = appendDialogKey(k, m)
	}
	dk := len(k)
	k = strconv.AppendUint(append(k, w.branchPrefix...), w.branchSeq, 36)
	bk := len(k)
	k = append(append(k, '|'), m.MethodBytes...)
	p.keys = k
	keys := p.keyString()
	var tb [512]byte
	var trying []byte
	if invite {
		s := sipmsg.Splice{Received: c.bs.via.recv, Rport: c.bs.via.rport}
		trying = m.AppendReply(tb[:0], 100, "Trying", &s, nil)
	}
	// The spare room takes a reply about the size of the request's
	// headers: a 180, a BYE's 200 (txn.Server.Keep); one with a body, such
	// as a 183 with SDP, is copied on its own.
	n0, n1 := len(out), len(out)+len(trying)
	buf := w.buffer(p, n1+len(out)-len(m.Body)+spareSlack)
	copy(buf, out)
	copy(buf[n0:], trying)
	t := &p.s
	*t = serverTx{Server: txn.Server{Key: keys[:sk], Invite: invite}, src: c.src, vdest: c.bs.via.dest, pair: p}
	if invite {
		t.DialogKey = keys[sk:dk]
	}
	w.txns.AddServer(t)
	c.stx = t
	if invite {
		// Stops the upstream's timer A at once (RFC 3261 16.2).
		t.Last, t.LastCode = buf[n0:n1:n1], 100
		vd := viaDestBytes(t.vdest, t.src)
		w.send(&vd, t.Last)
	}
	t.Spare = buf[n1:n1:len(buf)]
	if w.startBranchTx(&p.c, t, buf[:n0:n0], keys[dk:bk], keys[dk:], d) {
		return true, true
	}
	if t.relayed == 0 {
		w.endServerTx(t)
		c.stx = nil
	}
	return false, true
}

// txRequest is the request of t as its own replies need it: for one
// relayed on the bytes, read back from what was relayed, less this
// server's Via.
func (w *Worker) txRequest(t *serverTx) *sip.Request {
	if t.req == nil && t.firstRelay != nil {
		if m, err := w.parser.ParseSIP(t.firstRelay); err == nil {
			repairVias(m)
			if req, ok := m.(*sip.Request); ok && req.Via() != nil {
				req.RemoveHeader("Via")
				if req.Via() != nil && req.From() != nil && req.To() != nil && req.CallID() != nil && req.CSeq() != nil {
					t.req = req
				}
			}
		}
	}
	if t.req != nil && t.ToTag == "" {
		t.ToTag = localTag(t.req)
	}
	return t.req
}

// txReply builds a reply of this server's to t's request.
func (w *Worker) txReply(t *serverTx, code int, reason string, extra []string) []byte {
	req := w.txRequest(t)
	return buildReply(req, code, reason, t.ToTag, extra)
}

// replyDest is where t's replies go.
func (w *Worker) replyDest(t *serverTx) dest {
	if t.req == nil {
		return viaDestBytes(t.vdest, t.src)
	}
	return w.viaDest(t.req.Via(), t.src)
}

// looseRouteBytes is loose_route on the bytes: the Routes naming this
// server come off. done is false, with nothing changed, for a Route set
// the decoded path must read: another proxy next, a flow token, a URI it
// cannot read.
func (c *msgCtx) looseRouteBytes() (ok, done bool) {
	skip, n, bad, next, user := c.bs.dropRoutes, 0, false, false, false
	c.m.Routes(func(v []byte) bool {
		if skip > 0 {
			skip--
			return true
		}
		u, ok := sipmsg.ParseURI(sipmsg.AddrSpec(v))
		if !ok {
			bad = true
			return false
		}
		if !c.w.isMyselfBytes(u.Host, u.Port) {
			next = true
			return false
		}
		n++
		user = len(u.User) > 0
		return true
	})
	if bad || next || user {
		return false, false
	}
	if n == 0 {
		return false, true
	}
	c.bs.dropRoutes += n
	return true, true
}

// isMyselfBytes is isMyself of a host on the bytes (self.go): the host
// read without making a string of it, the comparison isMe's.
func (w *Worker) isMyselfBytes(host []byte, port int) bool {
	a, ok := sipmsg.IPv4(host)
	if !ok {
		if len(host) == 0 || '0' <= host[0] && host[0] <= '9' || bytes.IndexByte(host, ':') >= 0 {
			return w.isMyself(string(host), port)
		}
		// A name, as isMyself reads one.
		for _, d := range w.opt.Domains {
			if foldEq(host, d) {
				return true
			}
		}
		if !foldEq(host, "localhost") {
			return false
		}
		a = [4]byte{127, 0, 0, 1}
	}
	return w.isMe(netip.AddrFrom4(a), port, false)
}

// recordRoutes are record_route's lines for a request on the bytes
// relayed to d, as addRecordRoute writes them: this server's address it
// came in on and, when it leaves by another, that one on top. ok is false
// for what addRecordRoute must write (IPv6, a flow's token).
func (c *msgCtx) recordRoutes(d *dest, b0, b1 *[128]byte) (rr [2][]byte, ok bool) {
	in, inProto := c.w.local(c.src)
	out, outProto := c.w.localFor(*d)
	if !in.Addr().Is4() || !out.Addr().Is4() || d.flow {
		return rr, false
	}
	// The side of a connection the caller opened names its flow, as
	// addRecordRoute writes it.
	tok := c.w.inFlow(c.src)
	rr[1] = appendRecordRoute(b0[:0], tok, in, inProto)
	if in != out || inProto != outProto || tok != "" {
		rr[0] = appendRecordRoute(b1[:0], "", out, outProto)
	}
	return rr, true
}

// connBytes gives a next hop over a connection the one target gives it,
// without opening one: this worker's, else none where the worker that
// holds one may write it (send asks). It reports false for a connection
// to open, which the decoded path does.
func (w *Worker) connBytes(d *dest) bool {
	if tc, ok := w.conns[d.addr]; ok && !tc.closed && tc.proto() == d.proto {
		d.conn = tc
		return true
	}
	return w.opt.WriteVia != nil
}

func appendRecordRoute(b []byte, user string, a netip.AddrPort, proto string) []byte {
	b = append(b, "Record-Route: <sip:"...)
	if user != "" {
		b = append(append(b, user...), '@')
	}
	b = a.Addr().AppendTo(b)
	if a.Port() != 0 {
		b = append(b, ':')
		b = strconv.AppendUint(b, uint64(a.Port()), 10)
	}
	b = append(b, ";lr"...)
	if proto != "UDP" {
		b = append(b, ";transport="...)
		for i := range len(proto) {
			ch := proto[i]
			if 'A' <= ch && ch <= 'Z' {
				ch += 'a' - 'A'
			}
			b = append(b, ch)
		}
	}
	return append(b, ">\r\n"...)
}

// isMyselfBytes is is_myself of $ru, $fu or $tu on the bytes; done is
// false for any other argument or a URI it cannot read.
func (c *msgCtx) isMyselfBytes(a *script.Literal) (ok, done bool) {
	if a.IsInt {
		return false, false
	}
	var raw []byte
	switch a.Str {
	case "$ru":
		if c.bs.ruri != "" {
			return false, false
		}
		raw = c.m.RequestURI
	case "$fu", "$tu":
		k := sipmsg.From
		if a.Str == "$tu" {
			k = sipmsg.To
		}
		v, ok := c.m.First(k)
		if !ok {
			return false, false
		}
		raw = sipmsg.AddrSpec(v)
	default:
		return false, false
	}
	u, ok := sipmsg.ParseURI(raw)
	if !ok {
		return false, false
	}
	return c.w.isMyselfBytes(u.Host, u.Port), true
}

// lookupBytes is lookup on the bytes: the contact found becomes the
// Request-URI. done is false for a binding the decoded path must route
// (through a Path, over a flow, behind NAT) or a store failure, which
// that path reports.
func (c *msgCtx) lookupBytes() (ok, done bool) {
	if c.bs.ruri != "" {
		return false, false
	}
	u, ok := sipmsg.ParseURI(c.m.RequestURI)
	if !ok {
		return false, false
	}
	w := c.w
	var ab [128]byte
	ak, ok := w.appendAOR(ab[:0], &u)
	if !ok {
		return false, false
	}
	aor := string(ak)
	// A REGISTER of this turn is visible to the lookup.
	w.EndTurn()
	bs, err := w.opt.Store.Lookup(aor)
	if err != nil {
		return false, false
	}
	if len(bs) == 0 {
		return false, true
	}
	// The newest binding, as useBindings takes it when its contact reads.
	b := &bs[0]
	var cu sipmsg.URI
	if b.Path == "" && !(stream(b.Proto) && b.Received != "") && !strings.HasPrefix(b.Received, natReceivedPrefix) {
		// Read where it lies: ParseURI only reads, and c.bs.ruriURI lives
		// no longer than the string.
		cu, ok = sipmsg.ParseURI(unsafe.Slice(unsafe.StringData(b.Contact), len(b.Contact)))
	} else {
		ok = false
	}
	if !ok {
		// Routed as the decoded path routes it, without asking the
		// store again.
		if !c.decode() {
			return false, true
		}
		return c.useBindings(bs), true
	}
	c.bs.ruri, c.bs.ruriURI = b.Contact, cu
	return true, true
}

// appendLocalTag is localTag of a request on the bytes.
func appendLocalTag(b []byte, m *sipmsg.Msg) []byte {
	return txn.AppendLocalTag(b, m.CallID, m.FromTag, m.Branch)
}

// replyBytes is sl_send_reply's stateless reply on the bytes
// (replyStateless).
func (c *msgCtx) replyBytes(code int, reason string) {
	var tb [16]byte
	var tag []byte
	if code > 100 {
		tag = appendLocalTag(tb[:0], c.m)
	}
	s := c.replySplice()
	w := c.w
	out := c.m.AppendReply(w.wbuf[:0], code, reason, &s, tag)
	w.wbuf = out[:0]
	d := viaDestBytes(c.bs.via.dest, c.src)
	w.send(&d, out)
}

// appendAOR is aorOf of a URI on the bytes, written as location.Key
// writes it (sip:user@host, the host in lower case). It reports false for
// what aorOf must read: an escaped user, a name other than localhost, a
// port kept (aor_keep_port).
func (w *Worker) appendAOR(b []byte, u *sipmsg.URI) ([]byte, bool) {
	if w.opt.AORKeepPort || bytes.IndexByte(u.User, '%') >= 0 {
		return b, false
	}
	var ip netip.Addr
	if a, ok := sipmsg.IPv4(u.Host); ok {
		ip = netip.AddrFrom4(a)
	} else if foldEq(u.Host, "localhost") {
		ip = netip.AddrFrom4([4]byte{127, 0, 0, 1})
	}
	port := u.Port
	if port == 0 {
		port = 5060
	}
	b = append(b, "sip:"...)
	if len(u.User) > 0 {
		b = append(append(b, u.User...), '@')
	}
	host := u.Host
	if ip.IsValid() && w.ownAddrPort(netip.AddrPortFrom(ip, uint16(port))) {
		home := strings.TrimSuffix(strings.TrimSuffix(strings.ToLower(w.home), ":5060"), ":5061")
		return append(b, home...), true
	}
	for _, ch := range host {
		if 'A' <= ch && ch <= 'Z' {
			ch += 'a' - 'A'
		}
		b = append(b, ch)
	}
	return b, true
}

// natTestBytes is nat_uac_test on the bytes, for the tests of the Contact,
// the top Via and the source; done is false for the SDP's, an argument it
// cannot read, a Contact that is not a sip: URI with an IPv4 address or a
// name.
func (c *msgCtx) natTestBytes(a *script.Literal) (ok, done bool) {
	if !a.IsInt || a.Int <= 0 || a.Int&(natSDPPrivate|natSDPNotSource) != 0 {
		return false, false
	}
	flags := int(a.Int)
	src := c.src.addr
	private := func(ip netip.Addr) bool { return ip.IsPrivate() || cgnat.Contains(ip) }
	if flags&(natContactPrivate|natContactPort) != 0 {
		if v, found := c.m.First(sipmsg.Contact); found {
			u, ok := sipmsg.ParseURI(sipmsg.AddrSpec(v))
			if !ok {
				return false, false
			}
			ip, isIP := sipmsg.IPv4(u.Host)
			if !isIP && (len(u.Host) == 0 || u.Host[0] == '[' || '0' <= u.Host[0] && u.Host[0] <= '9') {
				return false, false
			}
			if flags&natContactPrivate != 0 && isIP && private(netip.AddrFrom4(ip)) {
				return true, true
			}
			if flags&natContactPort != 0 && portOr5060(u.Port) != int(src.Port()) {
				return true, true
			}
		}
	}
	vip, isIP := sipmsg.IPv4(c.bs.via.host)
	if flags&natViaReceived != 0 && !(isIP && netip.AddrFrom4(vip) == src.Addr().Unmap()) {
		return true, true
	}
	if flags&natViaPrivate != 0 && isIP && private(netip.AddrFrom4(vip)) {
		return true, true
	}
	if flags&natViaPort != 0 && portOr5060(c.bs.via.port) != int(src.Port()) {
		return true, true
	}
	if flags&natSourcePrivate != 0 && private(src.Addr().Unmap()) {
		return true, true
	}
	return false, true // not over a WebSocket: the bytes path is UDP's
}
