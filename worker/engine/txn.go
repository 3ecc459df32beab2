package engine

import (
	"bytes"
	"errors"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload/oc"
	"github.com/sipvisor/sipvisor/worker/engine/txn"
	"golang.org/x/sys/unix"
)

// serverTx is the upstream side of a relayed request: its transaction
// (package txn) and what the proxy keeps beside it.
type serverTx struct {
	txn.Server
	// req is the request as the script left it; a request relayed on its
	// bytes (fast.go) has none until a reply of this server's needs it,
	// when it is read back from firstRelay (txRequest), and vdest is
	// where its replies go.
	req   *sip.Request
	vdest dest
	src   source

	branches   []*clientTx
	branch0    [1]*clientTx // branches' first backing array: one branch is the rule
	relayed    int          // branches ever started
	firstRelay []byte       // the request as first relayed, for failure_route
	cancelled  bool

	bestCode   int
	bestReason string
	bestBytes  []byte
	bestRes    *sip.Response

	onReply, onFailure string
	// ds is the destinations left to fail over to (ds_next_dst); fr and
	// frInv the timeouts t_set_fr set, 0 for the defaults.
	ds        *dsRoute
	fr, frInv time.Duration

	// open is the branches entered in the table and not yet ended, which
	// refer to t; pair the pair t was made in from the worker's free list
	// (txpool.go), nil for a transaction of its own.
	open int
	pair *txPair
}

// clientTx is one branch: the request relayed downstream.
type clientTx struct {
	txn.Client
	stx *serverTx // nil for a CANCEL this server originates
	dst dest

	cancelPending, cancelSent bool
}

// txTable is a worker's transactions.
type txTable = txn.Table[*serverTx, *clientTx]

func methodOf(m sip.Message) string {
	if cs := m.CSeq(); cs != nil {
		return string(cs.MethodName)
	}
	return ""
}

func branchOf(v *sip.ViaHeader) string {
	if v == nil {
		return ""
	}
	b, _ := param(v.Params, "branch")
	return b
}

// serverKey names a server transaction (RFC 3261 17.2.3): top Via branch
// and sent-by, and the method, with ACK matching its INVITE.
func serverKey(req *sip.Request, method string) string {
	var a [128]byte
	return string(appendServerKey(a[:0], req, method))
}

func appendServerKey(b []byte, req *sip.Request, method string) []byte {
	v := req.Via()
	return txn.AppendServerKey(b, branchOf(v), v.Host, v.Port, method)
}

// findServerTx looks up req's server transaction for method without
// building its key as a string: most requests have none, and those that
// do are looked up more than once.
func (w *Worker) findServerTx(req *sip.Request, method string) *serverTx {
	w.keyBuf = appendServerKey(w.keyBuf[:0], req, method)
	return w.serverTx(w.keyBuf)
}

// param is a header parameter's value as the front door reads it: names
// compare without case and without the spaces RFC 3261 allows around '='
// ("; TAG = x"), where sipgo's Get compares the bytes. Were the two to
// disagree about a To tag, the door would pass a request as in-dialog,
// past admission control, that the script then routes as a new session.
func param(hp sip.HeaderParams, name string) (string, bool) {
	for _, kv := range hp {
		if k := strings.TrimSpace(kv.K); len(k) == len(name) && strings.EqualFold(k, name) {
			return strings.TrimSpace(kv.V), true
		}
	}
	return "", false
}

// dialogKey matches the ACK of a 2xx, which carries a new branch, to its
// INVITE.
func dialogKey(req *sip.Request) string {
	var b [128]byte
	return string(appendDialogKeyOf(b[:0], req))
}

func appendDialogKeyOf(b []byte, req *sip.Request) []byte {
	ftag, _ := param(req.From().Params, "tag")
	return txn.AppendDialogKey(b, string(*req.CallID()), ftag, req.CSeq().SeqNo)
}

// localTag is the To-tag of replies this server makes: derived from the
// request so a retransmission gets the same one.
func localTag(req *sip.Request) string {
	return strconv.FormatUint(localTagHash(req), 36)
}

// localTagHash is FNV-1a over the Call-ID, the From tag and the top Via
// branch, written out so that checking a tag allocates nothing.
func localTagHash(req *sip.Request) uint64 {
	ftag, _ := param(req.From().Params, "tag")
	return txn.LocalTag(string(*req.CallID()), ftag, branchOf(req.Via()))
}

// isLocalTag says whether tag is the one localTag gives req.
func isLocalTag(req *sip.Request, tag string) bool {
	var b [16]byte
	return string(strconv.AppendUint(b[:0], localTagHash(req), 36)) == tag
}

// ackOfStatelessReply says whether req is the ACK of a reply this worker
// sent without a transaction (sl_send_reply, a refusal, a bad REGISTER):
// the reply's tag, the request's branch, and no transaction to move on.
// Such an ACK ends here, as Kamailio's sl module filters it before its
// script; a script would otherwise relay it as an in-dialog request to a
// peer that never saw the INVITE.
func (w *Worker) ackOfStatelessReply(req *sip.Request) bool {
	if req.Method != sip.ACK {
		return false
	}
	tag, ok := param(req.To().Params, "tag")
	return ok && len(tag) <= 13 && isLocalTag(req, tag) && w.findServerTx(req, "ACK") == nil
}

// buildReply makes a reply to req from its Via, From, To, Call-ID and CSeq.
// It is written on the stack and copied out once, at its size: every
// INVITE's 100 Trying is one, and the reply to a retransmission is kept.
func buildReply(req *sip.Request, code int, reason, toTag string, extra []string) []byte {
	if req == nil {
		return nil
	}
	var arr [1024]byte
	b := append(arr[:0], "SIP/2.0 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	b = append(b, reason...)
	b = append(b, "\r\n"...)
	for _, h := range req.Headers() {
		switch h := h.(type) {
		case *sip.ViaHeader, *sip.FromHeader, *sip.CallIDHeader, *sip.CSeqHeader:
			b = append(b, h.Name()...)
			b = append(b, ": "...)
			b, _ = appendKnownValue(b, h)
			b = append(b, "\r\n"...)
		case *sip.ToHeader:
			b = append(b, "To: "...)
			b, _ = appendKnownValue(b, h)
			if _, ok := param(h.Params, "tag"); !ok && code > 100 && toTag != "" {
				b = append(b, ";tag="...)
				b = append(b, toTag...)
			}
			b = append(b, "\r\n"...)
		}
	}
	for _, e := range extra {
		b = append(b, e...)
		b = append(b, "\r\n"...)
	}
	b = append(b, "Server: sipvisor\r\nContent-Length: 0\r\n\r\n"...)
	return bytes.Clone(b)
}

func serialize(m sip.Message) []byte {
	// A bytes.Buffer hands its bytes over; a strings.Builder's string would
	// be copied once more into the []byte the socket takes.
	var b bytes.Buffer
	b.Grow(1024)
	m.StringWrite(&b)
	return b.Bytes()
}

// viaDest is where a reply goes (RFC 3261 18.2.2, RFC 3581): back on the
// connection the request came on, else to received/rport, else to sent-by.
func (w *Worker) viaDest(v *sip.ViaHeader, src source) dest {
	if src.conn != nil && !src.conn.closed {
		return dest{proto: src.conn.proto(), addr: src.addr, conn: src.conn, sock: -1}
	}
	host := v.Host
	if r, ok := v.Params.Get("received"); ok && r != "" {
		host = r
	}
	port := v.Port
	if rp, ok := v.Params.Get("rport"); ok && rp != "" {
		if p, err := strconv.Atoi(rp); err == nil {
			port = p
		}
	}
	if port == 0 {
		port = 5060
	}
	d := dest{proto: "udp", sock: src.sock}
	switch {
	case strings.EqualFold(v.Transport, "TCP"):
		d.proto = "tcp"
	case strings.EqualFold(v.Transport, "TLS"):
		d.proto = "tls"
	case strings.EqualFold(v.Transport, "WS"):
		d.proto = "ws"
	case strings.EqualFold(v.Transport, "WSS"):
		d.proto = "wss"
	}
	if ip, err := hostIP(host); err == nil {
		d.addr = netipAddrPort(ip, port)
	}
	return d
}

// replyStateless sends a reply to req without keeping a transaction.
func (w *Worker) replyStateless(req *sip.Request, src source, code int, reason string, extra []string) {
	b := buildReply(req, code, reason, localTag(req), extra)
	d := w.viaDest(req.Via(), src)
	w.send(&d, b)
}

func (w *Worker) newServerTx(req *sip.Request, src source) *serverTx {
	t := &serverTx{Server: txn.Server{Key: serverKey(req, string(req.Method)), Invite: req.Method == sip.INVITE}, req: req, src: src}
	t.ToTag = localTag(req)
	if t.Invite {
		t.DialogKey = dialogKey(req)
	}
	w.txns.AddServer(t)
	return t
}

// reply sends a reply made here (100 Trying, t_reply, a timeout's 408)
// through the server transaction.
func (w *Worker) reply(t *serverTx, code int, reason string) {
	b := w.txReply(t, code, reason, nil)
	if b == nil && t.State != txn.Trying {
		return // a settled transaction (settle) has no request left to answer
	}
	if code < 200 {
		t.Last, t.LastCode = b, code
		d := w.replyDest(t)
		w.send(&d, b)
		return
	}
	w.sendFinal(t, b, code)
}

// sendFinal sends the final reply upstream and starts the wait for the ACK
// or for retransmissions to stop.
func (w *Worker) sendFinal(t *serverTx, b []byte, code int) {
	if t.State != txn.Trying {
		return
	}
	t.Last, t.LastCode = b, code
	d := w.replyDest(t)
	w.send(&d, b)
	now := time.Now()
	w.txns.Final(t, code, t.src.conn != nil, now)
	if t.Invite && code < 300 {
		w.settle(t)
	}
	w.compact(t, now)
}

// fireServer runs t's due deadline.
func (w *Worker) fireServer(t *serverTx, now time.Time) {
	switch w.txns.FireServer(t, now) {
	case txn.Resend:
		// Timer G: the ACK has not come; say it again.
		d := w.replyDest(t)
		w.send(&d, t.Last)
		w.Stats.Retransmissions++
	case txn.Ended:
		w.release(t)
	}
}

func (w *Worker) endServerTx(t *serverTx) {
	w.txns.EndServer(t)
	w.release(t)
}

// absorb handles a request that belongs to a known server transaction: a
// retransmission gets the last reply again, the ACK of a non-2xx ends the
// wait. It reports whether req was absorbed.
func (w *Worker) absorb(req *sip.Request) bool {
	t := w.findServerTx(req, string(req.Method))
	if t == nil {
		return false
	}
	if req.Method == sip.ACK {
		return w.ackTx(t)
	}
	w.Stats.Retransmissions++
	if t.Last != nil {
		d := w.viaDest(req.Via(), t.src)
		w.send(&d, t.Last)
	}
	return true
}

// ackTx takes the ACK of t's non-2xx final reply: it ends the wait for
// it. It reports false for an ACK t cannot have (that of a 2xx reuses no
// branch).
func (w *Worker) ackTx(t *serverTx) bool {
	return w.txns.Ack(t, t.src.conn != nil, time.Now())
}

// relayBranch sends req downstream to d as a new branch of t.
func (w *Worker) relayBranch(t *serverTx, req *sip.Request, d dest) bool {
	b, branch := w.withVia(req, &d)
	return w.startBranch(t, b, branch, branch+"|"+string(req.Method), d)
}

// startBranch sends b, a request with this server's Via naming branch, to
// d as a new branch of t; key is the branch's (branch|method).
func (w *Worker) startBranch(t *serverTx, b []byte, branch, key string, d dest) bool {
	return w.startBranchTx(new(clientTx), t, b, branch, key, d)
}

// startBranchTx is startBranch into ct.
func (w *Worker) startBranchTx(ct *clientTx, t *serverTx, b []byte, branch, key string, d dest) bool {
	*ct = clientTx{Client: txn.Client{Branch: branch, Invite: t.Invite, Bytes: b, Key: key}, stx: t, dst: d}
	err := w.send(&ct.dst, b)
	if err != nil && !errors.Is(err, errFlowGone) {
		w.log.Warn("relay failed", "to", d.addr.String(), "proto", d.proto, "error", err)
		return false
	}
	w.txns.AddClient(ct)
	t.open++
	if t.branches == nil {
		t.branches = t.branch0[:0]
	}
	t.branches = append(t.branches, ct)
	t.relayed++
	if t.firstRelay == nil {
		t.firstRelay = b
	}
	if err != nil {
		w.flowGone(ct)
		return true
	}
	w.startClient(ct)
	return true
}

// flowGone ends a branch whose phone's connection is gone with the answer
// RFC 5626 gives it (480, or 430 for outbound), as if the phone had sent
// it, so failure_route may try elsewhere.
func (w *Worker) flowGone(ct *clientTx) {
	w.Stats.FlowsGone++
	code, reason := flowCode(ct.dst.ob)
	w.log.Info("the connection the callee registered on is gone", "flow", ct.dst.addr.String(), "proto", ct.dst.proto, "answer", code)
	w.linger(ct, txn.Completed)
	t := ct.stx
	w.branchFinal(ct, code, reason, w.txReply(t, code, reason, nil), nil)
}

// withVia serialises req with this server's Via on top, for destination d,
// and leaves req as it was. Over UDP with reply sockets, the Via names this
// worker's reply socket and d is marked to leave from it.
func (w *Worker) withVia(req *sip.Request, d *dest) ([]byte, string) {
	local, proto := w.localFor(*d)
	if d.proto == "udp" && d.sock >= 0 && d.sock < len(w.replyPort) {
		local = netip.AddrPortFrom(local.Addr(), w.replyPort[d.sock])
		d.reply = true
	}
	branch := w.newBranch()
	if stream(d.proto) && req.ContentLength() == nil {
		cl := sip.ContentLengthHeader(len(req.Body()))
		req.AppendHeader(&cl)
	}
	// The Via line is written straight into the serialised request, after
	// its start line: a sip.ViaHeader prepended and removed again cost five
	// allocations per relayed request (the header, its parameters, a new
	// header list, the host and the port as strings).
	var vb [128]byte
	via := appendVia(vb[:0], proto, local, branch)
	if w.ocOffer(d) {
		via = append(oc.AppendOffer(via[:len(via)-2]), "\r\n"...)
	}

	// Written into the worker's scratch buffer and copied out at its size,
	// so what a transaction keeps for retransmissions is no larger than
	// the request.
	w.wbuf = w.wbuf[:0]
	if !w.wbuf.appendRequest(req, via) {
		var b bytes.Buffer
		b.Grow(1024 + len(via))
		req.StringWrite(&b)
		out := b.Bytes()
		// The start line holds no CRLF of its own.
		at := bytes.Index(out, []byte("\r\n")) + 2
		n := len(out)
		out = append(out, via...)
		copy(out[at+len(via):], out[at:n])
		copy(out[at:], via)
		return out, branch
	}
	out := bytes.Clone(w.wbuf)
	if cap(w.wbuf) > 1<<16 {
		w.wbuf = nil // one large request need not stay
	}
	return out, branch
}

// appendVia appends the Via line (CRLF included) of a request relayed from
// local over proto, as sipgo would write it; the branch is a string on the
// decoded path and bytes on the bytes path.
func appendVia[B string | []byte](via []byte, proto string, local netip.AddrPort, branch B) []byte {
	via = append(via, "Via: SIP/2.0/"...)
	via = append(via, proto...)
	via = append(via, ' ')
	if a := local.Addr(); a.Is6() {
		via = append(via, '[')
		via = a.AppendTo(via)
		via = append(via, ']')
	} else {
		via = a.AppendTo(via)
	}
	if p := local.Port(); p > 0 {
		via = append(via, ':')
		via = strconv.AppendUint(via, uint64(p), 10)
	}
	via = append(via, ";branch="...)
	via = append(via, branch...)
	return append(via, "\r\n"...)
}

func (w *Worker) localFor(d dest) (netip.AddrPort, string) {
	if stream(d.proto) && d.conn != nil {
		return w.tcpAdvertised(d.conn), d.conn.transport()
	}
	if stream(d.proto) {
		// Over a connection another worker reads, or one not yet made:
		// the listening address, as for any connection this server opens.
		return w.tcpAdvertised(&tcpConn{secure: d.proto == "tls"}), viaTransport(d.proto)
	}
	return w.local(source{proto: "udp", sock: d.sock})
}

func (w *Worker) startClient(ct *clientTx) {
	var fr time.Duration
	if ct.stx != nil {
		fr = ct.stx.fr
	}
	w.txns.StartClient(ct, ct.dst.proto == "udp", fr, time.Now())
}

// fireClient runs ct's due deadline.
func (w *Worker) fireClient(ct *clientTx, now time.Time) {
	switch w.txns.FireClient(ct, ct.dst.proto == "udp", now) {
	case txn.Resend:
		w.send(&ct.dst, ct.Bytes)
		w.Stats.Retransmissions++
	case txn.TimedOut:
		w.timeout(ct)
	case txn.Ended:
		w.clientEnded(ct)
	}
}

func (w *Worker) endClientTx(ct *clientTx) {
	w.txns.EndClient(ct)
	w.clientEnded(ct)
}

func (w *Worker) linger(ct *clientTx, state txn.State) {
	w.txns.Linger(ct, state, stream(ct.dst.proto), time.Now())
}

// timeout ends a branch that got no final reply in time: an INVITE that was
// ringing is cancelled, and the server transaction sees a 408 as if the
// branch had sent it, so failure_route can try elsewhere.
func (w *Worker) timeout(ct *clientTx) {
	w.Stats.Timeouts++
	if ct.stx == nil {
		w.endClientTx(ct)
		return
	}
	if ct.Invite && ct.State == txn.Proceeding {
		w.sendCancel(ct)
	}
	w.linger(ct, txn.Completed)
	t := ct.stx
	b := w.txReply(t, 408, "Request Timeout", nil)
	w.branchFinal(ct, 408, "Request Timeout", b, nil)
}

// onResponse handles a reply from downstream.
func (w *Worker) onResponse(res *sip.Response, src source) {
	w.keyBuf = append(append(append(w.keyBuf[:0], branchOf(res.Via())...), '|'), methodOf(res)...)
	ct := w.clientTx(w.keyBuf)
	if ct == nil {
		w.forwardResponse(res)
		return
	}
	code := res.StatusCode
	t := ct.stx
	if t == nil { // the reply to a CANCEL of ours
		if code >= 200 && ct.State < txn.Completed {
			w.linger(ct, txn.Completed)
		}
		return
	}
	switch {
	case code < 200:
		w.provisional(ct)
		if !w.runReply(t, res, src) || code == 100 || t.State != txn.Trying {
			return
		}
		res.RemoveHeader("Via")
		b := serialize(res)
		t.Last, t.LastCode = b, code
		d := w.replyDest(t)
		w.send(&d, b)
	case code < 300:
		again := ct.State == txn.Accepted
		if !again {
			w.linger(ct, txn.Accepted)
			w.runReply(t, res, src)
		}
		res.RemoveHeader("Via")
		b := serialize(res)
		if again || t.State != txn.Trying {
			// The UAS says its 2xx again; the UAC's ACK stops it. A proxy
			// passes every 2xx on (RFC 3261 16.7).
			d := w.replyDest(t)
			w.send(&d, b)
			return
		}
		w.branchFinal(ct, code, res.Reason, b, res)
	default:
		if ct.State >= txn.Completed {
			if ct.Invite {
				w.sendAck(ct, res)
			}
			return
		}
		if ct.Invite {
			w.sendAck(ct, res)
		}
		w.linger(ct, txn.Completed)
		w.runReply(t, res, src)
		res.RemoveHeader("Via")
		w.branchFinal(ct, code, res.Reason, serialize(res), res)
	}
}

// provisional moves a client transaction on for a provisional reply: to
// Proceeding, with fr_inv for an INVITE and T2 retransmissions for others,
// and sends the CANCEL that waited for it.
func (w *Worker) provisional(ct *clientTx) {
	var frInv time.Duration
	if ct.stx != nil {
		frInv = ct.stx.frInv
	}
	w.txns.Provisional(ct, ct.dst.proto == "udp", frInv, time.Now())
	if ct.cancelPending {
		w.sendCancel(ct)
	}
}

// relayResponse relays a provisional or 2xx response to a request this
// worker relayed, without building it with sipgo: the front door's scanner
// finds the branch, and the response goes upstream byte for byte less its
// top Via, as onResponse would send it. A proxied call's responses are half
// its messages, and parsing and rebuilding them was a sixth of a worker's
// CPU. It reports false, having changed nothing, for what onResponse must
// handle: a response the scanner refuses or no transaction of this worker
// waits for, one that an onreply_route is to see, and final responses other
// than 2xx (the hop's ACK, failure routes, the choice among branches).
func (w *Worker) relayResponse(data []byte) bool {
	// Finals of 300 and up take the full path: no need to scan them first.
	if len(data) > 8 && data[8] >= '3' {
		return false
	}
	m := &w.scan
	if sipscan.Scan(data, m) != nil || m.Branch == nil || m.StatusCode >= 300 || w.opt.Script.OnReply[""] != nil {
		return false
	}
	w.keyBuf = append(append(append(w.keyBuf[:0], m.Branch...), '|'), m.CSeqMethodBytes...)
	ct := w.clientTx(w.keyBuf)
	if ct == nil || ct.stx == nil || ct.stx.onReply != "" {
		return false
	}
	t, code := ct.stx, m.StatusCode
	if code < 200 {
		w.provisional(ct)
		if code == 100 || t.State != txn.Trying {
			return true
		}
		b := t.Keep(m, data, false)
		t.Last, t.LastCode = b, code
		d := w.replyDest(t)
		w.send(&d, b)
		return true
	}
	again := ct.State == txn.Accepted
	if !again {
		w.linger(ct, txn.Accepted)
	}
	b := t.Keep(m, data, !again && t.State == txn.Trying && !t.Invite)
	if again || t.State != txn.Trying {
		// As in onResponse: every 2xx goes on (RFC 3261 16.7).
		d := w.replyDest(t)
		w.send(&d, b)
		return true
	}
	w.branchFinal(ct, code, "", b, nil)
	return true
}

// branchFinal records a branch's final reply and, when it was the last
// branch, picks the reply upstream gets, running failure_route first.
func (w *Worker) branchFinal(ct *clientTx, code int, reason string, b []byte, res *sip.Response) {
	t := ct.stx
	for i, x := range t.branches {
		if x == ct {
			t.branches = slices.Delete(t.branches, i, i+1)
			break
		}
	}
	if t.State != txn.Trying {
		return
	}
	if code < 300 {
		for _, o := range t.branches {
			w.sendCancel(o)
		}
		w.sendFinal(t, b, code)
		return
	}
	if t.bestCode == 0 || better(code, t.bestCode) {
		t.bestCode, t.bestReason, t.bestBytes, t.bestRes = code, reason, b, res
	}
	if len(t.branches) > 0 {
		return
	}
	if t.onFailure != "" && !t.cancelled {
		name := t.onFailure
		t.onFailure = "" // failure_route must be armed again for the next branch
		if blk := w.opt.Script.OnFailure[name]; blk != nil {
			w.runFailure(t, blk)
			if len(t.branches) > 0 || t.State != txn.Trying {
				return
			}
		}
	}
	w.sendFinal(t, t.bestBytes, t.bestCode)
}

// better reports whether final reply code a beats b (RFC 3261 16.7: a 6xx
// wins, then the lowest class; 503 is passed on as 500).
func better(a, b int) bool {
	if a >= 600 || b >= 600 {
		return a >= 600 && b < 600
	}
	return a/100 < b/100
}

// sendAck acknowledges a non-2xx reply hop by hop (RFC 3261 17.1.1.3).
func (w *Worker) sendAck(ct *clientTx, res *sip.Response) {
	b := w.hopRequest(ct, "ACK", res.To())
	if b != nil {
		w.send(&ct.dst, b)
	}
}

// sendCancel cancels a branch; before any provisional reply it only marks it
// (RFC 3261 9.1) and the first provisional reply triggers it.
func (w *Worker) sendCancel(ct *clientTx) {
	if ct.cancelSent || ct.State >= txn.Completed || !ct.Invite {
		return
	}
	if ct.State == txn.Trying {
		ct.cancelPending = true
		return
	}
	ct.cancelSent = true
	b := w.hopRequest(ct, "CANCEL", nil)
	if b == nil {
		return
	}
	// The branch is copied: ct's may live in a pair that is reused
	// before cc ends.
	branch := strings.Clone(ct.Branch)
	cc := &clientTx{Client: txn.Client{Key: branch + "|CANCEL", Branch: branch, Bytes: b}, dst: ct.dst}
	if err := w.send(&cc.dst, b); err != nil {
		return
	}
	w.txns.AddClient(cc)
	w.startClient(cc)
}

// hopRequest builds an ACK or CANCEL for a branch: same Request-URI, top Via
// (so the same branch), Route, From, Call-ID and CSeq number as the request
// it answers; To from the reply for an ACK.
func (w *Worker) hopRequest(ct *clientTx, method string, to *sip.ToHeader) []byte {
	m, err := w.parser.ParseSIP(ct.Bytes)
	if err != nil {
		return nil
	}
	req, ok := m.(*sip.Request)
	if !ok {
		return nil
	}
	repairVias(req)
	var b strings.Builder
	b.WriteString(method)
	b.WriteByte(' ')
	b.WriteString(req.Recipient.String())
	b.WriteString(" SIP/2.0\r\nVia: ")
	b.WriteString(req.Via().Value())
	b.WriteString("\r\nMax-Forwards: 70\r\n")
	for _, h := range req.GetHeaders("Route") {
		b.WriteString("Route: ")
		b.WriteString(h.Value())
		b.WriteString("\r\n")
	}
	b.WriteString("From: ")
	b.WriteString(req.From().Value())
	b.WriteString("\r\nTo: ")
	if to != nil {
		b.WriteString(to.Value())
	} else {
		b.WriteString(req.To().Value())
	}
	b.WriteString("\r\nCall-ID: ")
	b.WriteString(string(*req.CallID()))
	b.WriteString("\r\nCSeq: ")
	b.WriteString(strconv.FormatUint(uint64(req.CSeq().SeqNo), 10))
	b.WriteByte(' ')
	b.WriteString(method)
	b.WriteString("\r\nContent-Length: 0\r\n\r\n")
	return []byte(b.String())
}

// cancelInvite answers a CANCEL that matches INVITE transaction t and
// cancels its branches.
func (w *Worker) cancelInvite(t *serverTx, cancel *sip.Request, src source) {
	w.replyStateless(cancel, src, 200, "OK", nil)
	if t.State != txn.Trying {
		return
	}
	t.cancelled = true
	for _, ct := range t.branches {
		w.sendCancel(ct)
	}
}

// forwardResponse passes on a reply no transaction here waits for (a 2xx
// retransmission after the INVITE ended, or a reply to a stateless relay),
// by its Via.
func (w *Worker) forwardResponse(res *sip.Response) {
	v := res.Via()
	if !w.isMyself(v.Host, v.Port) {
		return
	}
	res.RemoveHeader("Via")
	next := res.Via()
	if next == nil {
		return
	}
	d := w.viaDest(next, source{sock: -1})
	if stream(d.proto) {
		c, err := w.connTo(d.addr, d.proto)
		if err != nil {
			return
		}
		d.conn = c
	}
	w.send(&d, serialize(res))
}

// processAlive reports whether process pid exists. The worker a branch
// names may have died since it relayed the request (a crash): a response
// of its branch is then forwarded by its Via, statelessly, as RFC 3261
// (16.7) asks of a proxy for a response no transaction awaits, rather than
// passed to nobody and dropped with every retransmission. A dead worker
// its supervisor has not reaped yet still exists; the retransmission of
// the response finds it gone.
func processAlive(pid int) bool {
	err := unix.Kill(pid, 0)
	return err == nil || err == unix.EPERM
}

// branchOwner reads the pid of the worker that made a branch of ours
// (wire.BranchOwner).
func branchOwner(branch []byte) (int, bool) { return wire.BranchOwner(branch) }

// passResponse passes a response whose branch another worker made to that
// worker, and reports whether it did. A peer that answers to where the
// call's first request came from rather than to the Via (SIPp's uas does)
// reaches the worker that relayed the INVITE with the answer to a BYE
// another worker relayed, after a TCP connection moved between workers.
func (w *Worker) passResponse(data []byte, src source) bool {
	if w.opt.PassResponse == nil {
		return false
	}
	m := &w.scan
	if sipscan.Scan(data, m) != nil || m.Branch == nil {
		return false
	}
	pid, ok := branchOwner(m.Branch)
	if !ok || pid == w.pid || !processAlive(pid) {
		return false
	}
	w.Stats.PassedResponses++
	w.opt.PassResponse(pid, src.addr.String(), data)
	return true
}
