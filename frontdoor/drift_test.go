package frontdoor

import (
	"bytes"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/overload/watermark"
)

// idle is a server with nothing in progress, as admission reads it: no
// session, no binding, empty queues; it logs nowhere.
type idle struct{}

func (idle) Sessions(sipscan.Kind) int64 { return 0 }
func (idle) Refreshes([]byte) bool       { return false }
func (idle) Info(string, ...any)         {}
func (idle) Warn(string, ...any)         {}

// idleGroup is a group that takes sessions and has none.
type idleGroup struct{}

func (idleGroup) Sessions() (int64, bool)   { return 0, true }
func (idleGroup) QueueUsage() float64       { return 0 }
func (idleGroup) QueueDelay() time.Duration { return 0 }

// A new session admission let in and no worker could take is refused by
// the door with the configured Retry-After, as admission's own refusals
// are: a client told to come back in 5 s when the operator set 30 comes
// back six times too soon.
func TestDoorRefusalsCarryTheConfiguredRetryAfter(t *testing.T) {
	t.Parallel()
	a := overload.New(prometheus.NewRegistry(), overload.Inputs{Sessions: idle{}, Registrations: idle{}, RetryAfter: func() int { return 30 }, Log: idle{}},
		overload.Settings{Marks: watermark.Defaults()})
	g := a.NewGate(overload.GateOptions{Name: "udp", Group: idleGroup{}})
	rec := &recorder{}
	d := New(0, func(*sipscan.Msg, bool, int64) Target { return nil },
		func(m *sipscan.Msg, now int64) (overload.Refusal, int) { return a.Decide(g, m) }, rec.reply)
	d.Handle(frame(invite("no-worker", "")), src, time.Now().UnixNano())
	if len(rec.replies) != 1 || !bytes.HasPrefix(rec.replies[0], []byte("SIP/2.0 503")) {
		t.Fatalf("want one 503, have %q", rec.replies)
	}
	if !bytes.Contains(rec.replies[0], []byte("\r\nRetry-After: 30\r\n")) {
		t.Errorf("no worker: want the configured Retry-After: 30, have\n%s", rec.replies[0])
	}
	if n := d.Stats.Refused[overload.RefuseNoWorker].Load(); n != 1 {
		t.Errorf("want the refusal counted as no_worker, have %d", n)
	}
}

// A refusal by the one decision, over the whole state admission reads,
// costs the door no allocation, as a refusal by a stub did.
func TestRefusalByAdmissionAllocatesNothing(t *testing.T) {
	a := overload.New(prometheus.NewRegistry(), overload.Inputs{Sessions: idle{}, Registrations: idle{}, RetryAfter: func() int { return 30 }, Log: idle{}},
		overload.Settings{Marks: watermark.Defaults()})
	g := a.NewGate(overload.GateOptions{Name: "udp", Group: idleGroup{}})
	a.Limits().MaxSessions.Store(1)
	a.Limits().MaxByKind[sipscan.KindCall].Store(1)
	a.Limits().QueueAdmission.Store(50)
	a.SuspendManually(time.Unix(1, 0))
	var sent int
	d := New(0, func(*sipscan.Msg, bool, int64) Target { return nil },
		func(m *sipscan.Msg, now int64) (overload.Refusal, int) { return a.Decide(g, m) },
		func(p []byte, _ netip.AddrPort) { sent++ })
	f := frame(invite("refused", ""))
	now := time.Now().UnixNano()
	if n := testing.AllocsPerRun(200, func() { d.Handle(f, src, now) }); n != 0 {
		t.Errorf("a refusal allocates %v times", n)
	}
	if sent == 0 {
		t.Fatal("nothing refused")
	}
}
