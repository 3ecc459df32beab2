package overload

import (
	"testing"

	"github.com/sipvisor/sipvisor/internal/sipscan"
)

// The decisions that once drifted apart, held together: what the door
// decides (Decide) agrees with the room the workers are given (Room), and
// both follow CONFIG.md, where max_sessions bounds calls and
// subscriptions and nothing else.
func TestAdmissionDrift(t *testing.T) {
	t.Parallel()
	c := counts{sipscan.KindCall: 10}
	a := newAdmission(t, &c, nil)
	a.Limits().MaxSessions.Store(10)
	g := a.NewGate(GateOptions{Name: "udp", Group: &load{takes: true}})

	// A MESSAGE or an OPTIONS to a user at max_sessions: no session, so
	// neither the door nor a worker refuses it.
	for _, m := range []sipscan.Method{sipscan.Message, sipscan.Options, sipscan.Info} {
		r, retry := a.Decide(g, msg(m, "x"))
		if r != RefuseNone {
			t.Errorf("%v outside a dialog at max_sessions: want admitted, have %v", m, r)
		}
		if retry != 7 {
			t.Errorf("%v: want the configured Retry-After 7 for a refusal further on, have %d", m, retry)
		}
	}
	if room := a.Room(g); room[sipscan.KindOther] != Unlimited {
		t.Errorf("room for other requests at max_sessions: want unlimited, have %d", room[sipscan.KindOther])
	}
	// A new call is refused by both.
	if r, _ := a.Decide(g, msg(sipscan.Invite, "x")); r != RefuseLimit {
		t.Errorf("INVITE at max_sessions: want %v, have %v", RefuseLimit, r)
	}
	if room := a.Room(g); room[sipscan.KindCall] != 0 {
		t.Errorf("room for calls at max_sessions: want 0, have %d", room[sipscan.KindCall])
	}
}
