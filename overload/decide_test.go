package overload

import (
	"testing"

	"github.com/sipvisor/sipvisor/internal/sipscan"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	req := func(m sipscan.Method) Request { return Request{IsRequest: true, Method: m, Expires: -1} }
	with := func(r Request, f func(*Request)) Request { f(&r); return r }
	for _, c := range []struct {
		name string
		r    Request
		want Class
		kind sipscan.Kind
	}{
		{"INVITE", req(sipscan.Invite), ClassNew, sipscan.KindCall},
		{"SUBSCRIBE", req(sipscan.Subscribe), ClassNew, sipscan.KindSubscription},
		{"REGISTER", req(sipscan.Register), ClassRegister, sipscan.KindRegistration},
		{"REGISTER Expires: 3600", with(req(sipscan.Register), func(r *Request) { r.Expires = 3600 }), ClassRegister, sipscan.KindRegistration},
		{"REGISTER Expires: 0", with(req(sipscan.Register), func(r *Request) { r.Expires = 0 }), ClassRemoval, sipscan.KindRegistration},
		{"OPTIONS to the server", with(req(sipscan.Options), func(r *Request) { r.NoUser = true }), ClassProbe, sipscan.KindOther},
		{"OPTIONS to a user", req(sipscan.Options), ClassExisting, sipscan.KindOther},
		{"OPTIONS to the server in a dialog", with(req(sipscan.Options), func(r *Request) { r.NoUser, r.InDialog = true, true }), ClassExisting, sipscan.KindOther},
		{"MESSAGE", req(sipscan.Message), ClassExisting, sipscan.KindOther},
		{"PUBLISH", req(sipscan.Publish), ClassExisting, sipscan.KindOther},
		{"NOTIFY", req(sipscan.Notify), ClassExisting, sipscan.KindOther},
		{"re-INVITE", with(req(sipscan.Invite), func(r *Request) { r.InDialog = true }), ClassExisting, sipscan.KindOther},
		{"in-dialog SUBSCRIBE", with(req(sipscan.Subscribe), func(r *Request) { r.InDialog = true }), ClassExisting, sipscan.KindOther},
		{"ACK", req(sipscan.Ack), ClassExisting, sipscan.KindOther},
		{"CANCEL", req(sipscan.Cancel), ClassExisting, sipscan.KindOther},
		{"BYE", req(sipscan.Bye), ClassExisting, sipscan.KindOther},
		{"a response to an INVITE", Request{Method: sipscan.Invite, Expires: -1}, ClassExisting, sipscan.KindOther},
	} {
		class, kind := Classify(c.r)
		if class != c.want || kind != c.kind {
			t.Errorf("%s: want %v %v, have %v %v", c.name, c.want, c.kind, class, kind)
		}
	}
}

type draws struct {
	pass bool
	n    int
}

func (d *draws) Pass() bool { d.n++; return d.pass }

func TestDecide(t *testing.T) {
	t.Parallel()
	const ra = 9
	open := func() State {
		return State{RetryAfter: ra, Room: [4]int64{Unlimited, Unlimited, Unlimited, Unlimited}}
	}
	with := func(f func(*State)) State { s := open(); f(&s); return s }
	call, reg := sipscan.KindCall, sipscan.KindRegistration
	refuseAll := with(func(s *State) { s.RefuseAll = true })
	noCalls := with(func(s *State) { s.Room[call] = 0 })
	noBindings := with(func(s *State) { s.Room[reg] = 0 })
	full := with(func(s *State) { s.QueueFull = true })
	// A worker's own view: its quota, its gate; a REGISTER may refresh.
	worker := func(f func(*State)) State {
		return with(func(s *State) { s.RoomIsQuota, s.RefreshUnknown = true, true; f(s) })
	}
	for _, c := range []struct {
		name  string
		class Class
		kind  sipscan.Kind
		st    State
		throt *draws
		want  Refusal
		ask   bool
		draws int
	}{
		{"open: a call", ClassNew, call, open(), nil, RefuseNone, false, 0},
		{"refusing all: a call", ClassNew, call, refuseAll, nil, RefuseSuspended, false, 0},
		{"refusing all: a new REGISTER", ClassRegister, reg, refuseAll, nil, RefuseSuspended, false, 0},
		{"refusing all: a refresh", ClassRegister, reg, with(func(s *State) { s.RefuseAll, s.Refreshes = true, true }), nil, RefuseNone, false, 0},
		{"refusing all: a removal", ClassRemoval, reg, refuseAll, nil, RefuseNone, false, 0},
		{"refusing all: a probe", ClassProbe, sipscan.KindOther, refuseAll, nil, RefuseSuspended, false, 0},
		{"refusing all: in a dialog", ClassExisting, sipscan.KindOther, refuseAll, nil, RefuseNone, false, 0},
		{"no room for calls: a call", ClassNew, call, noCalls, nil, RefuseLimit, false, 0},
		{"no room for calls: a subscription", ClassNew, sipscan.KindSubscription, noCalls, nil, RefuseNone, false, 0},
		{"no room for calls: a probe", ClassProbe, sipscan.KindOther, noCalls, nil, RefuseNone, false, 0},
		{"no room for bindings: a new REGISTER", ClassRegister, reg, noBindings, nil, RefuseRegistrations, false, 0},
		{"no room for bindings: a refresh", ClassRegister, reg, with(func(s *State) { s.Room[reg], s.Refreshes = 0, true }), nil, RefuseNone, false, 0},
		{"queues full: a call", ClassNew, call, full, nil, RefuseQueue, false, 0},
		{"queues full: a new REGISTER", ClassRegister, reg, full, nil, RefuseQueue, false, 0},
		{"queues full: a probe", ClassProbe, sipscan.KindOther, full, nil, RefuseNone, false, 0},
		{"the limit before the queues", ClassNew, call, with(func(s *State) { s.Room[call], s.QueueFull = 0, true }), nil, RefuseLimit, false, 0},
		{"refusing all before the limit", ClassNew, call, with(func(s *State) { s.Room[call], s.RefuseAll = 0, true }), nil, RefuseSuspended, false, 0},
		{"throttled: a call", ClassNew, call, open(), &draws{}, RefuseThrottle, false, 1},
		{"throttle passes: a call", ClassNew, call, open(), &draws{pass: true}, RefuseNone, false, 1},
		{"a call refused by the queues draws no throttle", ClassNew, call, full, &draws{}, RefuseQueue, false, 0},
		{"a removal draws no throttle", ClassRemoval, reg, open(), &draws{}, RefuseNone, false, 0},
		{"worker, gate open, within quota", ClassNew, call, worker(func(*State) {}), nil, RefuseNone, false, 0},
		{"worker, quota used up: asks", ClassNew, call, worker(func(s *State) { s.Room[call] = 0 }), nil, RefuseNone, true, 0},
		{"worker, quota used up, waited too long: refuses", ClassNew, call, worker(func(s *State) { s.Room[call], s.QueueFull = 0, true }), nil, RefuseQueue, false, 0},
		{"worker, gate not open: asks", ClassNew, call, worker(func(s *State) { s.LoadUnknown = true }), nil, RefuseNone, true, 0},
		{"worker, refusing all: refuses a call", ClassNew, call, worker(func(s *State) { s.RefuseAll, s.LoadUnknown = true, true }), nil, RefuseSuspended, false, 0},
		{"worker, refusing all: asks about a REGISTER", ClassRegister, reg, worker(func(s *State) { s.RefuseAll, s.LoadUnknown = true, true }), nil, RefuseNone, true, 0},
		{"worker, waited too long: asks about a REGISTER", ClassRegister, reg, worker(func(s *State) { s.QueueFull = true }), nil, RefuseNone, true, 0},
		{"worker, gate not open: a probe is its own", ClassProbe, sipscan.KindOther, worker(func(s *State) { s.LoadUnknown = true }), nil, RefuseNone, false, 0},
	} {
		st := c.st
		if c.throt != nil {
			st.Throttle = c.throt
		}
		a := Decide(c.class, c.kind, st)
		if a.Refusal != c.want || a.Ask != c.ask || a.RetryAfter != ra {
			t.Errorf("%s: want %v ask %v Retry-After %d, have %v ask %v Retry-After %d", c.name, c.want, c.ask, ra, a.Refusal, a.Ask, a.RetryAfter)
		}
		if c.throt != nil && c.throt.n != c.draws {
			t.Errorf("%s: want %d draws of the throttle, have %d", c.name, c.draws, c.throt.n)
		}
	}
}
