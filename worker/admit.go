package worker

import (
	"log/slog"
	"strconv"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload"
)

// Ask asks the supervisor's admission about a new session of method with
// callID (wire.AdmitRequest): the one decision, for what a worker cannot
// decide alone. A call that fails (the supervisor stuck or gone) admits, as
// refusing every new session on a control channel's hiccup would be worse
// than serving them; a reason the worker does not know still refuses.
func (e *Env) Ask(method sipscan.Method, callID []byte) (overload.Refusal, int) {
	log := e.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	raw, err := e.Call(wire.AdmitRequest(byte(method), callID))
	if err != nil {
		log.Warn("admission call failed; admitting", "error", err)
		return overload.RefuseNone, 0
	}
	reason, retry, err := wire.ParseAdmitAnswer(raw)
	switch {
	case err != nil:
		log.Warn("admission answer unreadable; admitting", "error", err)
		return overload.RefuseNone, 0
	case reason >= byte(overload.NumRefusals):
		return overload.RefuseSuspended, retry
	}
	return overload.Refusal(reason), retry
}

// Admit is the one decision about a new session of class c and kind k
// (overload.Classify) that the worker read from a connection, wait ns
// after it was read: by the gate and quota the supervisor wrote into the
// worker's page (steering.PlanStream) where they suffice, as a worker
// reading its own UDP socket decides (admitLocal), and by asking (Ask)
// where they do not. An answer given here is counted in the page
// (wire.OffDoorAdmitted, OffDoorRefused, DoorProbesRefused), where the
// supervisor adds it to the group's counts, and a refusal is logged here,
// as the supervisor logs what it refuses when asked. Runs on one goroutine
// at a time, the loop's.
func (e *Env) Admit(c overload.Class, k sipscan.Kind, method sipscan.Method, callID []byte, wait int64) (overload.Refusal, int) {
	pg := e.page
	if pg == nil {
		return e.Ask(method, callID)
	}
	gate := pg.Load(wire.OffGate)
	ans := admitLocal(c, k, gate, pg.Load(wire.OffQuota+8*int(k)), pg.Load(wire.OffDoorAdmitted+8*int(k)),
		int64(pg.Load(wire.OffQueueDelayLimit)), wait)
	if ans.Ask {
		r, retry := e.Ask(method, callID)
		if retry == 0 {
			retry = wire.GateRetryAfter(gate)
		}
		return r, retry
	}
	switch {
	case !ans.Refused():
		if c != overload.ClassProbe {
			pg.Add(wire.OffDoorAdmitted+8*int(k), 1)
		}
		return ans.Refusal, ans.RetryAfter
	case c == overload.ClassProbe:
		pg.Add(wire.OffDoorCounters+8*wire.DoorProbesRefused, 1)
	default:
		pg.Add(wire.OffDoorRefused+8*int(ans.Refusal), 1)
	}
	log := e.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if e.where == "" {
		e.where = "worker " + strconv.Itoa(e.ID)
	}
	e.refusals.Note(log, e.where, ans.Refusal, c, k)
	return ans.Refusal, ans.RetryAfter
}
