package loadgen

import (
	"bytes"
	"strconv"
	"time"
)

const (
	uWaitAck   uint8 = iota // 200 sent, retransmitted until the ACK
	uConfirmed              // ACK received, waiting for BYE
	uRejected               // 503 sent, retransmitted until the ACK
	uSeen                   // a REGISTER or OPTIONS answered, kept to spot retransmissions
)

// uas answers INVITE with 180 and 200 (or 503 when told to reject), BYE and
// any other request with 200.
type uas struct {
	*core
	calls map[string]*call
	// seen holds answered REGISTER and OPTIONS transactions (Call-ID and
	// CSeq) for 64*T1, so a retransmission is answered again but not counted
	// as a new call.
	seen map[string]*call
	n    int64
}

func newUAS(c *core) *uas {
	return &uas{core: c, calls: make(map[string]*call, 1024), seen: make(map[string]*call, 1024)}
}

func (u *uas) inFlight() int64 { return int64(len(u.calls)) }

func (u *uas) tick(time.Duration) {}

// done follows SIPp's uas -m: stop once that many calls have ended.
func (u *uas) done() bool {
	if u.o.MaxCalls <= 0 {
		return false
	}
	ended := u.tot.Succeeded + u.tot.Failed + u.sec.Succeeded + u.sec.Failed
	return ended >= u.o.MaxCalls && len(u.calls) == 0
}

func (u *uas) abort() int64 {
	n := int64(len(u.calls))
	for _, cl := range u.calls {
		cl.gen++
	}
	clear(u.calls)
	return n
}

func (u *uas) end(cl *call) {
	cl.gen++
	delete(u.calls, cl.callID)
}

func (u *uas) handle(m *msg, from peer, now time.Duration) {
	if m.isResp {
		u.sec.Unexpected++
		return
	}
	switch string(m.method) {
	case "INVITE":
		if cl := u.calls[string(m.callID)]; cl != nil {
			if len(m.toTag) == 0 {
				// A retransmitted INVITE: repeat our last response.
				u.sec.RetransReceived++
				u.send(cl.req, cl.peer)
				return
			}
		}
		if len(m.toTag) > 0 {
			// A re-INVITE inside a dialog: accept it, no new call.
			u.out = u.ep.response(u.out[:0], m, 200, "OK", "", true, "", u.ep.sdp)
			u.send(u.out, from)
			return
		}
		u.n++
		u.sec.Offered++
		cl := &call{n: u.n, callID: string(m.callID), peer: from, rtx: u.o.T1, sent: now}
		tag := u.ep.tagBase + "-" + strconv.FormatInt(u.n, 10)
		if u.o.RejectEvery > 0 && u.n%int64(u.o.RejectEvery) == 0 {
			cl.state = uRejected
			cl.req = u.ep.response(nil, m, 503, "Service Unavailable", tag, false, "Retry-After: 5\r\n", nil)
			u.failed(fail503RetryAfter, "503 Service Unavailable (Retry-After)")
		} else {
			cl.state = uWaitAck
			u.out = u.ep.response(u.out[:0], m, 180, "Ringing", tag, true, "", nil)
			u.send(u.out, from)
			cl.req = u.ep.response(nil, m, 200, "OK", tag, true, "", u.ep.sdp)
		}
		u.calls[cl.callID] = cl
		u.send(cl.req, from)
		if u.o.Transport == "u1" && !u.o.NoRetrans {
			u.arm(now+cl.rtx, cl, tRetrans)
		}
		u.arm(now+u.o.RecvTimeout, cl, tTimeout)
	case "ACK":
		cl := u.calls[string(m.callID)]
		if cl == nil {
			return
		}
		switch cl.state {
		case uWaitAck:
			cl.gen++ // stops 2xx retransmission and the ACK timeout
			cl.state = uConfirmed
		case uRejected:
			u.end(cl)
		default:
			u.sec.RetransReceived++
		}
	case "BYE":
		u.out = u.ep.response(u.out[:0], m, 200, "OK", "", false, "", nil)
		u.send(u.out, from)
		cl := u.calls[string(m.callID)]
		if cl == nil || cl.state == uRejected {
			u.sec.RetransReceived++ // a retransmitted BYE of a call already over
			return
		}
		// A BYE also proves the 2xx arrived, even if its ACK was lost.
		u.sec.Succeeded++
		u.end(cl)
	case "CANCEL":
		// Every INVITE is answered at once, so a CANCEL always comes after
		// the final response and only its own transaction needs an answer.
		u.out = u.ep.response(u.out[:0], m, 200, "OK", "", false, "", nil)
		u.send(u.out, from)
	case "REGISTER", "OPTIONS":
		key := string(m.callID) + " " + string(m.cseq)
		if _, dup := u.seen[key]; dup {
			u.sec.RetransReceived++
		} else {
			u.sec.Offered++
			u.sec.Succeeded++
			tx := &call{callID: key, state: uSeen}
			u.seen[key] = tx
			u.arm(now+u.o.RecvTimeout, tx, tTimeout)
		}
		extra := ""
		if bytes.Equal(m.method, []byte("REGISTER")) && len(m.contact) > 0 {
			// A 2xx to REGISTER lists the bindings (RFC 3261 10.3 step 8);
			// the one just sent is all this registrar keeps.
			extra = "Contact: <" + string(m.contact) + ">;expires=" + strconv.Itoa(u.o.Expires) + "\r\n"
		}
		u.out = u.ep.response(u.out[:0], m, 200, "OK", "", false, extra, nil)
		u.send(u.out, from)
	default:
		u.out = u.ep.response(u.out[:0], m, 200, "OK", "", false, "", nil)
		u.send(u.out, from)
	}
}

func (u *uas) fire(t timer, now time.Duration) {
	cl := t.c
	switch t.kind {
	case tRetrans:
		u.sec.Retransmissions++
		u.send(cl.req, cl.peer)
		cl.rtx *= 2
		if cl.rtx > u.o.T2 {
			cl.rtx = u.o.T2
		}
		// From the time it was due, not when it ran: a late loop must not
		// push retransmissions past the transaction timeout.
		u.arm(t.at+cl.rtx, cl, tRetrans)
	case tTimeout:
		if cl.state == uSeen {
			delete(u.seen, cl.callID)
			return
		}
		if cl.state == uWaitAck {
			u.failed(failTimeout, "timeout (no ACK)")
		}
		u.end(cl)
	}
}
