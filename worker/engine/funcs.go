package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/location"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/script"
	"github.com/sipvisor/sipvisor/worker"
	"github.com/sipvisor/sipvisor/worker/engine/txn"
)

// storeFor picks where registrations live. A shared store (an SQLite file,
// Redis) the worker opens itself: a call to it costs less than the round
// trip through the supervisor did (docs/DESIGN.md, "Why it is built this
// way"). The memory store is the supervisor's, reached over the control
// channel. A worker run without a supervisor (as in tests) keeps them in
// this process.
func storeFor(env *worker.Env, cfg *config.Config, logger *slog.Logger) (location.Store, error) {
	if env.Call == nil {
		logger.Warn("no supervisor to keep registrations; they live in this worker only")
		return location.NewMemory(), nil
	}
	sp, err := cfg.Store()
	if err != nil {
		return nil, err
	}
	if !sp.Shared() {
		return location.NewRemote(env.Call), nil
	}
	return location.Open(sp)
}

// reportFor sends the count of failed store calls to the supervisor, for
// its sipvisor_location_store_errors_total.
func reportFor(env *worker.Env, logger *slog.Logger) func(uint64) {
	if env.Call == nil {
		return nil
	}
	return func(n uint64) {
		if _, err := env.Call(location.ErrorReport(n)); err != nil {
			logger.Debug("store error report failed", "error", err)
		}
	}
}

// admitFor decides by the worker's gate and quota or asks the
// supervisor's admission (worker.Env.Admit), when the worker can call it.
func admitFor(env *worker.Env) func(overload.Class, sipscan.Kind, sipscan.Method, []byte, int64) (bool, int) {
	if env.Call == nil {
		return nil
	}
	return func(c overload.Class, k sipscan.Kind, m sipscan.Method, callID []byte, wait int64) (bool, int) {
		r, retry := env.Admit(c, k, m, callID, wait)
		return r != overload.RefuseNone, retry
	}
}

// passFor asks the supervisor to pass a request to the worker that holds
// the connection it is to go over, when the worker has one.
func passFor(env *worker.Env, logger *slog.Logger) func(int, netip.AddrPort, netip.AddrPort, []byte) bool {
	if env.Call == nil {
		return nil
	}
	return func(sock int, to, from netip.AddrPort, msg []byte) bool {
		ans, err := env.Call(wire.PassRequest(sock, to, from, msg))
		if err != nil {
			logger.Warn("passing a request to the worker holding its connection failed", "to", to.String(), "error", err)
			return false
		}
		return len(ans) == 1 && ans[0] == 1
	}
}

// noteFor passes session notes to the supervisor, when the worker has one:
// with others, in one write (worker.Env.NoteSoon), where the worker
// gathers them. A note that cannot be written costs the count one
// session, not the call.
func noteFor(env *worker.Env) func(sipscan.Method, bool, int32, []byte, []byte) {
	if env.NoteSoon != nil {
		// Encoded where the next note reuses it: NoteSoon copies it.
		var buf []byte
		return func(m sipscan.Method, toTag bool, expires int32, branch, callID []byte) {
			buf = wire.AppendSessionNote(buf[:0], byte(m), toTag, expires, branch, callID)
			env.NoteSoon(buf)
		}
	}
	if env.Note == nil {
		return nil
	}
	return func(m sipscan.Method, toTag bool, expires int32, branch, callID []byte) {
		env.Note(wire.SessionNote(byte(m), toTag, expires, branch, callID))
	}
}

// authFailedFor tells the supervisor of failed authentications.
func authFailedFor(env *worker.Env) func(netip.Addr, string) {
	if env.Note == nil {
		return nil
	}
	return func(src netip.Addr, user string) { env.Note(wire.AuthFailNote(src, user)) }
}

// closedFor tells the supervisor of the connections that end.
func closedFor(env *worker.Env) func(reason, remote string) {
	if env.Note == nil {
		return nil
	}
	return func(reason, remote string) { env.Note(wire.ConnClosedNote(reason, remote)) }
}

// handOffFor gives connections back to the supervisor.
func handOffFor(env *worker.Env) func(remote string, prefix, tlsState []byte) {
	if env.Note == nil {
		return nil
	}
	return func(remote string, prefix, tlsState []byte) {
		if tlsState != nil {
			env.Note(wire.HandOffTLSNote(remote, prefix, tlsState))
			return
		}
		env.Note(wire.HandOffNote(remote, prefix))
	}
}

// passResponseFor passes responses to the worker that holds their
// transaction.
func passResponseFor(env *worker.Env) func(int, string, []byte) {
	if env.Note == nil {
		return nil
	}
	return func(pid int, from string, msg []byte) {
		if env.Forward != nil && env.Forward(pid, from, msg) {
			return
		}
		env.Note(wire.ForwardNote(pid, from, msg))
	}
}

// funcImpl runs one script function; its result is the condition value.
type funcImpl func(c *msgCtx, args []*script.Literal) bool

// functions pairs every name of script.Functions with its implementation;
// TestEveryFunctionImplemented keeps the two tables in step.
var functions map[string]funcImpl

func init() {
	functions = map[string]funcImpl{
		"sl_send_reply":            fnSlSendReply,
		"t_relay":                  fnTRelay,
		"t_on_reply":               fnTOnReply,
		"t_on_failure":             fnTOnFailure,
		"t_check_trans":            fnTCheckTrans,
		"record_route":             fnRecordRoute,
		"loose_route":              fnLooseRoute,
		"mf_process_maxfwd_header": fnMaxFwd,
		"is_method":                fnIsMethod,
		"has_totag":                fnHasTotag,
		"is_myself":                fnIsMyself,
		"save":                     fnSave,
		"lookup":                   fnLookup,
		"www_authorize":            fnWWWAuthorize,
		"proxy_authorize":          fnProxyAuthorize,
		"www_challenge":            fnWWWChallenge,
		"proxy_challenge":          fnProxyChallenge,
		"consume_credentials":      fnConsumeCredentials,
		"append_hf":                fnAppendHF,
		"remove_hf":                fnRemoveHF,
		"xlog":                     fnXlog,
		"force_rport":              fnForceRport,
		"nat_uac_test":             fnNatUACTest,
		"fix_nated_contact":        fnFixNatedContact,
		"fix_nated_register":       fnFixNatedRegister,
		"usleep":                   fnUsleep,
		"sleep":                    fnSleep,
		"cpu_burn":                 fnCPUBurn,
		"ds_select_dst":            fnDsSelectDst,
		"ds_next_dst":              fnDsNextDst,
		"ds_mark_dst":              fnDsMarkDst,
		"ds_is_from_list":          fnDsIsFromList,
		"t_set_fr":                 fnTSetFr,
	}
}

func (c *msgCtx) call(s *script.Call) bool {
	fn, ok := functions[s.Name]
	if !ok {
		c.w.log.Warn("unknown function", "name", s.Name, "at", s.Pos.String())
		return false
	}
	if c.m != nil && !onBytes[s.Name] && !c.decode() {
		return false
	}
	return fn(c, s.Args)
}

// intArg reads an integer argument written bare or quoted.
func (c *msgCtx) intArg(a *script.Literal) (int64, bool) {
	if a.IsInt {
		return a.Int, true
	}
	n, err := strconv.ParseInt(strings.TrimSpace(c.expand(a)), 10, 64)
	if err != nil {
		c.w.log.Warn("argument wants a whole number", "value", a.Str, "at", a.Pos.String())
		return 0, false
	}
	return n, true
}

func fnSlSendReply(c *msgCtx, a []*script.Literal) bool {
	if c.m != nil && c.m.Method == sipscan.Ack {
		return false
	}
	if c.m == nil && (c.req == nil || c.req.Method == sip.ACK) {
		return false // nothing answers an ACK
	}
	code, ok := c.intArg(a[0])
	if !ok || code < 100 || code > 699 {
		return false
	}
	reason := c.expand(a[1])
	if c.m != nil && (c.stx == nil || c.stx.State != txn.Trying) {
		c.replyBytes(int(code), reason)
		return true
	}
	if !c.decode() {
		return false
	}
	if c.stx != nil && c.stx.State == txn.Trying {
		c.w.reply(c.stx, int(code), reason)
		return true
	}
	c.w.replyStateless(c.req, c.src, int(code), reason, nil)
	return true
}

// target is where the request goes: $du when set, else the Request-URI;
// over TCP or TLS, with the connection to use. A next hop that is this
// server is errLoop.
func (c *msgCtx) target() (dest, error) {
	d, err := c.dest()
	if err != nil {
		return d, err
	}
	if c.w.ownDest(d) {
		return d, errLoop
	}
	if stream(d.proto) {
		if c.flowDu != "" && c.du == c.flowDu {
			d.flow, d.ob = true, c.flowOb
			d.alt = c.w.contactDest(&c.req.Recipient, d, c.flowCaller)
		}
		if tc, ok := c.w.conns[d.addr]; ok && !tc.closed && tc.proto() == d.proto {
			d.conn = tc
			return d, nil
		}
		// A flow, or a connection another worker may read: send asks
		// for its holder first.
		if d.flow || c.w.opt.WriteVia != nil {
			return d, nil
		}
		if d.conn, err = c.w.connTo(d.addr, d.proto); err != nil {
			return d, err
		}
	}
	return d, nil
}

// dest is target without a connection.
func (c *msgCtx) dest() (dest, error) {
	u := &c.req.Recipient
	if c.du != "" {
		var du sip.Uri
		if err := sip.ParseUri(strings.Trim(c.du, "<> "), &du); err != nil {
			return dest{}, fmt.Errorf("bad $du %q: %w", c.du, err)
		}
		u = &du
	}
	sock := c.src.sock
	if sock < 0 {
		sock = 0
	}
	return c.w.resolve(u, sock)
}

// writeFor asks the supervisor to have the worker that reads a connection
// write a message on it.
func writeFor(env *worker.Env, logger *slog.Logger) func(byte, netip.AddrPort, []byte) bool {
	if env.Call == nil {
		return nil
	}
	return func(flags byte, to netip.AddrPort, msg []byte) bool {
		ans, err := env.Call(wire.WriteRequest(flags, to, msg))
		if err != nil {
			logger.Warn("asking the worker holding a connection to write on it failed", "to", to.String(), "error", err)
			return false
		}
		return len(ans) == 1 && ans[0] == 1
	}
}

// passToHolder hands a request that came over UDP, and is to go over TCP or
// TLS to an address this worker holds no connection to, to the worker
// that reads the connection from that address, which handles it from the
// start; it reports whether it did. So a TCP or TLS caller that accepts no
// connections gets the callee's BYE whichever worker it comes to. What
// came over a connection stays: its responses must go back on it. So does
// a request for a phone's flow (lookup's, or its dialog's as the called
// side), which the holder writes (Options.WriteVia): run again there from
// the start, the script would check its credentials a second time, and
// the nonce-count they used is spent (a replay, 407). A caller's flow, in
// its dialog's in-dialog requests, is passed as any connection is.
func (c *msgCtx) passToHolder() bool {
	w := c.w
	if c.raw == nil || w.opt.PassToHolder == nil || c.src.conn != nil || c.src.sock < 0 {
		return false
	}
	if c.flowDu != "" && c.du == c.flowDu && !c.flowCaller && w.opt.WriteVia != nil {
		return false
	}
	d, err := c.dest()
	if err != nil || !stream(d.proto) {
		return false
	}
	if tc, ok := w.conns[d.addr]; ok && !tc.closed {
		return false
	}
	if !w.opt.PassToHolder(c.src.sock, d.addr, c.src.addr, c.raw) {
		return false
	}
	w.Stats.Passed++
	c.stopped = true
	return true
}

func fnTRelay(c *msgCtx, _ []*script.Literal) bool {
	if c.m != nil {
		if ok, done := c.relayBytes(); done {
			return ok
		}
		if !c.decode() {
			return false
		}
	}
	req, w := c.req, c.w
	if req == nil {
		return false
	}
	switch req.Method {
	case sip.ACK:
		if w.absorb(req) {
			c.stopped = true
			return true
		}
		return c.relayStateless()
	case sip.CANCEL:
		if t := w.findServerTx(req, "INVITE"); t != nil {
			w.cancelInvite(t, req, c.src)
			return true
		}
		return c.relayStateless()
	}
	t := c.stx
	if t == nil {
		if w.absorb(req) {
			c.stopped = true
			return true
		}
		if c.passToHolder() {
			return true
		}
	}
	d, err := c.target()
	if errors.Is(err, errLoop) {
		// A next hop that is this server is a loop: answered at once,
		// before a 100 Trying, rather than sent round until Max-Forwards
		// runs out.
		w.loop(req)
		if t != nil {
			w.reply(t, 482, "Loop Detected")
		} else {
			w.replyStateless(req, c.src, 482, "Loop Detected", nil)
		}
		c.stopped = true
		return true
	}
	if t == nil {
		t = w.newServerTx(req, c.src)
		c.stx = t
		if t.Invite {
			// Stops the upstream's timer A at once (RFC 3261 16.2).
			w.reply(t, 100, "Trying")
		}
	}
	if c.onReply != "" {
		t.onReply = c.onReply
	}
	if c.onFailure != "" {
		t.onFailure = c.onFailure
	}
	c.toTx(t)
	if err == nil {
		if c.rr && !c.rrDone {
			c.addRecordRoute(d)
		}
		if w.relayBranch(t, req, d) {
			return true
		}
	} else {
		w.Stats.SendErrors++
		w.log.Warn("relay failed", "error", err)
	}
	if t.relayed == 0 {
		w.endServerTx(t)
		c.stx = nil
	}
	return false
}

func (c *msgCtx) relayStateless() bool {
	if c.passToHolder() {
		return true
	}
	d, err := c.target()
	if errors.Is(err, errLoop) {
		c.w.loop(c.req)
		return true // an ACK or CANCEL: nothing to answer, nothing to send
	}
	if err != nil {
		c.w.log.Warn("relay failed", "error", err)
		return false
	}
	b, _ := c.w.withVia(c.req, &d)
	return c.w.send(&d, b) == nil
}

// addRecordRoute inserts this server's address; when the request leaves by
// another transport or socket than it came in on, both are inserted (double
// record-routing), so in-dialog requests cross the same way in each
// direction.
func (c *msgCtx) addRecordRoute(d dest) {
	c.rrDone = true
	in, inProto := c.w.local(c.src)
	out, outProto := c.w.localFor(d)
	// The side of a phone's flow carries its flow token, which routes the
	// dialog's requests to the phone over that flow (loose_route).
	inTok, outTok := c.w.inFlow(c.src), c.w.outFlow(d)
	rr := func(a netip.AddrPort, proto, tok string) sip.Header {
		u := sip.Uri{Scheme: "sip", User: tok, Host: a.Addr().String(), Port: int(a.Port()), UriParams: sip.HeaderParams{{K: "lr"}}}
		if proto != "UDP" {
			u.UriParams.Add("transport", strings.ToLower(proto))
		}
		return &sip.RecordRouteHeader{Address: u}
	}
	c.req.PrependHeader(rr(in, inProto, inTok))
	if in != out || inProto != outProto || inTok != outTok {
		c.req.PrependHeader(rr(out, outProto, outTok))
	}
}

func fnTOnReply(c *msgCtx, a []*script.Literal) bool {
	c.onReply = c.expand(a[0])
	if c.stx != nil {
		c.stx.onReply = c.onReply
	}
	return true
}

func fnTOnFailure(c *msgCtx, a []*script.Literal) bool {
	c.onFailure = c.expand(a[0])
	if c.stx != nil {
		c.stx.onFailure = c.onFailure
	}
	return true
}

func fnTCheckTrans(c *msgCtx, _ []*script.Literal) bool {
	if c.m != nil && c.m.Method != sipscan.Cancel {
		if c.absorbBytes() {
			c.stopped = true
			return true
		}
		if c.m.Method != sipscan.Ack {
			return false
		}
		c.w.keyBuf = appendDialogKey(c.w.keyBuf[:0], c.m)
		t := c.w.dialogTx(c.w.keyBuf)
		return t != nil && t.State == txn.Accepted
	}
	if !c.decode() {
		return false
	}
	req, w := c.req, c.w
	if req == nil {
		return false
	}
	switch req.Method {
	case sip.CANCEL:
		return w.findServerTx(req, "INVITE") != nil
	case sip.ACK:
		if w.absorb(req) {
			c.stopped = true // the ACK of a non-2xx ends here (hop by hop)
			return true
		}
		w.keyBuf = appendDialogKeyOf(w.keyBuf[:0], req)
		t := w.dialogTx(w.keyBuf)
		return t != nil && t.State == txn.Accepted
	}
	if w.absorb(req) {
		c.stopped = true
		return true
	}
	return false
}

func fnRecordRoute(c *msgCtx, _ []*script.Literal) bool {
	if c.m != nil {
		c.rr = true
		return true
	}
	if c.req == nil {
		return false
	}
	c.rr = true
	return true
}

func fnLooseRoute(c *msgCtx, _ []*script.Literal) bool {
	if c.m != nil {
		if ok, done := c.looseRouteBytes(); done {
			return ok
		}
		if !c.decode() {
			return false
		}
	}
	if c.req == nil {
		return false
	}
	// The first Route header as GetHeaders would list it, found without
	// building the list.
	first := func() sip.Header {
		for _, h := range c.req.Headers() {
			if sip.HeaderToLower(h.Name()) == "route" {
				return h
			}
		}
		return nil
	}
	h := first()
	if h == nil {
		return false
	}
	// The last of our Routes says which side the request goes to: one
	// with a flow token faces a phone's flow (addRecordRoute).
	var last *sip.Uri
	for h != nil {
		rh, ok := h.(*sip.RouteHeader)
		if !ok || !c.w.isMyself(rh.Address.Host, rh.Address.Port) {
			break
		}
		u := rh.Address
		last = &u
		c.req.RemoveHeader("Route")
		h = first()
	}
	if rh, ok := h.(*sip.RouteHeader); ok {
		c.du = rh.Address.String()
		return true
	}
	if last != nil && last.User != "" {
		if addr, flags, ok := c.w.parseFlowToken(last.User); ok {
			proto := "tcp"
			if t, ok := last.UriParams.Get("transport"); ok {
				proto = strings.ToLower(t)
			}
			// A request from the flow itself goes by its Request-URI.
			if stream(proto) && !(c.src.conn != nil && c.src.addr == addr) {
				c.setFlow(addr, proto, flags&flowTokenOb != 0)
				c.flowCaller = flags&flowTokenCaller != 0
			}
		}
	}
	return true
}

func fnMaxFwd(c *msgCtx, a []*script.Literal) bool {
	if c.req == nil && c.m == nil {
		return false
	}
	n, ok := c.intArg(a[0])
	if !ok || n < 0 {
		return false
	}
	if c.m != nil {
		mf := c.bs.mf
		if mf < 0 {
			mf = c.m.MaxForwards
		}
		switch {
		case mf < 0:
			c.bs.mf = int(n)
		case mf == 0:
			return false
		default:
			c.bs.mf = mf - 1
		}
		return true
	}
	mf := c.req.MaxForwards()
	if mf == nil {
		h := sip.MaxForwardsHeader(n)
		c.req.AppendHeader(&h)
		return true
	}
	if *mf == 0 {
		return false
	}
	mf.Dec()
	return true
}

func fnIsMethod(c *msgCtx, a []*script.Literal) bool {
	if c.m != nil {
		if want := c.expand(a[0]); c.m != nil {
			method := c.m.MethodBytes
			for rest, more := want, true; more; {
				var w string
				w, rest, more = strings.Cut(rest, "|")
				if foldEq(method, strings.TrimSpace(w)) {
					return true
				}
			}
			return false
		}
	}
	m := c.msg()
	if m == nil {
		return false
	}
	method := methodOf(m)
	if c.req != nil {
		method = string(c.req.Method)
	}
	// Cut rather than Split: a list of methods is tested for most
	// requests, and Split allocated it each time.
	for rest, more := c.expand(a[0]), true; more; {
		var want string
		want, rest, more = strings.Cut(rest, "|")
		if strings.EqualFold(strings.TrimSpace(want), method) {
			return true
		}
	}
	return false
}

func fnHasTotag(c *msgCtx, _ []*script.Literal) bool {
	if c.m != nil {
		return c.m.HasToTag
	}
	m := c.msg()
	if m == nil {
		return false
	}
	_, ok := param(m.To().Params, "tag")
	return ok
}

func fnIsMyself(c *msgCtx, a []*script.Literal) bool {
	if c.m != nil {
		if ok, done := c.isMyselfBytes(a[0]); done {
			return ok
		}
		if !c.decode() {
			return false
		}
	}
	if u := c.uriVar(a[0]); u != nil {
		return c.w.isMyself(u.Host, u.Port)
	}
	return c.w.uriIsMyself(c.expand(a[0]))
}

// uriVar is the URI an argument that is just $ru, $fu or $tu names, when
// its host reads back as written: is_myself($ru) and is_myself($fu), on
// every new request of the usual script, then test it as it is, where
// writing the URI out to parse it again cost five allocations.
func (c *msgCtx) uriVar(l *script.Literal) *sip.Uri {
	if l.IsInt || len(l.Str) != 3 || l.Str[0] != '$' {
		return nil
	}
	var u *sip.Uri
	switch l.Str {
	case "$ru":
		if c.req != nil {
			u = &c.req.Recipient
		}
	case "$fu", "$tu":
		if m := c.msg(); m != nil {
			if l.Str == "$fu" && m.From() != nil {
				u = &m.From().Address
			} else if l.Str == "$tu" && m.To() != nil {
				u = &m.To().Address
			}
		}
	}
	if u == nil || u.Raw() != "" || u.Host == "" || strings.ContainsAny(u.Host, "[]:@;?<> \t") ||
		(u.Scheme != "sip" && u.Scheme != "sips") {
		return nil
	}
	return u
}

// defaultExpires applies when a REGISTER says nothing (RFC 3261 10.2.1.1
// leaves it to the registrar; OpenSIPS uses 3600).
const defaultExpires = 3600

func fnSave(c *msgCtx, _ []*script.Literal) bool {
	if c.m != nil {
		if ok, done := c.saveBytes(); done {
			return ok
		}
		if !c.decode() {
			return false
		}
	}
	req, w := c.req, c.w
	if req == nil || req.Method != sip.REGISTER {
		return false
	}
	to := &req.To().Address
	if len(w.opt.Domains) > 0 && !w.served(to.Host) && !w.isOwnAddr(to.Host, to.Port) {
		// RFC 3261 10.3 step 1: this registrar does not keep the
		// bindings of other domains.
		w.replyStateless(req, c.src, 403, "Domain Not Served Here", nil)
		return false
	}
	aor := w.aorOf(to)
	expires := int64(defaultExpires)
	if h := headerValue(req, "Expires"); h != "" {
		n, err := strconv.ParseInt(strings.TrimSpace(h), 10, 64)
		if err != nil || n < 0 {
			w.replyStateless(req, c.src, 400, "Bad Expires", nil)
			return false
		}
		expires = n
	}
	now := time.Now()
	var received, proto string
	if c.src.addr.IsValid() {
		received, proto = c.natReceived(c.src.addr.String()), c.src.proto
	}
	path := pathOf(req)
	// The REGISTER's changes go to the store in one call, which brings
	// back the bindings its 200 OK lists.
	ch := location.Change{AOR: aor}
	for _, h := range req.GetHeaders("Contact") {
		ct, ok := h.(*sip.ContactHeader)
		if !ok {
			continue
		}
		if ct.Address.Wildcard {
			if expires != 0 || len(req.GetHeaders("Contact")) > 1 {
				w.replyStateless(req, c.src, 400, "Invalid Contact *", nil)
				return false
			}
			ch.RemoveAll = true
			continue
		}
		exp := expires
		if v, ok := ct.Params.Get("expires"); ok {
			if n, err := strconv.ParseInt(v, 10, 64); err == nil && n >= 0 {
				exp = n
			}
		}
		instance, regID, refuse := outboundOf(ct, path, c.src)
		if refuse {
			// RFC 5626 6: the phone asked for outbound, and the proxy in
			// front of this registrar does not do it.
			w.replyStateless(req, c.src, 439, "First Hop Lacks Outbound Support", nil)
			return false
		}
		b := location.Binding{
			Contact:   ct.Address.String(),
			Expires:   now.Add(time.Duration(exp) * time.Second),
			CallID:    string(*req.CallID()),
			CSeq:      req.CSeq().SeqNo,
			Received:  received,
			Proto:     proto,
			UserAgent: headerValue(req, "User-Agent"),
			Instance:  instance,
			RegID:     regID,
			Path:      strings.Join(path, ","),
		}
		if exp == 0 {
			b.Expires = now
		} else if w.contactLoops(&ct.Address) {
			// Every request to this AOR would come straight back here.
			w.Stats.Loops++
			w.log.Warn("REGISTER refused: its contact is this server", "aor", aor, "contact", b.Contact, "source", received)
			w.replyStateless(req, c.src, 403, "Contact Is This Server (Loop)", nil)
			return false
		}
		ch.Bindings = append(ch.Bindings, b)
	}
	gone, err := w.replacedFlows(aor, ch.Bindings, now)
	if err != nil {
		w.storeFailed(c, "lookup", aor, err)
		return false
	}
	ch.Bindings = append(gone, ch.Bindings...)
	return w.saveChange(c, ch)
}

func fnLookup(c *msgCtx, _ []*script.Literal) bool {
	if c.m != nil {
		if ok, done := c.lookupBytes(); done {
			return ok
		}
		if !c.decode() {
			return false
		}
	}
	if c.req == nil {
		return false
	}
	aor := c.w.aorOf(&c.req.Recipient)
	// A REGISTER of this turn is visible to the lookup.
	c.w.EndTurn()
	bs, err := c.w.opt.Store.Lookup(aor)
	if err != nil {
		// Not a 404: the user may well be registered.
		c.w.storeFailed(c, "lookup", aor, err)
		return false
	}
	return c.useBindings(bs)
}

// useBindings routes the request to the first of an AOR's bindings whose
// contact reads.
func (c *msgCtx) useBindings(bs []location.Binding) bool {
	for i := range bs {
		b := &bs[i]
		var u sip.Uri
		if err := sip.ParseUri(b.Contact, &u); err != nil || u.Host == "" {
			continue
		}
		c.req.Recipient = u
		// Through the proxies it registered by (RFC 3327); else a phone
		// registered over a connection is reached over it, whatever its
		// Contact names (flow.go); one behind NAT over UDP at the
		// address its REGISTER came from (nat.go).
		if b.Path != "" && c.applyPath(b.Path) {
			return true
		}
		if addr, ok := bindingFlow(b); ok {
			c.setFlow(addr, b.Proto, hasOb(&u))
			return true
		}
		c.natRoute(b)
		return true
	}
	return false
}

func fnAppendHF(c *msgCtx, a []*script.Literal) bool {
	m := c.msg()
	if m == nil {
		return false
	}
	text := strings.TrimRight(c.expand(a[0]), "\r\n")
	added := false
	for _, line := range strings.Split(text, "\r\n") {
		i := strings.IndexByte(line, ':')
		if i <= 0 {
			c.w.log.Warn("append_hf wants \"Name: value\"", "text", line)
			continue
		}
		m.AppendHeader(sip.NewHeader(strings.TrimSpace(line[:i]), strings.TrimSpace(line[i+1:])))
		added = true
	}
	return added
}

func fnRemoveHF(c *msgCtx, a []*script.Literal) bool {
	m := c.msg()
	if m == nil {
		return false
	}
	want := headerName(c.expand(a[0]))
	removed := false
	for {
		var name string
		for _, h := range headersOf(m) {
			if headerName(h.Name()) == want {
				name = h.Name()
				break
			}
		}
		if name == "" {
			return removed
		}
		switch x := m.(type) {
		case *sip.Request:
			x.RemoveHeader(name)
		case *sip.Response:
			x.RemoveHeader(name)
		}
		removed = true
	}
}

func fnXlog(c *msgCtx, a []*script.Literal) bool {
	level, text := slog.LevelInfo, a[0]
	if len(a) == 2 {
		text = a[1]
		switch strings.ToUpper(c.expand(a[0])) {
		case "L_ERR", "L_CRIT", "L_ALERT":
			level = slog.LevelError
		case "L_WARN":
			level = slog.LevelWarn
		case "L_DBG":
			level = slog.LevelDebug
		}
	}
	c.w.log.Log(context.Background(), level, strings.TrimRight(c.expand(text), "\n"), "component", "script")
	return true
}

func fnForceRport(c *msgCtx, _ []*script.Literal) bool {
	if c.m != nil {
		if ok, done := c.forceRportBytes(); done {
			return ok
		}
		if !c.decode() {
			return false
		}
	}
	if c.req == nil || !c.src.addr.IsValid() {
		return false
	}
	forceRport(c.req, c.src)
	return true
}

// forceRport is force_rport's change to req's top Via.
func forceRport(req *sip.Request, src source) {
	v := req.Via()
	v.Params.Add("rport", strconv.Itoa(int(src.addr.Port())))
	v.Params.Add("received", src.addr.Addr().String())
}

func fnUsleep(c *msgCtx, a []*script.Literal) bool {
	n, ok := c.intArg(a[0])
	if !ok || n < 0 {
		return false
	}
	time.Sleep(time.Duration(n) * time.Microsecond)
	return true
}

func fnSleep(c *msgCtx, a []*script.Literal) bool {
	n, ok := c.intArg(a[0])
	if !ok || n < 0 {
		return false
	}
	time.Sleep(time.Duration(n) * time.Second)
	return true
}

// fnCPUBurn spins rather than sleeps, so the cost shows as CPU as well as
// busy time: what a script doing real work would cost.
func fnCPUBurn(c *msgCtx, a []*script.Literal) bool {
	n, ok := c.intArg(a[0])
	if !ok || n < 0 {
		return false
	}
	// Spinning on the clock is the work: it keeps the worker's thread on
	// the CPU for n µs whatever the compiler makes of the loop.
	end := time.Now().Add(time.Duration(n) * time.Microsecond)
	for time.Now().Before(end) {
	}
	return true
}

// runReply runs the onreply_route blocks for a reply of t: the unnamed one
// for every reply, then the one t_on_reply armed. It reports false when the
// script dropped the reply.
func (w *Worker) runReply(t *serverTx, res *sip.Response, src source) bool {
	keep := true
	names := []string{""}
	if t.onReply != "" {
		names = append(names, t.onReply)
	}
	for _, name := range names {
		blk := w.opt.Script.OnReply[name]
		if blk == nil {
			continue
		}
		c := w.newCtx(nil, res, src)
		c.stx = t
		c.run(blk)
		if c.dropped {
			keep = false
		}
	}
	return keep
}

// runFailure runs a failure_route for t with the request as it was first
// relayed and the best reply so far.
func (w *Worker) runFailure(t *serverTx, blk *script.Block) {
	m, err := w.parser.ParseSIP(t.firstRelay)
	if err != nil {
		return
	}
	req, ok := m.(*sip.Request)
	if !ok {
		return
	}
	req.RemoveHeader("Via")
	c := w.newCtx(req, t.bestRes, t.src)
	c.stx = t
	c.inFailure = true
	c.rrDone = true
	c.rsCode, c.rsReason = t.bestCode, t.bestReason
	c.run(blk)
}
