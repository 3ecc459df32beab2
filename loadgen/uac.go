package loadgen

import (
	"github.com/icholy/digest"

	"bytes"
	"strconv"
	"time"
)

// call is one dialog or transaction, on either side. Fields are copied out of
// messages because a packet's buffer is reused as soon as it is handled.
type call struct {
	n      int64
	callID string
	state  uint8
	ruri   []byte // Request-URI of the initial request
	target []byte // remote target (the 2xx's Contact) for ACK and BYE
	to     []byte // To with the remote tag
	routes [][]byte
	cseq   uint32
	user   int           // register: index into uac.users
	req    []byte        // the message retransmitted by timers
	peer   peer          // uas: where responses go
	sent   time.Duration // when the current transaction began
	rtx    time.Duration // current retransmission interval
	gen    uint32        // bumped when a transaction ends, voiding its timers
	noRtx  bool          // a provisional stopped INVITE retransmissions
	x      *xstate       // -sf: the call's place in its XML scenario
	// authUser is the user credentials are for; auth the Authorization or
	// Proxy-Authorization line the request carries once it answered a
	// challenge (one per call, as SIPp does).
	authUser string
	auth     string
}

const (
	sInvite uint8 = iota // INVITE sent, no final response yet
	sHold                // ACK sent, waiting -d before BYE
	sBye                 // BYE sent
	sReq                 // REGISTER or OPTIONS sent
	sDone
)

type regUser struct {
	callID string
	cseq   uint32
	busy   bool
}

type uac struct {
	*core
	calls    map[string]*call
	due      int64 // calls the schedule has made due
	sent     int64
	stopped  bool
	users    []regUser
	schedLen time.Duration
	ruri     []byte // shared by every call, never written
}

func newUAC(c *core) *uac {
	u := &uac{core: c, calls: make(map[string]*call, 1024), schedLen: c.o.Schedule.Len()}
	if c.o.Scenario == "register" {
		u.ruri = []byte("sip:" + c.ep.remote)
	} else {
		u.ruri = []byte("sip:" + c.o.Service + "@" + c.ep.remote)
	}
	if c.o.Scenario == "register" && c.o.Users > 0 {
		u.users = make([]regUser, c.o.Users)
	}
	return u
}

func (u *uac) inFlight() int64 { return int64(len(u.calls)) }

func (u *uac) done() bool { return u.stopped && len(u.calls) == 0 }

func (u *uac) abort() int64 {
	n := int64(len(u.calls))
	for _, cl := range u.calls {
		cl.gen++
	}
	clear(u.calls)
	return n
}

// tick starts every call the schedule has made due by now. The schedule, not
// the server's answers, decides when a call starts (open loop); how late a
// start is measures sipload's own ability to keep up.
func (u *uac) tick(now time.Duration) {
	if u.stopped {
		return
	}
	want := u.o.Schedule.Calls(now)
	for n := 0; float64(u.due)+1 <= want+1e-9; n++ {
		if n == 500 {
			// Leave the rest for the next tick so replies are read between
			// bursts; the lag they accrue is reported, not hidden.
			break
		}
		if u.o.MaxCalls > 0 && u.sent >= u.o.MaxCalls {
			u.stopped = true
			return
		}
		u.due++
		if at, ok := u.o.Schedule.At(float64(u.due)); ok && now-at > u.secLag {
			u.secLag = now - at
		}
		if u.o.Limit > 0 && len(u.calls) >= u.o.Limit {
			u.sec.Limited++
			continue
		}
		u.startCall(now)
	}
	if u.o.MaxCalls > 0 && u.sent >= u.o.MaxCalls {
		u.stopped = true
	}
	if u.schedLen > 0 && now >= u.schedLen {
		u.stopped = true
	}
}

func (u *uac) startCall(now time.Duration) {
	u.sent++
	cl := &call{n: u.sent, cseq: 1, sent: now, rtx: u.o.T1}
	b := make([]byte, 0, 1024) // kept for retransmission, then reused by the BYE
	switch u.o.Scenario {
	case "uac":
		cl.authUser = u.o.AuthUser
		cl.callID = string(u.ep.callID(nil, cl.n))
		cl.ruri = u.ruri
		cl.state = sInvite
		b = u.ep.invite(b, cl)
	case "options":
		cl.authUser = u.o.AuthUser
		cl.callID = string(u.ep.callID(nil, cl.n))
		cl.ruri = u.ruri
		cl.state = sReq
		b = u.ep.options(b, cl)
	case "register":
		cl.ruri = u.ruri
		cl.state = sReq
		user := u.o.Service + strconv.FormatInt(cl.n, 10)
		if u.users != nil {
			cl.user = int((cl.n - 1) % int64(len(u.users)))
			ru := &u.users[cl.user]
			if ru.busy {
				u.sent--
				u.sec.Limited++
				return
			}
			if ru.callID == "" {
				ru.callID = string(u.ep.callID(nil, cl.n))
			}
			ru.cseq++
			ru.busy = true
			cl.callID, cl.cseq = ru.callID, ru.cseq
			user = u.o.Service + strconv.Itoa(cl.user+1)
		} else {
			cl.callID = string(u.ep.callID(nil, cl.n))
		}
		cl.authUser = user
		b = u.ep.register(b, cl, user, u.o.Expires)
	}
	cl.req = b
	u.calls[cl.callID] = cl
	u.sec.Offered++
	if !u.send(b, u.target) {
		u.finish(cl, nil, failSend, false)
		return
	}
	u.armTxn(cl, now)
}

// armTxn starts timers A/E (UDP only) and the transaction timeout B/F.
func (u *uac) armTxn(cl *call, now time.Duration) {
	if u.o.Transport == "u1" && !u.o.NoRetrans {
		u.arm(now+cl.rtx, cl, tRetrans)
	}
	u.arm(now+u.o.RecvTimeout, cl, tTimeout)
}

// finish ends a call: a success, a failure for the final response m, or
// (m nil) a failure for reason r.
func (u *uac) finish(cl *call, m *msg, r failReason, ok bool) {
	switch {
	case ok:
		u.sec.Succeeded++
	case m != nil:
		u.failedResp(m)
	default:
		u.failed(r, failName[r])
	}
	cl.gen++
	cl.state = sDone
	delete(u.calls, cl.callID)
	if u.users != nil && u.o.Scenario == "register" {
		u.users[cl.user].busy = false
	}
}

func (u *uac) fire(t timer, now time.Duration) {
	cl := t.c
	switch t.kind {
	case tRetrans:
		if cl.noRtx {
			return
		}
		u.sec.Retransmissions++
		u.send(cl.req, u.target)
		cl.rtx *= 2
		if cl.state != sInvite && cl.rtx > u.o.T2 {
			cl.rtx = u.o.T2 // timer E caps at T2; timer A does not
		}
		// From the time it was due, not when it ran: a late loop must not
		// push retransmissions past the transaction timeout.
		u.arm(t.at+cl.rtx, cl, tRetrans)
	case tTimeout:
		u.finish(cl, nil, failTimeout, false)
	case tBye:
		u.sendBye(cl, now)
	}
}

func (u *uac) sendBye(cl *call, now time.Duration) {
	cl.gen++
	cl.state = sBye
	cl.cseq++
	cl.rtx = u.o.T1
	cl.noRtx = false
	cl.req = u.ep.bye(cl.req[:0], cl)
	if !u.send(cl.req, u.target) {
		u.finish(cl, nil, failSend, false)
		return
	}
	u.armTxn(cl, now)
}

func (u *uac) handle(m *msg, _ peer, now time.Duration) {
	if !m.isResp {
		// A server-originated request (BYE from the far end, OPTIONS
		// keepalive): answer it so the peer's transaction ends.
		if !bytes.Equal(m.method, []byte("ACK")) {
			u.out = u.ep.response(u.out[:0], m, 200, "OK", "", false, "", nil)
			u.send(u.out, u.target)
		}
		u.sec.Unexpected++
		return
	}
	cl := u.calls[string(m.callID)]
	if cl == nil {
		if m.status >= 200 {
			u.sec.RetransReceived++ // a late duplicate of a finished call
		}
		return
	}
	isInvite := bytes.Equal(m.cseqM, []byte("INVITE"))
	switch {
	case cl.state == sInvite && isInvite && m.cseqNum == cl.cseq:
		if m.status < 200 {
			cl.noRtx = true // the server has it; timer A stops in Proceeding
			return
		}
		cl.to = append(cl.to[:0], m.to...)
		if m.status >= 300 {
			u.out = u.ep.ack(u.out[:0], cl, false)
			u.send(u.out, u.target)
			if u.answerChallenge(cl, m, now) {
				return
			}
			u.finish(cl, m, 0, false)
			return
		}
		u.setup(now - cl.sent)
		cl.target = cl.ruri
		if len(m.contact) > 0 {
			cl.target = append([]byte(nil), m.contact...)
		}
		cl.routes = cl.routes[:0]
		for _, rr := range m.rrs {
			cl.routes = append(cl.routes, append([]byte(nil), rr...))
		}
		cl.gen++
		cl.state = sHold
		u.out = u.ep.ack(u.out[:0], cl, true)
		u.send(u.out, u.target)
		if u.o.Hold <= 0 {
			u.sendBye(cl, now)
		} else {
			u.arm(now+u.o.Hold, cl, tBye)
		}
	case isInvite && m.status >= 200 && m.status < 300 && (cl.state == sHold || cl.state == sBye):
		// The 2xx was retransmitted: our ACK was lost, send it again.
		u.sec.RetransReceived++
		u.sec.Retransmissions++
		u.out = u.ep.ack(u.out[:0], cl, true)
		u.send(u.out, u.target)
	case cl.state == sBye && bytes.Equal(m.cseqM, []byte("BYE")) && m.cseqNum == cl.cseq:
		if m.status < 200 {
			return
		}
		u.finish(cl, m, 0, m.status < 300)
	case cl.state == sReq && m.cseqNum == cl.cseq && !isInvite:
		if m.status < 200 {
			return
		}
		if u.answerChallenge(cl, m, now) {
			return
		}
		if m.status < 300 {
			u.setup(now - cl.sent)
		}
		u.finish(cl, m, 0, m.status < 300)
	default:
		u.sec.RetransReceived++
	}
}

// answerChallenge sends the request of cl again with credentials, when m
// is a 401 or 407 and -ap was given, once per call; it reports whether it
// did. The first challenge whose algorithm sipload knows is answered.
func (u *uac) answerChallenge(cl *call, m *msg, now time.Duration) bool {
	if u.o.AuthPass == "" || cl.auth != "" || (m.status != 401 && m.status != 407) {
		return false
	}
	user := u.o.AuthUser
	if user == "" {
		user = cl.authUser
	}
	if user == "" {
		user = u.o.Service
	}
	method := "INVITE"
	if cl.state == sReq {
		method = "OPTIONS"
		if u.o.Scenario == "register" {
			method = "REGISTER"
		}
	}
	for _, raw := range m.challenges {
		ch, err := digest.ParseChallenge(string(raw))
		if err != nil || !digest.CanDigest(ch) {
			continue
		}
		cr, err := digest.Digest(ch, digest.Options{Method: method, URI: string(cl.ruri), Username: user, Password: u.o.AuthPass, Count: 1})
		if err != nil {
			continue
		}
		name := "Authorization: "
		if m.status == 407 {
			name = "Proxy-Authorization: "
		}
		cl.auth = name + cr.String() + "\r\n"
		break
	}
	if cl.auth == "" {
		return false
	}
	u.sec.Challenged++
	cl.gen++ // voids the first request's timers
	cl.cseq++
	cl.rtx, cl.noRtx = u.o.T1, false
	cl.sent = now
	b := cl.req[:0]
	switch {
	case method == "INVITE":
		b = u.ep.invite(b, cl)
	case method == "OPTIONS":
		b = u.ep.options(b, cl)
	default:
		if u.users != nil {
			u.users[cl.user].cseq = cl.cseq
		}
		b = u.ep.register(b, cl, cl.authUser, u.o.Expires)
	}
	cl.req = b
	if !u.send(b, u.target) {
		u.finish(cl, nil, failOther, false)
		return true
	}
	u.armTxn(cl, now)
	return true
}

// fromUser is the user of the From of a call's requests: the -au user when
// one is given, so that credentials and From name the same subscriber (a
// server may insist), else sipload.
func (c *call) fromUser() string {
	if c.authUser != "" {
		return c.authUser
	}
	return "sipload"
}
