package engine

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload/oc"
)

// RFC 7339 in the engine (package overload/oc holds the rules). As a
// server: every response written upstream to a request whose top Via
// offered oc carries the feedback the supervisor computed (ocStamp, in
// send). As a client: the Via of a request relayed to a destination of the
// destination sets offers oc (ocOffer, in withVia); the responses of a
// destination update its feedback, or hold it after a 503 with Retry-After
// and no oc (ocTake, in handle); ds_select_dst and ds_next_dst shed the
// new sessions its feedback asks (dsShed).

// dsReportUrgent is how soon a worker tells the supervisor of new
// feedback or a hold, for the other workers: well within an oc-validity.
const dsReportUrgent = 200 * time.Millisecond

// ocStamp writes the server's feedback into a response's top Via when that
// Via offered oc; anything else goes as it is.
func (w *Worker) ocStamp(b []byte) []byte {
	if w.opt.OverloadControl == nil || len(b) < 8 || string(b[:8]) != "SIP/2.0 " {
		return b
	}
	fb, ok := wire.OCFeedback(w.opt.OverloadControl())
	if !ok {
		return b
	}
	b, _ = oc.StampResponse(b, fb)
	return b
}

// ocOffer says whether a request relayed to d offers oc: it goes to a
// destination of the destination sets, and ds_overload_control is on.
func (w *Worker) ocOffer(d *dest) bool {
	if !w.opt.DispatchOC || len(w.ds.status) == 0 {
		return false
	}
	_, ok := w.ds.byAddr()[d.addr]
	return ok
}

// byAddr finds the destinations by address, resolving their hosts at the
// first call (as ds_is_from_list does).
func (v *dsView) byAddr() map[netip.AddrPort][]int {
	if v.index != nil {
		return v.index
	}
	ds := v.sel.Table().Dests
	if v.addrs == nil {
		v.addrs = make([]netip.AddrPort, len(ds))
		for i := range ds {
			v.addrs[i] = destAddr(ds[i].URI)
		}
	}
	v.index = map[netip.AddrPort][]int{}
	for i, a := range v.addrs {
		if a.IsValid() {
			v.index[a] = append(v.index[a], i)
		}
	}
	return v.index
}

// ocTake reads a response from a destination: its RFC 7339 feedback, or a
// 503 with Retry-After and no oc, which holds the destination out of the
// rotation for that long (RFC 3261 21.5.4).
func (w *Worker) ocTake(data []byte, src source) {
	v := &w.ds
	if len(v.status) == 0 || !src.addr.IsValid() {
		return
	}
	from := netip.AddrPortFrom(src.addr.Addr().Unmap(), src.addr.Port())
	fb, hasFB := oc.ResponseFeedback(data)
	is503 := len(data) > 11 && string(data[8:12]) == "503 "
	if !hasFB && !is503 {
		return
	}
	idx := v.byAddr()[from]
	if len(idx) == 0 {
		return
	}
	now := time.Now()
	ds := v.sel.Table().Dests
	changed := false
	switch {
	case hasFB && w.opt.DispatchOC:
		for _, i := range idx {
			before := v.oc[i].Share(now)
			if v.oc[i].Take(fb, now) {
				v.ocOut[ds[i].Key()] = v.oc[i]
				if v.oc[i].Share(now) != before {
					changed = true
				}
			}
		}
	case is503 && !hasFB:
		secs := retryAfter(data)
		if secs <= 0 {
			return
		}
		until := now.Add(time.Duration(secs) * time.Second)
		for _, i := range idx {
			v.holds[ds[i].Key()] = until.UnixMilli()
			v.holdUntil[i] = until
		}
		changed = true
	}
	if changed {
		w.dsReport(nil)
	}
}

// retryAfter reads the seconds of a message's Retry-After header, 0 when
// it has none.
func retryAfter(msg []byte) int {
	end := bytes.Index(msg, []byte("\r\n\r\n"))
	if end < 0 {
		end = len(msg)
	}
	for _, line := range bytes.Split(msg[:end], []byte("\n")) {
		name, val, ok := bytes.Cut(line, []byte(":"))
		if !ok || !bytes.EqualFold(bytes.TrimSpace(name), []byte("Retry-After")) {
			continue
		}
		val = bytes.TrimSpace(val)
		n := 0
		for n < len(val) && val[n] >= '0' && val[n] <= '9' {
			n++
		}
		s, err := strconv.Atoi(string(val[:n]))
		if err != nil {
			return 0
		}
		return min(s, 86400)
	}
	return 0
}

// dsShed applies the destinations' feedback to a new session about to be
// sent to the destinations of order (table indices, in the order to try):
// each is passed over with the probability its loss asks, and the rest
// kept in order. A request within a dialog, or a retransmission of one
// already handled (outside a failure_route, where the transaction is the
// request's own), is never shed.
func (c *msgCtx) dsShed(order []int) []int {
	w, v := c.w, &c.w.ds
	if !w.opt.DispatchOC || len(v.oc) == 0 || c.req == nil {
		return order
	}
	if _, ok := param(c.req.To().Params, "tag"); ok || c.req.Method == sip.ACK || c.req.Method == sip.CANCEL {
		return order
	}
	if !c.inFailure && w.findServerTx(c.req, string(c.req.Method)) != nil {
		return order // a retransmission: its transaction answers it
	}
	now := time.Now()
	kept := order[:0]
	for _, i := range order {
		if oc.Shed(v.oc[i].Share(now), false, rand.Float64) {
			v.shed[v.sel.Table().Dests[i].Key()]++
			continue
		}
		kept = append(kept, i)
	}
	return kept
}

// dsRefuseShed answers a new session that every destination's feedback
// shed: 503 with Retry-After at once, through a transaction so that its
// retransmissions get the same answer rather than another draw.
func (c *msgCtx) dsRefuseShed() {
	w := c.w
	t := c.stx
	if t == nil {
		if t = w.findServerTx(c.req, string(c.req.Method)); t == nil {
			t = w.newServerTx(c.req, c.src)
		}
		c.stx = t
	}
	retry := "Retry-After: " + strconv.Itoa(max(w.opt.RetryAfter.Draw(), 1))
	w.sendFinal(t, buildReply(t.req, 503, "Service Unavailable", t.ToTag, []string{retry}), 503)
	c.stopped = true
	w.dsReport(nil)
}

// dsHeld reports whether a destination is held after a 503 with
// Retry-After this worker saw, before the supervisor's states say so.
func (v *dsView) dsHeld(i int, now time.Time) bool {
	return i < len(v.holdUntil) && now.Before(v.holdUntil[i])
}

// repairVias mends what sipgo's parser makes of a Via parameter with a
// quoted value, as RFC 7339's oc-algo="loss" is: it keeps the raw text
// `oc-algo="loss"` as a parameter's name (with the rest of the header
// after it, when more parameters follow) beside, or instead of, the
// parameter itself, and a message written from it would carry the garbage
// on (`oc-algo="loss"=loss;oc-algo="loss"`). Such a name is read again as
// the parameters it holds, each kept once, in order.
func repairVias(m sip.Message) {
	// Headers rather than GetHeaders("Via"), which builds a list: this
	// runs for every decoded message.
	var hs []sip.Header
	switch x := m.(type) {
	case *sip.Request:
		hs = x.Headers()
	case *sip.Response:
		hs = x.Headers()
	default:
		hs = m.GetHeaders("Via")
	}
	for _, h := range hs {
		if v, ok := h.(*sip.ViaHeader); ok {
			v.Params = repairParams(v.Params)
		}
	}
}

func repairParams(hp sip.HeaderParams) sip.HeaderParams {
	bad := false
	for _, kv := range hp {
		if strings.ContainsAny(kv.K, "\";=") {
			bad = true
			break
		}
	}
	if !bad {
		return hp
	}
	out := make(sip.HeaderParams, 0, len(hp))
	seen := map[string]bool{}
	add := func(k, v string) {
		k = strings.TrimSpace(k)
		if k == "" || seen[strings.ToLower(k)] {
			return
		}
		seen[strings.ToLower(k)] = true
		out = append(out, sip.HeaderKV{K: k, V: v})
	}
	for _, kv := range hp {
		if !strings.ContainsAny(kv.K, "\";=") {
			add(kv.K, kv.V)
			continue
		}
		for _, p := range splitParams(kv.K) {
			k, v, _ := strings.Cut(p, "=")
			add(k, strings.TrimSpace(v))
		}
	}
	return out
}

// splitParams splits "a=1;b=\"x;y\";c" at the semicolons outside quotes.
func splitParams(s string) []string {
	var out []string
	q, start := false, 0
	for i := 0; i < len(s); i++ {
		switch s[i] {
		case '"':
			q = !q
		case ';':
			if !q {
				out = append(out, s[start:i])
				start = i + 1
			}
		}
	}
	return append(out, s[start:])
}
