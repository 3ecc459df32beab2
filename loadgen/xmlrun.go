package loadgen

import (
	"bytes"
	"fmt"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/sipvisor/sipvisor/overload/oc"
)

// xstate is where a call is in an XML scenario, and what it remembers of
// the messages it sent and received for the keywords of the next ones.
type xstate struct {
	idx          int // the command the call is at
	cseq         uint32
	lastRecv     []byte
	lastRecvIdx  int
	lastRecvHash uint64
	// recvRtxHash is the message received just before the last send that
	// followed a receive: its retransmission is answered with recvRtxMsg.
	recvRtxHash uint64
	recvRtxMsg  []byte
	lastSend    []byte
	lastSendIdx int
	rtxAt       time.Duration // due time of the pending retransmission; -1: none
	rtxN        int
	rtxDelay    time.Duration
	wakeAt      time.Duration // end of the pause or receive timeout; -1: none
	peerTag     []byte
	routes      []byte
	nextURL     []byte
	challenge   []byte
	chalCode    int
	nc          uint32
	rtdStart    time.Duration
	vars        []xvar
	infLine     int
	// authCmd is 1 + the index of the send command sent again with
	// credentials after a challenge the scenario did not expect (built-in
	// scenarios, -ap); 0 until then.
	authCmd int
	user    int // --users: index of the user this call is; -1 without
	// lines index lastRecv's header lines once for its [last_*] keywords.
	lines   []hdrLine
	linesOK bool
}

// hdrLine is a header line of a call's last message received: its offsets
// in lastRecv, and where its name ends (blanks before the colon left out).
type hdrLine struct{ start, nameEnd, end int }

// nameIs is hdrIs without allocating or building sets: name is the
// header's name as written, long or compact (short, "" if none).
func nameIs(name []byte, long, short string) bool {
	if len(name) == 1 {
		return short != "" && name[0]|0x20 == short[0]
	}
	if len(name) != len(long) {
		return false
	}
	for i := range name {
		a, b := name[i], long[i]
		if a == b {
			continue
		}
		if a|0x20 != b|0x20 || a|0x20 < 'a' || a|0x20 > 'z' {
			return false
		}
	}
	return true
}

// recvLines indexes the header lines of xs.lastRecv, once per message.
func (xs *xstate) recvLines() []hdrLine {
	if xs.linesOK {
		return xs.lines
	}
	if xs.lines == nil {
		xs.lines = make([]hdrLine, 0, 16)
	}
	xs.lines = xs.lines[:0]
	raw := xs.lastRecv
	pos := bytes.Index(raw, crlf)
	for pos >= 0 && pos+2 < len(raw) {
		rest := raw[pos+2:]
		e := bytes.Index(rest, crlf)
		if e <= 0 {
			break
		}
		start := pos + 2
		pos += 2 + e
		if colon := bytes.IndexByte(rest[:e], ':'); colon > 0 {
			for colon > 0 && (rest[colon-1] == ' ' || rest[colon-1] == '\t') {
				colon--
			}
			xs.lines = append(xs.lines, hdrLine{start, start + colon, start + e})
		}
	}
	xs.linesOK = true
	return xs.lines
}

type xvar struct {
	s   string
	f   float64
	num bool
	set bool
}

func (v xvar) float() float64 {
	if v.num {
		return v.f
	}
	f, _ := strconv.ParseFloat(strings.TrimSpace(v.s), 64)
	return f
}

func (v xvar) String() string {
	if v.num {
		return strconv.FormatFloat(v.f, 'f', 6, 64)
	}
	return v.s
}

// call is one run through the scenario. Fields are copied out of messages
// because a packet's buffer is reused as soon as it is handled.
type call struct {
	n      int64
	callID string
	peer   peer          // where the call's messages go
	sent   time.Duration // when the call began
	gen    uint32        // bumped when the call ends, voiding its timers
	x      *xstate       // the call's place in its scenario
}

// deadCall is an ended call, kept for 64*T1 so that late retransmissions
// are not taken for new calls; a server call keeps its last answer and
// the hash of the request it answered, to send it again when that request
// is repeated (its answer was lost).
type deadCall struct {
	hash  uint64
	msg   []byte
	until time.Duration
}

// deadEntry queues a dead call's expiry. Every call stays dead as long, so
// the queue is in time order and expiring is popping its head: no timer,
// and nothing holds the ended call itself.
type deadEntry struct {
	until  time.Duration
	callID string
}

// xuser is one of the --users: its calls share a Call-ID and continue its
// CSeq, one at a time (a registration and its refreshes).
type xuser struct {
	callID string
	cseq   uint32
	busy   bool
}

// xrole runs a SIPp XML scenario: as a client when it starts with a send
// (calls follow the rate schedule), as a server when it starts by waiting
// for a request (the peer's requests create calls).
type xrole struct {
	*core
	sc       *Scenario
	calls    map[string]*call
	dead     map[string]deadCall // ended calls, absorbing late retransmissions
	deadQ    []deadEntry         // their expiry, oldest first
	deadHead int
	users    []xuser
	due      int64
	sent     int64
	n        int64
	stopped  bool
	schedLen time.Duration
	pid      string
	remIP    string
	remPort  int
	locPort  int
	retrans  bool
	inf      []*injection
	rng      *rand.Rand
	recvTO   time.Duration
	trace    *tracer
}

func newXRole(c *core) *xrole {
	x := &xrole{core: c, sc: c.o.XML, calls: make(map[string]*call, 1024), dead: map[string]deadCall{},
		schedLen: c.o.Schedule.Len(), pid: strconv.Itoa(os.Getpid()), retrans: c.o.Transport == "u1" && !c.o.NoRetrans,
		rng: rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 1)), recvTO: c.o.xmlRecvTimeout, trace: c.o.trace}
	x.remIP, x.remPort = "127.0.0.1", 5060
	if ap, err := netip.ParseAddrPort(c.ep.remote); err == nil {
		x.remIP, x.remPort = ap.Addr().String(), int(ap.Port())
	}
	x.locPort = int(c.tr.localAddr().Port())
	x.inf = c.o.injections
	if !x.sc.uas {
		if x.sc.builtin && x.recvTO == 0 {
			x.recvTO = c.o.RecvTimeout
		}
		if c.o.Users > 0 {
			x.users = make([]xuser, c.o.Users)
		}
	}
	return x
}

func (x *xrole) inFlight() int64 { return int64(len(x.calls)) }

func (x *xrole) done() bool {
	if x.sc.uas {
		if x.o.MaxCalls <= 0 {
			return false
		}
		ended := x.tot.Succeeded + x.tot.Failed + x.sec.Succeeded + x.sec.Failed
		return ended >= x.o.MaxCalls && len(x.calls) == 0
	}
	return x.stopped && len(x.calls) == 0
}

func (x *xrole) abort() int64 {
	n := int64(len(x.calls))
	for _, cl := range x.calls {
		cl.gen++
	}
	clear(x.calls)
	return n
}

// tick starts the calls the schedule has made due, as the built-in uac does.
func (x *xrole) tick(now time.Duration) {
	x.expire(now)
	if x.sc.uas || x.stopped {
		return
	}
	want := x.o.Schedule.Calls(now)
	for n := 0; float64(x.due)+1 <= want+1e-9 && n < 500; n++ {
		if x.o.MaxCalls > 0 && x.sent >= x.o.MaxCalls {
			break
		}
		x.due++
		if at, ok := x.o.Schedule.At(float64(x.due)); ok && now-at > x.secLag {
			x.secLag = now - at
		}
		if x.o.Limit > 0 && len(x.calls) >= x.o.Limit {
			x.sec.Limited++
			continue
		}
		if x.o.OC && oc.Shed(x.oc.Share(time.Now()), false, x.rng.Float64) {
			// The server asked for this share of the new calls to be shed
			// (RFC 7339): not started, not offered.
			x.sec.Shed++
			continue
		}
		if x.users != nil {
			// The user whose turn it is keeps the turn while its previous
			// call is under way: the due calls wait, counted as limited.
			u := &x.users[x.sent%int64(len(x.users))]
			if u.busy {
				x.sec.Limited++
				continue
			}
			x.sent++
			x.n++
			ui := int((x.sent - 1) % int64(len(x.users)))
			if u.callID == "" {
				u.callID = x.callID(x.n)
			}
			u.busy = true
			cl := x.newCall(u.callID, int64(ui+1), x.target, now)
			cl.x.user, cl.x.cseq = ui, u.cseq
			x.run(cl, now)
			continue
		}
		x.sent++
		x.n++
		cl := x.newCall(x.callID(x.n), x.n, x.target, now)
		x.run(cl, now)
	}
	if x.o.MaxCalls > 0 && x.sent >= x.o.MaxCalls || x.schedLen > 0 && now >= x.schedLen {
		x.stopped = true
	}
}

// callID formats -cid_str (SIPp's %u call number, %p pid, %s local IP).
func (x *xrole) callID(n int64) string {
	f := x.o.CidStr
	if f == "" {
		f = "%u-%p@%s"
	}
	var b strings.Builder
	for i := 0; i < len(f); i++ {
		if f[i] != '%' || i+1 == len(f) {
			b.WriteByte(f[i])
			continue
		}
		i++
		switch f[i] {
		case 'u':
			b.WriteString(strconv.FormatInt(n, 10))
		case 'p':
			if x.sc.builtin {
				// Unique across runs, as a test's runs in one process need.
				b.WriteString(x.ep.tagBase)
			} else {
				b.WriteString(x.pid)
			}
		case 's':
			b.WriteString(x.ep.localIP)
		default:
			b.WriteByte(f[i])
		}
	}
	return b.String()
}

func (x *xrole) newCall(id string, n int64, p peer, now time.Duration) *call {
	cl := &call{n: n, callID: id, peer: p, sent: now}
	xs := &xstate{lastRecvIdx: -1, lastSendIdx: -1, rtxAt: -1, wakeAt: -1, rtdStart: now, vars: make([]xvar, len(x.sc.vars)), user: -1}
	if x.o.BaseCSeq > 0 {
		xs.cseq = uint32(x.o.BaseCSeq - 1)
	}
	for _, in := range x.inf {
		xs.infLine = in.pick(x.rng)
		break
	}
	cl.x = xs
	x.calls[id] = cl
	x.sec.Offered++
	return cl
}

// end finishes a call; its Call-ID is remembered for 64*T1 so that late
// retransmissions are not taken for new calls or unexpected messages.
func (x *xrole) end(cl *call, now time.Duration) {
	cl.gen++
	delete(x.calls, cl.callID)
	if x.sc.uas {
		x.bury(cl.callID, cl.x.recvRtxHash, cl.x.recvRtxMsg, now)
	} else {
		x.bury(cl.callID, 0, nil, now)
	}
	if u := cl.x.user; u >= 0 {
		x.users[u].busy = false
		x.users[u].cseq = cl.x.cseq
	}
	// Its stale timers still point at the call until they are due; they
	// need not keep its messages alive.
	cl.x = nil
}

// bury keeps an ended call's Call-ID for 64*T1, with the answer to send
// again if the request hashed h is repeated (servers only).
func (x *xrole) bury(id string, h uint64, msg []byte, now time.Duration) {
	until := now + 64*x.o.T1
	x.dead[id] = deadCall{h, msg, until}
	x.deadQ = append(x.deadQ, deadEntry{until, id})
}

// expire forgets the calls dead for 64*T1 by now.
func (x *xrole) expire(now time.Duration) {
	for x.deadHead < len(x.deadQ) && x.deadQ[x.deadHead].until <= now {
		e := x.deadQ[x.deadHead]
		x.deadQ[x.deadHead] = deadEntry{}
		x.deadHead++
		if d, ok := x.dead[e.callID]; ok && d.until == e.until {
			delete(x.dead, e.callID)
		}
	}
	if x.deadHead > 4096 && x.deadHead*2 > len(x.deadQ) {
		n := copy(x.deadQ, x.deadQ[x.deadHead:])
		x.deadQ = x.deadQ[:n]
		x.deadHead = 0
	}
}

func (x *xrole) succeed(cl *call, now time.Duration) {
	x.sec.Succeeded++
	x.end(cl, now)
}

func (x *xrole) fail(cl *call, r failReason, key string, now time.Duration) {
	x.failed(r, key)
	x.trace.err(now, "call %s failed at command %d (line %d): %s", cl.callID, cl.x.idx, x.cmdLine(cl.x.idx), key)
	x.end(cl, now)
}

func (x *xrole) cmdLine(i int) int {
	if i >= 0 && i < len(x.sc.cmds) {
		return x.sc.cmds[i].line
	}
	return 0
}

// next moves past command i, to its next= label if it has one.
func (x *xrole) next(cl *call, i int) {
	c := x.sc.cmds[i]
	cl.x.wakeAt = -1
	if c.next >= 0 && (c.test < 0 || cl.x.vars[c.test].set) {
		cl.x.idx = c.next
	} else {
		cl.x.idx = i + 1
	}
}

// run executes the call's commands until it must wait for a message, a
// pause or a retransmission to end.
func (x *xrole) run(cl *call, now time.Duration) {
	xs := cl.x
	for guard := 0; guard < 10000; guard++ {
		if cl.x == nil || x.calls[cl.callID] != cl {
			return
		}
		if xs.idx >= len(x.sc.cmds) {
			x.succeed(cl, now)
			return
		}
		c := x.sc.cmds[xs.idx]
		switch c.kind {
		case cmdSend:
			if xs.rtxAt >= 0 {
				return // SIPp sends nothing new while a retransmitted request is unanswered
			}
			if !x.sendCmd(cl, c, now) {
				return
			}
			x.next(cl, xs.idx)
		case cmdRecv:
			if xs.wakeAt < 0 {
				to := c.timeout
				if to == 0 {
					to = x.recvTO
				}
				if to > 0 {
					xs.wakeAt = now + to
					x.arm(xs.wakeAt, cl, tTimeout)
				}
			}
			return
		case cmdPause:
			if xs.wakeAt >= 0 {
				return
			}
			if !x.actions(cl, c, nil, now) {
				return
			}
			d := x.pauseLen(cl, c)
			if d <= 0 {
				x.next(cl, xs.idx) // -d 0: no timer, no tick's wait
				continue
			}
			xs.wakeAt = now + d
			x.arm(xs.wakeAt, cl, tTimeout)
			return
		case cmdNop:
			if c.startRTD {
				xs.rtdStart = now
			}
			if !x.actions(cl, c, nil, now) {
				return
			}
			x.next(cl, xs.idx)
		}
	}
	x.fail(cl, failOther, "scenario loops without waiting", now)
}

func (x *xrole) pauseLen(cl *call, c *command) time.Duration {
	ms := 0.0
	switch c.dist {
	case distDefault:
		return x.o.Hold
	case distFixed:
		ms = c.p1
	case distUniform:
		ms = c.p1 + x.rng.Float64()*(c.p2-c.p1)
	case distNormal:
		ms = c.p1 + x.rng.NormFloat64()*c.p2
	case distExponential:
		ms = x.rng.ExpFloat64() * c.p1
	case distLognormal:
		ms = math.Exp(c.p1 + x.rng.NormFloat64()*c.p2)
	case distVariable:
		ms = cl.x.vars[c.pauseVar].float()
	}
	if ms < 1 || math.IsNaN(ms) {
		return 0
	}
	return time.Duration(ms * float64(time.Millisecond))
}

func (x *xrole) sendCmd(cl *call, c *command, now time.Duration) bool {
	xs := cl.x
	if c.method != "" && c.method != "ACK" && c.method != "CANCEL" {
		xs.cseq++
	}
	if c.startRTD {
		xs.rtdStart = now
	}
	b, err := x.build(nil, cl, c.msg, c, xs.idx)
	if err != nil {
		x.fail(cl, failOther, err.Error(), now)
		return false
	}
	if x.o.OC {
		b = oc.AddOffer(b)
	}
	if c.lost == 0 || x.rng.Float64()*100 >= c.lost {
		x.trace.msg(now, "sent", b)
		if !x.send(b, cl.peer) {
			x.fail(cl, failSend, failName[failSend], now)
			return false
		}
	}
	xs.lastSend = b
	xs.lastSendIdx = xs.idx
	if xs.lastRecvIdx >= 0 && xs.lastRecvHash != 0 {
		xs.recvRtxHash = xs.lastRecvHash
		xs.recvRtxMsg = b
		xs.lastRecvHash = 0
	}
	if c.retrans > 0 && x.retrans {
		xs.rtxN = 0
		xs.rtxDelay = c.retrans
		if x.sc.builtin {
			xs.rtxDelay = x.o.T1 // their retrans="500" is T1's default, and follows -t1
		}
		xs.rtxAt = now + xs.rtxDelay
		x.arm(xs.rtxAt, cl, tRetrans)
	} else {
		xs.rtxAt = -1
	}
	return x.actions(cl, c, b, now)
}

func (x *xrole) fire(t timer, now time.Duration) {
	cl := t.c
	xs := cl.x
	switch t.kind {
	case tRetrans:
		if t.at != xs.rtxAt {
			return
		}
		xs.rtxN++
		invite := bytes.HasPrefix(xs.lastSend, []byte("INVITE"))
		allowed := 9
		if invite {
			allowed = 5
		}
		if x.o.MaxRetrans > 0 {
			allowed = min(allowed, x.o.MaxRetrans)
		}
		if xs.rtxN > allowed {
			xs.rtxAt = -1
			if sc := x.sc.cmds[xs.lastSendIdx]; sc.onTimeout >= 0 {
				xs.idx, xs.wakeAt = sc.onTimeout, -1
				if xs.idx < len(x.sc.cmds) {
					x.run(cl, now)
					return
				}
			}
			x.fail(cl, failRetrans, failName[failRetrans], now)
			return
		}
		xs.rtxDelay *= 2
		if !invite && xs.rtxDelay > x.o.T2 {
			xs.rtxDelay = x.o.T2
		}
		x.sec.Retransmissions++
		x.trace.msg(now, "retransmitted", xs.lastSend)
		x.send(xs.lastSend, cl.peer)
		xs.rtxAt = t.at + xs.rtxDelay
		x.arm(xs.rtxAt, cl, tRetrans)
	case tTimeout:
		if t.at != xs.wakeAt {
			return
		}
		c := x.sc.cmds[xs.idx]
		if c.kind == cmdPause {
			x.next(cl, xs.idx)
			x.run(cl, now)
			return
		}
		xs.wakeAt = -1
		if c.onTimeout >= 0 && c.onTimeout < len(x.sc.cmds) {
			xs.idx = c.onTimeout
			x.run(cl, now)
			return
		}
		x.fail(cl, failTimeout, "timeout waiting for "+c.expects(), now)
	}
}

func (c *command) expects() string {
	if c.response != 0 {
		return strconv.Itoa(c.response)
	}
	return c.request
}

// hashSeed keys msgHash, which only compares messages within one run.
var hashSeed = maphash.MakeSeed()

func msgHash(b []byte) uint64 {
	return maphash.Bytes(hashSeed, b) | 1
}

// matches says whether m is what recv command i waits for: a request by
// method, a response by code and by its CSeq method being one the scenario
// sent before (SIPp's rule).
func (x *xrole) matches(i int, m *msg) bool {
	c := x.sc.cmds[i]
	if c.kind != cmdRecv {
		return false
	}
	if !m.isResp {
		return c.request != "" && string(m.method) == c.request
	}
	if c.response != m.status {
		return false
	}
	if i == 0 {
		return true
	}
	for _, meth := range c.methods {
		if string(m.cseqM) == meth {
			return true
		}
	}
	return false
}

func (x *xrole) handle(m *msg, from peer, now time.Duration) {
	x.trace.msg(now, "received", m.raw)
	if x.o.OC && m.isResp {
		if fb, ok := oc.ResponseFeedback(m.raw); ok {
			x.sec.OCFeedback++
			if x.oc.Take(fb, time.Now()) {
				x.ocMax = max(x.ocMax, fb.Loss)
			}
		}
	}
	cl := x.calls[string(m.callID)]
	if cl == nil {
		if d, gone := x.dead[string(m.callID)]; gone {
			rtx := x.retrans && d.msg != nil && msgHash(m.raw) == d.hash
			switch {
			case !m.isResp && string(m.method) == "ACK":
				return // of a refused INVITE, or a late one
			case rtx:
				x.sec.RetransReceived++
				x.sec.Retransmissions++
				x.send(d.msg, from)
				return
			case !x.sc.uas || m.isResp || string(m.method) == "BYE":
				x.sec.RetransReceived++
				return
			}
			// A new request in the Call-ID of an ended server call (a
			// registration's refresh): a new call.
			delete(x.dead, string(m.callID))
		}
		if !x.sc.uas || m.isResp || string(m.method) == "ACK" {
			x.sec.Unexpected++
			x.trace.err(now, "message for no call:\n%s", m.raw)
			return
		}
		if x.o.MaxCalls > 0 && x.n >= x.o.MaxCalls {
			x.sec.Unexpected++ // -m calls were taken; SIPp ignores further ones too
			return
		}
		x.n++
		if x.o.RejectEvery > 0 && x.n%int64(x.o.RejectEvery) == 0 && string(m.method) == "INVITE" {
			x.reject(m, from, now)
			return
		}
		cl = x.newCall(string(m.callID), x.n, from, now)
	}
	xs := cl.x
	var h uint64
	if x.retrans {
		h = msgHash(m.raw)
		if xs.recvRtxMsg != nil && h == xs.recvRtxHash {
			// The peer repeated the message our last answer was for.
			x.sec.RetransReceived++
			x.sec.Retransmissions++
			x.send(xs.recvRtxMsg, cl.peer)
			return
		}
		if xs.lastRecvIdx >= 0 && h == xs.lastRecvHash {
			x.sec.RetransReceived++
			return
		}
	}
	found := -1
	for i := xs.idx; i < len(x.sc.cmds); i++ {
		if x.matches(i, m) {
			found = i
			break
		}
		if c := x.sc.cmds[i]; c.kind != cmdRecv || !c.optional {
			break
		}
	}
	if found < 0 {
		contig := true
		for i := xs.idx - 1; i >= 0; i-- {
			c := x.sc.cmds[i]
			if c.kind != cmdRecv || !c.optional {
				contig = false
			}
			if !x.matches(i, m) {
				continue
			}
			if contig {
				found = i
				break
			}
			// A response of an old INVITE transaction (a 200 whose ACK was
			// lost): send the ACK that followed it again.
			x.sec.RetransReceived++
			if m.isResp && string(m.cseqM) == "INVITE" && i+1 < len(x.sc.cmds) {
				if a := x.sc.cmds[i+1]; a.kind == cmdSend && a.method == "ACK" {
					if b, err := x.build(nil, cl, a.msg, a, i+1); err == nil {
						x.sec.Retransmissions++
						x.send(b, cl.peer)
					}
				}
			}
			return
		}
	}
	if found < 0 {
		x.unexpected(cl, m, now)
		return
	}
	c := x.sc.cmds[found]
	if c.lost > 0 && x.rng.Float64()*100 < c.lost {
		return
	}
	if c.rtd {
		x.setup(now - xs.rtdStart)
	}
	if c.startRTD {
		xs.rtdStart = now
	}
	if !m.isResp && m.cseqNum > xs.cseq {
		xs.cseq = m.cseqNum
	}
	if found > xs.lastSendIdx && xs.rtxAt >= 0 {
		switch {
		case !m.isResp, m.status >= 200, string(m.cseqM) == "INVITE":
			xs.rtxAt = -1
		default:
			// A provisional for a non-INVITE request: timer E goes on at T2.
			xs.rtxDelay = x.o.T2
			xs.rtxAt = now + x.o.T2
			x.arm(xs.rtxAt, cl, tRetrans)
		}
	}
	if m.isResp {
		if tag := param(m.to, "tag"); tag != nil {
			xs.peerTag = append(xs.peerTag[:0], tag...)
		}
	}
	if c.rrs && xs.routes == nil {
		xs.routes, xs.nextURL = routeSet(m)
	}
	if c.auth && (m.status == 401 || m.status == 407) {
		xs.challenge = append(xs.challenge[:0], headerValue(m.raw, map[int]string{401: "WWW-Authenticate", 407: "Proxy-Authenticate"}[m.status])...)
		xs.chalCode, xs.nc = m.status, 0
	}
	xs.lastRecv = append(xs.lastRecv[:0], m.raw...)
	xs.linesOK = false
	xs.lastRecvIdx = found
	xs.lastRecvHash = h
	if !x.actions(cl, c, m.raw, now) {
		return
	}
	if !c.optional || c.next >= 0 && (c.test < 0 || xs.vars[c.test].set) {
		x.next(cl, found)
	}
	x.run(cl, now)
}

// reject refuses the INVITE m that would start call x.n (--reject_every)
// with 503 and Retry-After, before the scenario sees it; a repeated INVITE
// gets the 503 again and the ACK ends it.
func (x *xrole) reject(m *msg, from peer, now time.Duration) {
	x.sec.Offered++
	tag := x.ep.tagBase + "-" + strconv.FormatInt(x.n, 10)
	b := x.ep.response(nil, m, 503, "Service Unavailable", tag, false, "Retry-After: 5\r\n", nil)
	x.trace.msg(now, "sent", b)
	x.send(b, from)
	x.failed(fail503RetryAfter, "503 Service Unavailable (Retry-After)")
	var h uint64
	if x.retrans {
		h = msgHash(m.raw)
	}
	x.bury(string(m.callID), h, b, now)
}

// routeSet is what rrs="true" keeps: the Record-Route set as a Route
// header value (reversed when learnt from a response, as a UAC must) and
// the remote target from Contact.
func routeSet(m *msg) (routes, next []byte) {
	rrs := m.rrs
	var parts [][]byte
	for _, r := range rrs {
		for _, p := range bytes.Split(r, []byte(",")) {
			parts = append(parts, bytes.TrimSpace(p))
		}
	}
	if m.isResp {
		for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
			parts[i], parts[j] = parts[j], parts[i]
		}
	}
	routes = bytes.Join(parts, []byte(", "))
	if routes == nil {
		routes = []byte{}
	}
	return routes, append([]byte(nil), m.contact...)
}

// unexpected is SIPp's default: answer a BYE or CANCEL, answer INFO,
// NOTIFY, OPTIONS and UPDATE with -aa and go on; otherwise the call fails,
// and a failure response to an INVITE is acknowledged first.
func (x *xrole) unexpected(cl *call, m *msg, now time.Duration) {
	if !m.isResp {
		meth := string(m.method)
		switch {
		case meth == "BYE" || meth == "CANCEL":
			x.out = x.ep.response(x.out[:0], m, 200, "OK", "", false, "", nil)
			x.send(x.out, cl.peer)
		case x.o.AutoAnswer && (meth == "INFO" || meth == "NOTIFY" || meth == "OPTIONS" || meth == "UPDATE"):
			x.out = x.ep.response(x.out[:0], m, 200, "OK", "", false, "", nil)
			x.send(x.out, cl.peer)
			return
		}
		x.trace.err(now, "unexpected %s in call %s at command %d (line %d):\n%s", meth, cl.callID, cl.x.idx, x.cmdLine(cl.x.idx), m.raw)
		x.fail(cl, failUnexpected, "unexpected "+meth, now)
		return
	}
	if m.status >= 300 && string(m.cseqM) == "INVITE" && bytes.HasPrefix(cl.x.lastSend, []byte("INVITE ")) {
		x.out = ackFor(x.out[:0], cl.x.lastSend, m)
		x.send(x.out, cl.peer)
	}
	if x.answerChallenge(cl, m, now) {
		return
	}
	x.trace.err(now, "unexpected %d in call %s at command %d (line %d):\n%s", m.status, cl.callID, cl.x.idx, x.cmdLine(cl.x.idx), m.raw)
	x.failedResp(m)
	x.trace.err(now, "call %s failed: %s", cl.callID, clip(m.raw))
	x.end(cl, now)
}

// answerChallenge sends the call's last request again with -au/-ap
// credentials when m is a 401 or 407 to it that the scenario does not
// expect: what a built-in scenario does with -ap, once a call (a second
// challenge means the credentials are wrong). It reports whether it did.
func (x *xrole) answerChallenge(cl *call, m *msg, now time.Duration) bool {
	xs := cl.x
	if !x.sc.builtin || x.o.AuthPass == "" || xs.authCmd > 0 || xs.lastSendIdx < 0 || m.status != 401 && m.status != 407 {
		return false
	}
	c := x.sc.cmds[xs.lastSendIdx]
	if c.method == "" || string(m.cseqM) != c.method {
		return false
	}
	xs.challenge = append(xs.challenge[:0], headerValue(m.raw, map[int]string{401: "WWW-Authenticate", 407: "Proxy-Authenticate"}[m.status])...)
	xs.chalCode, xs.nc = m.status, 0
	xs.authCmd = xs.lastSendIdx + 1
	xs.idx, xs.rtxAt, xs.wakeAt = xs.lastSendIdx, -1, -1
	x.sec.Challenged++
	if x.sendCmd(cl, c, now) {
		x.next(cl, xs.idx)
		x.run(cl, now)
	}
	return true
}

// ackFor builds the ACK of a failure response to invite (RFC 3261
// 17.1.1.3): the INVITE's Request-URI and top Via, the response's To.
func ackFor(b, invite []byte, resp *msg) []byte {
	line, _, _ := bytes.Cut(invite, crlf)
	ruri := line[len("INVITE "):]
	if i := bytes.LastIndexByte(ruri, ' '); i > 0 {
		ruri = ruri[:i]
	}
	b = append(b, "ACK "...)
	b = append(b, ruri...)
	b = append(b, " SIP/2.0\r\n"...)
	if len(resp.vias) > 0 {
		b = appendHdr(b, "Via", resp.vias[0])
	}
	b = appendHdr(b, "From", resp.from)
	b = appendHdr(b, "To", resp.to)
	b = appendHdr(b, "Call-ID", resp.callID)
	b = appendCSeq(b, resp.cseqNum, "ACK")
	b = append(b, "Max-Forwards: 70\r\n"...)
	return appendBody(b, "", nil)
}

// actions runs a command's <action> list on msg (nil for nop and pause);
// false when the call failed on a check.
func (x *xrole) actions(cl *call, c *command, msgb []byte, now time.Duration) bool {
	vars := cl.x.vars
	for i := range c.actions {
		a := &c.actions[i]
		switch a.kind {
		case actEreg:
			var in []byte
			switch a.searchIn {
			case "msg":
				in = msgb
			case "body":
				if i := bytes.Index(msgb, []byte("\r\n\r\n")); i >= 0 {
					in = msgb[i+4:]
				}
			case "hdr":
				in = headerValue(msgb, strings.TrimSuffix(a.header, ":"))
			}
			sub := a.re.FindSubmatch(in)
			if sub == nil {
				if a.checkIt {
					x.fail(cl, failOther, fmt.Sprintf("regexp %q did not match (line %d)", a.re, a.line), now)
					return false
				}
				continue
			}
			for j, d := range a.dst {
				if j < len(sub) {
					vars[d] = xvar{s: string(sub[j]), set: true}
				}
			}
		case actAssignStr:
			b, _ := x.build(nil, cl, a.str, nil, cl.x.idx)
			vars[a.dst[0]] = xvar{s: string(bytes.TrimRight(b, "\r\n")), set: true}
		case actToDouble:
			vars[a.dst[0]] = xvar{f: vars[a.src].float(), num: true, set: true}
		default:
			v := a.value
			if a.src >= 0 {
				v = vars[a.src].float()
			}
			d := &vars[a.dst[0]]
			cur := d.float()
			switch a.kind {
			case actAssign:
				cur = v
			case actAdd:
				cur += v
			case actSubtract:
				cur -= v
			case actMultiply:
				cur *= v
			case actDivide:
				if v != 0 {
					cur /= v
				}
			}
			*d = xvar{f: cur, num: true, set: true}
		}
	}
	return true
}

// headerLines returns every line of header name in raw (long or compact
// form), as written.
func headerLines(raw []byte, name string) [][]byte {
	var out [][]byte
	short := compactForms[strings.ToLower(name)]
	pos := bytes.Index(raw, crlf)
	for pos >= 0 && pos+2 < len(raw) {
		rest := raw[pos+2:]
		e := bytes.Index(rest, crlf)
		if e <= 0 {
			break
		}
		l := rest[:e]
		pos += 2 + e
		colon := bytes.IndexByte(l, ':')
		if colon <= 0 {
			continue
		}
		if hdrIs(bytes.TrimRight(l[:colon], " \t"), name, short) {
			out = append(out, l)
		}
	}
	return out
}

// headerValue is the value of the first name header, or nil.
func headerValue(raw []byte, name string) []byte {
	ls := headerLines(raw, name)
	if len(ls) == 0 {
		return nil
	}
	_, v, _ := bytes.Cut(ls[0], []byte(":"))
	return bytes.TrimSpace(v)
}

var compactForms = map[string]string{"via": "v", "from": "f", "to": "t", "call-id": "i", "contact": "m",
	"content-length": "l", "content-type": "c", "subject": "s", "supported": "k", "event": "o", "refer-to": "r"}

// build appends the message of template t for call cl at command idx.
func (x *xrole) build(b []byte, cl *call, t *template, c *command, idx int) ([]byte, error) {
	xs := cl.x
	if b == nil {
		b = make([]byte, 0, t.size)
	}
	start := len(b)
	type hole struct {
		at  int
		off int
	}
	var lens []hole
	authAt := -1
	var authSeg *segment
	autoAuth := false
	skipLine := false
	for i := range t.segs {
		s := &t.segs[i]
		if skipLine {
			if s.kind != kwLiteral {
				continue
			}
			j := bytes.Index(s.lit, crlf)
			if j < 0 {
				continue
			}
			skipLine = false
			b = append(b, s.lit[j+2:]...)
			continue
		}
		switch s.kind {
		case kwLiteral:
			b = append(b, s.lit...)
		case kwCallID:
			b = append(b, cl.callID...)
		case kwBranch:
			b = append(b, "z9hG4bK-"...)
			b = append(b, x.pid...)
			b = append(b, '-')
			b = strconv.AppendInt(b, cl.n, 10)
			b = append(b, '-')
			b = strconv.AppendInt(b, int64(idx+s.off), 10)
			if xs.authCmd > 0 {
				b = append(b, "-a"...) // sent again with credentials: a new transaction
			}
		case kwService:
			b = append(b, x.o.Service...)
		case kwRemoteIP, kwRemoteHost:
			b = append(b, x.remIP...)
		case kwRemotePort:
			b = strconv.AppendInt(b, int64(x.remPort+s.off), 10)
		case kwLocalIP, kwMediaIP:
			b = append(b, x.ep.localIP...)
		case kwLocalIPType, kwMediaIPType:
			if isIPv6(x.ep.localIP) {
				b = append(b, '6')
			} else {
				b = append(b, '4')
			}
		case kwLocalPort:
			b = strconv.AppendInt(b, int64(x.locPort+s.off), 10)
		case kwMediaPort:
			b = strconv.AppendInt(b, int64(6000+s.off), 10)
		case kwTransport:
			b = append(b, x.ep.transport...)
		case kwLen:
			lens = append(lens, hole{len(b), s.off})
		case kwCSeq:
			b = strconv.AppendInt(b, int64(xs.cseq)+int64(s.off), 10)
		case kwCallNumber:
			b = strconv.AppendInt(b, cl.n+int64(s.off), 10)
		case kwPID:
			b = append(b, x.pid...)
		case kwMsgIndex:
			b = strconv.AppendInt(b, int64(idx), 10)
		case kwUsers, kwUserID:
			b = append(b, '0')
		case kwDate:
			b = time.Now().UTC().AppendFormat(b, "Mon, 02 Jan 2006 15:04:05 GMT")
		case kwTimestamp:
			b = time.Now().AppendFormat(b, "2006-01-02\t15:04:05.000000")
		case kwLast:
			found := false
			for _, l := range xs.recvLines() {
				if !nameIs(xs.lastRecv[l.start:l.nameEnd], s.name, s.short) {
					continue
				}
				if found {
					b = append(b, crlf...)
				}
				b = append(b, xs.lastRecv[l.start:l.end]...)
				found = true
			}
			if !found && s.atBOL {
				skipLine = true
			}
		case kwLastCSeqNumber:
			v := headerValue(xs.lastRecv, "CSeq")
			n, _ := strconv.Atoi(string(bytes.Fields(append(v, ' '))[0]))
			b = strconv.AppendInt(b, int64(n+s.off), 10)
		case kwLastRequestURI:
			b = append(b, uriOf(headerValue(xs.lastRecv, "To"))...)
		case kwLastMessage:
			b = append(b, xs.lastRecv...)
		case kwPeerTagParam:
			if len(xs.peerTag) > 0 {
				b = append(b, ";tag="...)
				b = append(b, xs.peerTag...)
			}
		case kwRoutes:
			if len(xs.routes) == 0 {
				if s.atBOL {
					skipLine = true
				}
				continue
			}
			b = append(b, "Route: "...)
			b = append(b, xs.routes...)
		case kwNextURL:
			b = append(b, xs.nextURL...)
		case kwField:
			b = append(b, x.field(cl, s)...)
		case kwVar:
			if v := xs.vars[s.n]; v.set {
				b = append(b, v.String()...)
			}
		case kwAuth:
			authAt, authSeg = len(b), s
		}
	}
	body := bytes.Index(b[start:], []byte("\r\n\r\n"))
	bodyLen := 0
	if body >= 0 {
		bodyLen = len(b) - start - body - 4
	}
	uri := ""
	if authSeg == nil && c != nil && idx+1 == xs.authCmd && body >= 0 {
		// Credentials for a challenge the built-in scenario does not
		// expect: the -au user, else the request's To user (register's
		// own user; the callee, as -s), for its Request-URI.
		authAt, authSeg, autoAuth = start+body+2, &segment{user: x.o.AuthUser}, true
		if authSeg.user == "" {
			authSeg.user = string(userOf(headerValue(b[start:], "To")))
		}
		line, _, _ := bytes.Cut(b[start:], crlf)
		if f := bytes.Fields(line); len(f) == 3 {
			uri = string(f[1])
		}
	}
	if authSeg != nil {
		if c == nil || xs.challenge == nil {
			return nil, fmt.Errorf("[authentication] at line %d without a 401 or 407 received with auth=\"true\"", x.cmdLine(idx))
		}
		var bodyBytes []byte
		if body >= 0 {
			bodyBytes = b[start+body+4:]
		}
		user, pass := authSeg.user, authSeg.pass
		if user == "" {
			user = x.o.AuthUser
		}
		if user == "" {
			user = x.o.Service
		}
		if pass == "" {
			pass = x.o.AuthPass
		}
		if pass == "" {
			pass = "password"
		}
		xs.nc++
		if uri == "" {
			uri = "sip:" + joinHostPort(x.remIP, x.remPort)
		}
		hdr, err := digestHeader(xs.chalCode, string(xs.challenge), user, pass, c.method, uri, bodyBytes, xs.nc, x.rng)
		if err != nil {
			return nil, err
		}
		if autoAuth {
			hdr += "\r\n"
		}
		b = insertAt(b, authAt, hdr)
		for i := range lens {
			if lens[i].at >= authAt {
				lens[i].at += len(hdr)
			}
		}
	}
	for i := len(lens) - 1; i >= 0; i-- {
		b = insertAt(b, lens[i].at, strconv.Itoa(bodyLen+lens[i].off))
	}
	return b, nil
}

func insertAt(b []byte, at int, s string) []byte {
	b = append(b, s...)
	copy(b[at+len(s):], b[at:len(b)-len(s)])
	copy(b[at:], s)
	return b
}

// tracer writes -trace_msg and -trace_err logs, from the loop only.
type tracer struct {
	msgs, errs interface {
		Write([]byte) (int, error)
	}
}

func (t *tracer) msg(now time.Duration, what string, b []byte) {
	if t == nil || t.msgs == nil {
		return
	}
	fmt.Fprintf(t.msgs, "----------------------------------------------- %s\n%s (%d bytes):\n\n%s\n", time.Now().Format(time.RFC3339Nano), what, len(b), b)
}

func (t *tracer) err(now time.Duration, format string, a ...any) {
	if t == nil || t.errs == nil {
		return
	}
	fmt.Fprintf(t.errs, "%s  %s\n", time.Now().Format(time.RFC3339Nano), fmt.Sprintf(format, a...))
}
