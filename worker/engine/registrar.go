package engine

import (
	"errors"
	"net"
	"strconv"
	"strings"
	"time"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/location"
)

// aorOf is the address of record a URI names (RFC 3261 section 10):
// sip:user@domain, normalised by location.Key, with the port dropped as
// Kamailio's usrloc does (kept with aor_keep_port). A host that is one of
// this server's own addresses stands for the home domain (the first domain
// setting), so that a phone registered through one address, or through
// another node of a cluster, is found through any other.
func (w *Worker) aorOf(u *sip.Uri) string {
	host := u.Host
	if w.isOwnAddr(host, u.Port) {
		host = w.home
	} else if w.opt.AORKeepPort && u.Port != 0 && u.Port != 5060 && u.Port != 5061 {
		host = net.JoinHostPort(strings.Trim(host, "[]"), strconv.Itoa(u.Port))
	}
	if u.User == "" {
		return location.Key("sip:" + host)
	}
	return location.Key("sip:" + u.User + "@" + host)
}

// homeDomain is what AORs at this server's own addresses are filed under:
// the first served domain, else the first socket's address (with its port
// when keepPort and the port is not 5060).
func homeDomain(domains []string, self []selfAddr, keepPort bool) string {
	if len(domains) > 0 {
		return domains[0]
	}
	if len(self) == 0 {
		return "localhost"
	}
	a := self[0].ap
	if a.Port() == 5060 || !keepPort {
		return a.Addr().String()
	}
	return a.String()
}

// errLoop is a relay whose next hop is this server itself.
var errLoop = errors.New("next hop is this server")

// contactLoops reports whether a registered contact would route requests
// back here: one of this server's addresses, or a domain it serves (which
// lookup would resolve to itself again).
func (w *Worker) contactLoops(u *sip.Uri) bool {
	if w.served(u.Host) {
		return true
	}
	return w.isOwnAddr(u.Host, u.Port)
}

// maxBatch bounds the REGISTERs written in one transaction, and with it
// how long the first of them waits for the others' handling.
const maxBatch = 64

// batchWait bounds how long a REGISTER's write waits: for its loop turn to
// end when messages keep coming without a pause, and for commitGap.
const batchWait = commitGap

// commitGap paces a worker's group commits: a turn that ends less than
// commitGap after the last commit holds its REGISTERs until the gap is
// over, so that those arriving meanwhile share the transaction. Each
// transaction costs the store's locks, its log write and their system
// calls (most of a REGISTER's CPU at a few hundred a second per worker,
// each in a turn of its own); a REGISTER that comes after a quiet gap is
// written at once, so at low rates none waits. 50 ms, not 10: at 200
// REGISTERs/s over two workers a commit every 10 ms wrote one or two each,
// and the tree took 0.325 and 0.439 ms of CPU a REGISTER in two runs
// against 0.213 and 0.247 (30 ms: 0.247, 0.342), at 1,000/s 0.096 against
// 0.075 at 30 ms (bench/profile.sh --kind register, each build's work
// tree). A REGISTER's 200 OK waits up to 50 ms more, a tenth of the T1 a
// UDP client waits before it sends again.
const commitGap = 50 * time.Millisecond

// commitTimes is the group commit's policy, a pure function of the held
// batch and the clock: n REGISTERs held since since, the last commit at
// last. It returns due, when the batch is written even while messages keep
// coming (full, or the first has waited batchWait), and idle, when it is
// written if the loop finds nothing more to read (the end of the gap after
// the last commit, never after due).
func commitTimes(n int, since, last time.Time) (due, idle time.Time) {
	if n >= maxBatch {
		return since, since
	}
	due = since.Add(batchWait)
	idle = last.Add(commitGap)
	if idle.After(due) {
		idle = due
	}
	return due, idle
}

// regBatch holds the REGISTERs of the loop's turn, whose writes are done
// together at its end (Options.GroupCommit).
type regBatch struct {
	changes []location.Change
	reqs    []heldReg
	since   time.Time
	// last is when the last batch was written.
	last time.Time
	// binds holds the bindings of changes made on the bytes, heads what
	// their replies need of their requests (heldReg.head): both reused
	// from batch to batch.
	binds []location.Binding
	heads []byte
}

// heldReg is a REGISTER whose reply waits for its write: decoded (req),
// or held on its bytes, whose reply's header lines from its Vias to its
// CSeq are heads[head[0]:head[1]], its Call-ID heads[head[1]:head[2]],
// sent to dest.
type heldReg struct {
	req  *sip.Request
	src  source
	dest dest
	head [3]int
}

// saveChange writes a REGISTER's change and answers it: at once, or with
// group commit at the end of the loop's turn, with the other REGISTERs of
// the turn in one transaction. Either way its 200 OK leaves only once the
// write is done, so a client told it is registered is, as durably as the
// store keeps anything; the script goes on before that, as it would after
// a save() that succeeded.
func (w *Worker) saveChange(c *msgCtx, ch location.Change) bool {
	if !w.opt.GroupCommit {
		out, err := location.Apply(w.opt.Store, []location.Change{ch})
		if err != nil {
			w.storeFailed(c, changeOp(ch), ch.AOR, err)
			return false
		}
		w.replyRegistered(c.req, c.src, out[0])
		return true
	}
	b := &w.regs
	if len(b.changes) == 0 {
		b.since = time.Now()
	}
	b.changes = append(b.changes, ch)
	b.reqs = append(b.reqs, heldReg{req: c.req, src: c.src})
	if len(b.changes) >= maxBatch {
		w.EndTurn()
	}
	return true
}

func changeOp(ch location.Change) string {
	switch {
	case ch.RemoveAll:
		return "remove"
	case len(ch.Bindings) == 0:
		return "lookup"
	}
	return "save"
}

// Batched reports whether REGISTERs are held, and when they are to be
// written (commitTimes; worker.TurnEnder).
func (w *Worker) Batched() (held bool, due, idle time.Time) {
	b := &w.regs
	if len(b.changes) == 0 {
		return false, time.Time{}, time.Time{}
	}
	due, idle = commitTimes(len(b.changes), b.since, b.last)
	return true, due, idle
}

// EndTurn writes the REGISTERs held since the turn began, in one call to
// the store, and answers each (worker.TurnEnder).
func (w *Worker) EndTurn() {
	b := &w.regs
	if len(b.changes) == 0 {
		return
	}
	out, err := location.Apply(w.opt.Store, b.changes)
	b.last = time.Now()
	for i := range b.reqs {
		r := &b.reqs[i]
		switch {
		case i < len(out) && r.req != nil:
			w.replyRegistered(r.req, r.src, out[i])
		case i < len(out):
			var eb [1024]byte
			w.replyHeld(r, 200, "OK", appendRegistered(eb[:0], out[i], b.heads[r.head[1]:r.head[2]]))
		case r.req != nil:
			w.refuseStore(r.req, r.src, changeOp(b.changes[i]), b.changes[i].AOR, err)
		default:
			code, reason, retry := w.storeRefusal(changeOp(b.changes[i]), b.changes[i].AOR, err)
			var eb [32]byte
			e := eb[:0]
			if retry > 0 {
				e = append(strconv.AppendInt(append(e, "Retry-After: "...), int64(retry), 10), "\r\n"...)
			}
			w.replyHeld(r, code, reason, e)
		}
	}
	clear(b.changes)
	clear(b.reqs)
	clear(b.binds)
	b.changes, b.reqs, b.binds, b.heads = b.changes[:0], b.reqs[:0], b.binds[:0], b.heads[:0]
}

// replyRegistered is a REGISTER's 200 OK, listing the AOR's bindings.
// A contact filed for outbound is listed with its instance and reg-id, and
// the answer requires outbound (RFC 5626 6); the Path the registrar keeps
// is echoed (RFC 3327 5.3).
func (w *Worker) replyRegistered(req *sip.Request, src source, bs []location.Binding) {
	extra := make([]string, 0, len(bs)+3)
	outbound := false
	for _, b := range bs {
		left := int(time.Until(b.Expires).Round(time.Second) / time.Second)
		ct := "Contact: <" + b.Contact + ">;expires=" + strconv.Itoa(left)
		if b.Instance != "" {
			ct += ";+sip.instance=" + b.Instance + ";reg-id=" + b.RegID
			outbound = outbound || b.CallID == string(*req.CallID())
		}
		extra = append(extra, ct)
	}
	if outbound {
		extra = append(extra, "Require: outbound", "Supported: outbound")
	}
	for _, h := range req.GetHeaders("Path") {
		extra = append(extra, "Path: "+h.Value())
	}
	w.replyStateless(req, src, 200, "OK", extra)
}

// storeFailed answers a request whose registrar or lookup call failed, and
// stops its script.
func (w *Worker) storeFailed(c *msgCtx, op, aor string, err error) {
	w.refuseStore(c.req, c.src, op, aor, err)
	c.stopped = true
}

// refuseStore answers a request whose registrar or lookup call failed: 503
// with Retry-After when the store is out of reach (the client will try
// again, and may reach another node), 500 for anything else. The log says
// so at most once a second, with the count in between, so that a store
// outage at thousands of REGISTERs a second does not drown the log.
func (w *Worker) refuseStore(req *sip.Request, src source, op, aor string, err error) {
	code, reason, retry := w.storeRefusal(op, aor, err)
	var extra []string
	if retry > 0 {
		extra = []string{"Retry-After: " + strconv.Itoa(retry)}
	}
	w.replyStateless(req, src, code, reason, extra)
}

// storeRefusal counts and logs a failed store call, and says how to
// answer it (refuseStore): retry is the Retry-After, 0 for none.
func (w *Worker) storeRefusal(op, aor string, err error) (code int, reason string, retry int) {
	w.Stats.StoreErrors++
	now := time.Now()
	if now.Sub(w.storeLogAt) >= time.Second {
		w.log.Error("location store call failed", "op", op, "aor", aor, "error", err,
			"failures_since_last_log", w.Stats.StoreErrors-w.storeLogged)
		w.storeLogAt, w.storeLogged = now, w.Stats.StoreErrors
	}
	if errors.Is(err, location.ErrUnavailable) {
		retry := w.opt.RetryAfter.Draw()
		if retry == 0 {
			retry = 5
		}
		return 503, "Location Store Unavailable", retry
	}
	return 500, "Server Internal Error", 0
}

// reportStoreErrors hands the store failures counted since the last report
// to Options.ReportStoreErrors, at most once a second (from Tick).
func (w *Worker) reportStoreErrors(now time.Time) {
	if w.opt.ReportStoreErrors == nil || w.Stats.StoreErrors == w.storeReported || now.Sub(w.storeReportAt) < time.Second {
		return
	}
	w.opt.ReportStoreErrors(w.Stats.StoreErrors - w.storeReported)
	w.storeReported, w.storeReportAt = w.Stats.StoreErrors, now
}

// loop counts a request whose next hop was this server and says so in the
// log, at most once a second.
func (w *Worker) loop(req *sip.Request) {
	w.Stats.Loops++
	if now := time.Now(); now.Sub(w.loopLogAt) >= time.Second {
		w.loopLogAt = now
		w.log.Warn("request not relayed: its next hop is this server (482 Loop Detected)",
			"method", string(req.Method), "ruri", req.Recipient.String(), "loops", w.Stats.Loops)
	}
}
