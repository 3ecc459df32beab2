package worker

import (
	"log/slog"

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
