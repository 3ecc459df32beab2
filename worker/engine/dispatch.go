package engine

import (
	"context"
	"math/rand/v2"
	"net"
	"net/netip"
	"strings"
	"time"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/dispatcher"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload/oc"
	"github.com/sipvisor/sipvisor/script"
	"github.com/sipvisor/sipvisor/worker"
)

// dsView is a worker's side of the destination sets: the table its config
// gives, the selector with this worker's counters, and each destination's
// state as the supervisor last sent it (as the list starts it until then).
type dsView struct {
	sel    *dispatcher.Selector
	status []dispatcher.Status // by table index
	// addrs are the destinations' addresses for ds_is_from_list, by table
	// index, found at its first call: a host name is resolved then, on
	// the loop, rather than at start, where a slow resolver would hold the
	// worker past its ready timeout.
	addrs []netip.AddrPort
	// frame is the last states the supervisor sent, by key: a table
	// reloaded takes them over for the destinations it keeps.
	frame map[string]dispatcher.Status
	gen   uint64
	// Calls sent to each destination since the last report.
	sent, failovers map[string]uint64
	reportAt        time.Time

	// oc is each destination's RFC 7339 feedback, by table index, and
	// holdUntil the end of a hold for a 503 with Retry-After this worker
	// saw; index finds destinations by address (ocTake, ocOffer).
	oc        []oc.State
	holdUntil []time.Time
	index     map[netip.AddrPort][]int
	// What the next report tells of them, by key: the feedback taken,
	// the holds, the sessions shed.
	ocOut map[string]oc.State
	holds map[string]int64
	shed  map[string]uint64
	// ocFrame is the feedback the supervisor last sent, by key.
	ocFrame map[string]oc.State
}

// dsReportEvery bounds how often a worker tells the supervisor what it
// sent where: a note a second, whatever the call rate.
const dsReportEvery = time.Second

// dsRoute is what ds_select_dst keeps for a request, and its transaction
// for ds_next_dst: the destinations left to try, by key.
type dsRoute struct {
	cur  string
	rest []string
}

// dispatchFor sends the worker's destination reports to the supervisor.
func dispatchFor(env *worker.Env) func([]byte) {
	if env.Note == nil {
		return nil
	}
	return func(r []byte) { env.Note(wire.DispatchNote(r)) }
}

// setDispatch (re)builds the view over a list, keeping the states the
// supervisor sent for the destinations that stay.
func (w *Worker) setDispatch(ds []dispatcher.Dest) {
	v := &w.ds
	t := dispatcher.NewTable(ds)
	v.sel = dispatcher.NewSelector(t, rand.IntN)
	v.status = make([]dispatcher.Status, len(ds))
	v.addrs, v.index = nil, nil
	v.oc, v.holdUntil = make([]oc.State, len(ds)), make([]time.Time, len(ds))
	for i := range ds {
		v.oc[i] = v.ocFrame[ds[i].Key()]
		if st, ok := v.frame[ds[i].Key()]; ok {
			v.status[i] = st
		} else {
			h := dispatcher.NewHealth(&ds[i])
			v.status[i] = h.Status(time.Time{})
		}
	}
	if v.sent == nil {
		v.sent, v.failovers = map[string]uint64{}, map[string]uint64{}
		v.ocOut, v.holds, v.shed = map[string]oc.State{}, map[string]int64{}, map[string]uint64{}
	}
}

// destAddr is the address a destination's URI names, resolving a host
// name once; invalid when it cannot be resolved.
func destAddr(uri string) netip.AddrPort {
	var u sip.Uri
	if err := sip.ParseUri(uri, &u); err != nil {
		return netip.AddrPort{}
	}
	port := u.Port
	if port == 0 {
		port = 5060
		if t, _ := u.UriParams.Get("transport"); u.Scheme == "sips" || strings.EqualFold(t, "tls") {
			port = 5061
		}
	}
	host := strings.Trim(u.Host, "[]")
	a, err := netip.ParseAddr(host)
	if err != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		ips, err := net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		if err != nil || len(ips) == 0 {
			return netip.AddrPort{}
		}
		a = ips[0]
	}
	return netip.AddrPortFrom(a.Unmap(), uint16(port))
}

// fetchDispatch asks the supervisor for the destinations' states at start,
// before the worker takes its first request. Without an answer the
// worker starts from the list's flags and takes the next frame.
func (w *Worker) fetchDispatch(call func([]byte) ([]byte, error)) {
	if call == nil || len(w.opt.Dispatcher) == 0 {
		return
	}
	ans, err := call(wire.DispatchStatesRequest())
	if err != nil || len(ans) == 0 {
		w.log.Warn("destination states not known at start; the list's flags apply until the supervisor sends them", "error", err)
		return
	}
	w.DispatchStates(ans)
}

// DispatchStates takes the destinations' states from the supervisor
// (worker.Dispatcher).
func (w *Worker) DispatchStates(b []byte) {
	s, err := dispatcher.DecodeStates(b)
	if err != nil {
		w.log.Warn("destination states unreadable", "error", err)
		return
	}
	v := &w.ds
	if s.Gen < v.gen {
		return
	}
	v.gen, v.frame, v.ocFrame = s.Gen, s.Status, s.OC
	t := v.sel.Table()
	for k, st := range s.Status {
		if i, ok := t.Index(k); ok {
			v.status[i] = st
		}
	}
	// Feedback another worker took, when newer than this one's.
	for k, st := range s.OC {
		if i, ok := t.Index(k); ok && (!v.oc[i].Has || st.Seq.After(v.oc[i].Seq)) {
			v.oc[i] = st
		}
	}
}

func (v *dsView) usable(i int) bool {
	return v.status[i].Usable() && (v.holdUntil == nil || !v.dsHeld(i, time.Now()))
}

// count notes a call sent to a destination, and reports the counts to the
// supervisor at most once a dsReportEvery.
func (w *Worker) dsCount(key string, failover bool) {
	v := &w.ds
	if failover {
		v.failovers[key]++
	} else {
		v.sent[key]++
	}
	w.dsReport(nil)
}

// dsTick reports the counts a worker holds when no call has reported them
// for dsReportEvery: those of the last second before the calls stopped.
func (w *Worker) dsTick(now time.Time) {
	v := &w.ds
	if (len(v.sent) > 0 || len(v.failovers) > 0 || len(v.shed) > 0) && now.Sub(v.reportAt) >= dsReportEvery ||
		(len(v.ocOut) > 0 || len(v.holds) > 0) && now.Sub(v.reportAt) >= dsReportUrgent {
		w.dsReport(nil)
	}
}

func (w *Worker) dsReport(mark map[string]dispatcher.Status) {
	v := &w.ds
	now := time.Now()
	every := dsReportEvery
	if len(v.ocOut) > 0 || len(v.holds) > 0 {
		every = dsReportUrgent
	}
	if w.opt.ReportDispatch == nil || (mark == nil && now.Sub(v.reportAt) < every) {
		return
	}
	v.reportAt = now
	r := dispatcher.Report{Sent: v.sent, Failovers: v.failovers, Mark: mark}
	if len(v.ocOut) > 0 || len(v.holds) > 0 || len(v.shed) > 0 {
		r.OC, r.Hold, r.Shed = v.ocOut, v.holds, v.shed
		v.ocOut, v.holds, v.shed = map[string]oc.State{}, map[string]int64{}, map[string]uint64{}
	}
	w.opt.ReportDispatch(dispatcher.EncodeReport(r))
	v.sent, v.failovers = map[string]uint64{}, map[string]uint64{}
}

// dsKey is what a hashed algorithm hashes: the Call-ID, or the user@host
// of the From, To or Request URI.
func (c *msgCtx) dsKey(alg dispatcher.Alg) string {
	req := c.req
	uriKey := func(u *sip.Uri) string { return u.User + "@" + strings.ToLower(u.Host) }
	switch alg {
	case dispatcher.AlgCallID:
		if id := req.CallID(); id != nil {
			return string(*id)
		}
	case dispatcher.AlgFrom:
		if f := req.From(); f != nil {
			return uriKey(&f.Address)
		}
	case dispatcher.AlgTo:
		if t := req.To(); t != nil {
			return uriKey(&t.Address)
		}
	case dispatcher.AlgRURI:
		return uriKey(&req.Recipient)
	}
	return ""
}

func fnDsSelectDst(c *msgCtx, a []*script.Literal) bool {
	if c.req == nil {
		return false
	}
	set, ok1 := c.intArg(a[0])
	n, ok2 := c.intArg(a[1])
	if !ok1 || !ok2 {
		return false
	}
	alg, err := dispatcher.ParseAlg(n)
	if err != nil {
		c.w.log.Warn(err.Error(), "at", a[1].Pos.String())
		return false
	}
	limit := int64(0)
	if len(a) > 2 {
		if limit, ok1 = c.intArg(a[2]); !ok1 {
			return false
		}
	}
	v := &c.w.ds
	var key string
	if alg.Hashed() {
		key = c.dsKey(alg)
	}
	order := v.sel.Select(int(set), alg, key, v.usable)
	if limit > 0 && int64(len(order)) > limit {
		order = order[:limit]
	}
	if len(order) == 0 {
		return false
	}
	if order = c.dsShed(order); len(order) == 0 {
		// Every destination's feedback shed it (RFC 7339): refused here,
		// at once, rather than sent to a server that would refuse it.
		c.dsRefuseShed()
		return false
	}
	ds := v.sel.Table().Dests
	r := &dsRoute{cur: ds[order[0]].Key()}
	for _, i := range order[1:] {
		r.rest = append(r.rest, ds[i].Key())
	}
	c.du = ds[order[0]].URI
	c.ds = r
	if c.stx != nil {
		c.stx.ds = r
	}
	c.w.dsCount(r.cur, false)
	return true
}

func (c *msgCtx) dsRoute() *dsRoute {
	if c.ds != nil {
		return c.ds
	}
	if c.stx != nil {
		return c.stx.ds
	}
	return nil
}

func fnDsNextDst(c *msgCtx, _ []*script.Literal) bool {
	r := c.dsRoute()
	if r == nil || c.req == nil {
		return false
	}
	v := &c.w.ds
	t := v.sel.Table()
	for len(r.rest) > 0 {
		k := r.rest[0]
		r.rest = r.rest[1:]
		// The states may have changed since the selection: one found
		// down meanwhile is skipped too, and one whose feedback sheds
		// this new session.
		if i, ok := t.Index(k); ok && v.usable(i) && len(c.dsShed([]int{i})) == 1 {
			r.cur = k
			c.du = t.Dests[i].URI
			c.w.dsCount(k, true)
			return true
		}
	}
	return false
}

func fnDsMarkDst(c *msgCtx, a []*script.Literal) bool {
	r := c.dsRoute()
	if r == nil {
		return false
	}
	st := dispatcher.Inactive
	if len(a) > 0 {
		switch strings.ToLower(c.expand(a[0])) {
		case "i", "p", "ip":
		case "a", "ap":
			st = dispatcher.Active
		default:
			c.w.log.Warn("ds_mark_dst wants \"i\", \"p\" or \"a\"", "at", a[0].Pos.String())
			return false
		}
	}
	v := &c.w.ds
	if i, ok := v.sel.Table().Index(r.cur); ok {
		v.status[i] = st
	}
	c.w.dsReport(map[string]dispatcher.Status{r.cur: st})
	return true
}

func fnDsIsFromList(c *msgCtx, a []*script.Literal) bool {
	if !c.src.addr.IsValid() {
		return false
	}
	set, mode := int64(-1), int64(0)
	var ok bool
	if len(a) > 0 {
		if set, ok = c.intArg(a[0]); !ok {
			return false
		}
	}
	if len(a) > 1 {
		if mode, ok = c.intArg(a[1]); !ok {
			return false
		}
	}
	v := &c.w.ds
	ds := v.sel.Table().Dests
	if v.addrs == nil {
		v.addrs = make([]netip.AddrPort, len(ds))
		for i := range ds {
			v.addrs[i] = destAddr(ds[i].URI)
		}
	}
	from := netip.AddrPortFrom(c.src.addr.Addr().Unmap(), c.src.addr.Port())
	for i, d := range ds {
		if set >= 0 && int64(d.Set) != set {
			continue
		}
		ap := v.addrs[i]
		if ap.Addr() == from.Addr() && (mode&1 != 0 || ap.Port() == from.Port()) {
			return true
		}
	}
	return false
}

// fnTSetFr sets the transaction's timeouts, in milliseconds, as
// Kamailio's t_set_fr: fr_inv after a provisional reply, fr (timers B and
// F) before any; 0 keeps the default. A dispatcher fails over in fr rather
// than the 32 s of 64×T1 when a destination dies.
func fnTSetFr(c *msgCtx, a []*script.Literal) bool {
	inv, ok := c.intArg(a[0])
	if !ok || inv < 0 {
		return false
	}
	var fr int64
	if len(a) > 1 {
		if fr, ok = c.intArg(a[1]); !ok || fr < 0 {
			return false
		}
	}
	c.frInv, c.fr = time.Duration(inv)*time.Millisecond, time.Duration(fr)*time.Millisecond
	if c.stx != nil {
		c.toTx(c.stx)
	}
	return true
}

// toTx gives the transaction t_relay made what the script set for it
// before: the destinations left to fail over to, the timeouts.
func (c *msgCtx) toTx(t *serverTx) {
	if c.ds != nil {
		t.ds = c.ds
	}
	if c.frInv > 0 {
		t.frInv = c.frInv
	}
	if c.fr > 0 {
		t.fr = c.fr
	}
}
