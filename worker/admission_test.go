package worker

import (
	"bytes"
	"net/netip"
	"strconv"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sipvisor/sipvisor/frontdoor"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/overload/throttle"
	"github.com/sipvisor/sipvisor/overload/watermark"
	"github.com/sipvisor/sipvisor/supervisor/steering"
)

// The server's state as admission reads it: plain values, what the
// supervisor would read from its doors, connections, store and queues.
type admState struct {
	sessions [4]int64
	own      int64 // the group's sessions
	usage    float64
	delay    time.Duration
}

func (s *admState) Sessions(k sipscan.Kind) int64 { return s.sessions[k] }
func (s *admState) Refreshes(callID []byte) bool  { return string(callID) == "live" }
func (s *admState) Info(string, ...any)           {}
func (s *admState) Warn(string, ...any)           {}

type admGroup struct{ s *admState }

func (g admGroup) Sessions() (int64, bool)   { return g.s.own, true }
func (g admGroup) QueueUsage() float64       { return g.s.usage }
func (g admGroup) QueueDelay() time.Duration { return g.s.delay }

// acceptAll is a worker's queue that takes every frame.
type acceptAll struct{ n uint64 }

func (a *acceptAll) SendSeq([]byte, int64) (uint64, error) { a.n++; return a.n, nil }
func (a *acceptAll) Waiting(uint64) bool                   { return false }

// One table of messages and admission states, decided through every entry
// point, each of which passes what it knows: the pure decision over the
// state admission reads (overload.Decide); the supervisor's UDP door over
// the datagram's bytes; the supervisor's answer to a worker's ask, as a
// TCP worker and a direct-reading worker beyond its gate ask it, over the
// wire's bytes; and a worker reading its own socket, from the gate and
// quota steering.Plan writes into its page, asking where they are not
// enough. Every one gives the same answer, with the configured Retry-After.
func TestOneAdmissionDecision(t *testing.T) {
	t.Parallel()
	const retryAfter = 7
	via := "127.0.0.1:5070"
	removal := testkit.Register("sip:alice@example.com", "sip:alice@127.0.0.1:5070", via, "new", 0)
	inDialog := testkit.Invite("sip:bob@example.com", via, "dlg")
	inDialog.Method, inDialog.ToTag = "BYE", "bob-tag"
	message := testkit.Invite("sip:bob@example.com", via, "msg")
	message.Method, message.Contact = "MESSAGE", ""
	subscribe := testkit.Invite("sip:bob@example.com", via, "sub")
	subscribe.Method, subscribe.Headers = "SUBSCRIBE", []string{"Event: presence", "Expires: 3600"}
	msgs := []struct {
		name string
		b    []byte
	}{
		{"INVITE", testkit.Invite("sip:bob@example.com", via, "call").Bytes()},
		{"SUBSCRIBE", subscribe.Bytes()},
		{"REGISTER new", testkit.Register("sip:alice@example.com", "sip:alice@127.0.0.1:5070", via, "new", 3600).Bytes()},
		{"REGISTER refresh", testkit.Register("sip:alice@example.com", "sip:alice@127.0.0.1:5070", via, "live", 3600).Bytes()},
		{"REGISTER removal", removal.Bytes()},
		{"OPTIONS probe", testkit.Options("sip:127.0.0.1", via, "probe").Bytes()},
		{"OPTIONS to a user", testkit.Options("sip:bob@example.com", via, "ping").Bytes()},
		{"MESSAGE", message.Bytes()},
		{"BYE in a dialog", inDialog.Bytes()},
		{"response", []byte("SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP " + via + ";branch=z9hG4bK-r\r\nFrom: <sip:a@x>;tag=1\r\nTo: <sip:b@x>;tag=2\r\nCall-ID: resp\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n")},
	}
	type limits struct{ sessions, perGroup, calls, regs int64 }
	S, L, R, Q, T := overload.RefuseSuspended, overload.RefuseLimit, overload.RefuseRegistrations, overload.RefuseQueue, overload.RefuseThrottle
	for _, tc := range []struct {
		name      string
		st        admState
		lim       limits
		queue     float64
		delay     time.Duration
		suspended bool
		stopping  bool
		throttled bool
		// want is the refusal by message; a message not named is admitted.
		want map[string]overload.Refusal
	}{
		{name: "open", want: nil},
		{name: "suspended", suspended: true,
			want: map[string]overload.Refusal{"INVITE": S, "SUBSCRIBE": S, "REGISTER new": S, "OPTIONS probe": S}},
		{name: "stopping", stopping: true,
			want: map[string]overload.Refusal{"INVITE": S, "SUBSCRIBE": S, "REGISTER new": S, "OPTIONS probe": S}},
		{name: "max_calls reached", st: admState{sessions: [4]int64{sipscan.KindCall: 2}}, lim: limits{calls: 2},
			want: map[string]overload.Refusal{"INVITE": L}},
		{name: "max_sessions reached: calls and subscriptions only", st: admState{sessions: [4]int64{sipscan.KindCall: 6, sipscan.KindSubscription: 4, sipscan.KindRegistration: 500}},
			lim: limits{sessions: 10}, want: map[string]overload.Refusal{"INVITE": L, "SUBSCRIBE": L}},
		{name: "max_sessions with room", st: admState{sessions: [4]int64{sipscan.KindCall: 6, sipscan.KindRegistration: 500}}, lim: limits{sessions: 10}},
		{name: "max_registrations reached", st: admState{sessions: [4]int64{sipscan.KindRegistration: 3}}, lim: limits{regs: 3},
			want: map[string]overload.Refusal{"REGISTER new": R}},
		{name: "the group at its limit", st: admState{own: 4}, lim: limits{perGroup: 4},
			want: map[string]overload.Refusal{"INVITE": L, "SUBSCRIBE": L}},
		{name: "queues over queue_admission", st: admState{usage: 60}, queue: 50,
			want: map[string]overload.Refusal{"INVITE": Q, "SUBSCRIBE": Q, "REGISTER new": Q}},
		{name: "a wait over queue_delay_admission", st: admState{delay: 2 * time.Second}, delay: time.Second,
			want: map[string]overload.Refusal{"INVITE": Q, "SUBSCRIBE": Q, "REGISTER new": Q}},
		{name: "the throttle refusing every session", throttled: true,
			want: map[string]overload.Refusal{"INVITE": T, "SUBSCRIBE": T, "REGISTER new": T}},
		{name: "suspension first", suspended: true, st: admState{sessions: [4]int64{sipscan.KindCall: 2}, usage: 60}, lim: limits{calls: 2}, queue: 50,
			want: map[string]overload.Refusal{"INVITE": S, "SUBSCRIBE": S, "REGISTER new": S, "OPTIONS probe": S}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, msg := range msgs {
				want := tc.want[msg.name]
				// Each entry point gets a server of its own in the same state:
				// the throttle's draws are its own.
				server := func() (*overload.Admission, *overload.Gate) {
					st := tc.st
					a := overload.New(prometheus.NewRegistry(), overload.Inputs{Sessions: &st, Registrations: &st,
						RetryAfter: func() int { return retryAfter }, Log: &st}, overload.Settings{Marks: watermark.Defaults()})
					l := a.Limits()
					l.MaxSessions.Store(tc.lim.sessions)
					l.MaxPerGroup.Store(tc.lim.perGroup)
					l.MaxByKind[sipscan.KindCall].Store(tc.lim.calls)
					l.MaxByKind[sipscan.KindRegistration].Store(tc.lim.regs)
					l.QueueAdmission.Store(tc.queue)
					l.QueueDelay.Store(int64(tc.delay))
					thr := throttle.Config{Threshold: time.Second, Count: 1, Step: 1, Enabled: tc.throttled}
					g := a.NewGate(overload.GateOptions{Name: "udp", Group: admGroup{&st}, Throttle: thr})
					if tc.throttled {
						a.EchoTick(g, 5*time.Second, time.Unix(1, 0))
					}
					if tc.suspended {
						a.SuspendManually(time.Unix(1, 0))
					}
					if tc.stopping {
						a.Stop()
					}
					return a, g
				}
				var m sipscan.Msg
				if err := sipscan.Scan(msg.b, &m); err != nil {
					t.Fatalf("%s: %v", msg.name, err)
				}
				c, k := overload.Classify(overload.RequestOf(&m))

				// The pure decision over the state admission reads.
				a, g := server()
				pure := overload.Decide(c, k, a.State(g, c, k, m.CallID))
				check(t, msg.name, "the pure decision", pure, want, retryAfter)

				// The supervisor's UDP door, over the bytes.
				a, g = server()
				check(t, msg.name, "the supervisor's door", doorAnswer(t, a, g, msg.b, retryAfter), want, retryAfter)

				// The supervisor's answer to a worker's ask: workers ask only
				// about what admission may refuse.
				askable := c == overload.ClassNew || c == overload.ClassRegister || c == overload.ClassProbe
				a, g = server()
				env := askingEnv(a, g)
				if askable {
					r, retry := env.Ask(m.Method, m.CallID)
					check(t, msg.name, "the supervisor's answer to an ask", overload.Answer{Refusal: r, RetryAfter: retry}, want, retryAfter)
				}

				// A worker reading its own socket: the gate and quota the
				// supervisor derives and writes into its page, its own
				// measure of the wait, and the ask beyond them.
				a, g = server()
				in := steering.Inputs{Now: time.Unix(100, 0), Workers: []steering.Worker{{ID: 1}}}
				steering.ReadAdmission(&in, a, g, func() int { return retryAfter }, nil)
				plan := steering.Plan(in)
				local := admitLocal(c, k, plan.Gate, plan.Quotas[0][k], 0, int64(plan.QueueDelay), int64(tc.st.delay))
				if local.Ask {
					if !askable {
						t.Errorf("%s: a worker would ask about what it never asks about (%v)", msg.name, c)
					}
					r, retry := askingEnv(a, g).Ask(m.Method, m.CallID)
					local = overload.Answer{Refusal: r, RetryAfter: retry}
				}
				check(t, msg.name, "a worker's own gate", local, want, retryAfter)

				// A worker reading connections: the gate and quota
				// steering.PlanStream writes into its page, its own measure
				// of the wait, and the ask beyond them (Env.Admit).
				if askable {
					a, g = server()
					in := steering.Inputs{Now: time.Unix(100, 0), Workers: []steering.Worker{{ID: 1}}}
					steering.ReadAdmission(&in, a, g, func() int { return retryAfter }, nil)
					plan := steering.PlanStream(in)
					pg := newPage(t)
					pg.Store(wire.OffQueueDelayLimit, plan.QueueDelay)
					for k, q := range plan.Quotas[0] {
						pg.Store(wire.OffQuota+8*k, q)
					}
					pg.Store(wire.OffGate, plan.Gate)
					env := askingEnv(a, g)
					asks := 0
					call := env.Call
					env.Call = func(req []byte) ([]byte, error) { asks++; return call(req) }
					env.page = pg
					r, retry := env.Admit(c, k, m.Method, m.CallID, int64(tc.st.delay))
					check(t, msg.name, "a TCP worker's gate", overload.Answer{Refusal: r, RetryAfter: retry}, want, retryAfter)
					// Open to all, nothing is asked: the round trip is what
					// the gate saves.
					if in.Closed == "" && !in.ProbesRefused && in.Room[k] == overload.Unlimited && c != overload.ClassRegister && asks != 0 {
						t.Errorf("%s through a TCP worker's gate: asked %d times with the gate open and no limit", msg.name, asks)
					}
					// What it decided alone is counted where the supervisor
					// adds it up.
					if asks == 0 {
						var counted uint64
						switch {
						case r == overload.RefuseNone && c != overload.ClassProbe:
							counted = pg.Load(wire.OffDoorAdmitted + 8*int(k))
						case r == overload.RefuseNone:
							counted = 1
						case c == overload.ClassProbe:
							counted = pg.Load(wire.OffDoorCounters + 8*wire.DoorProbesRefused)
						default:
							counted = pg.Load(wire.OffDoorRefused + 8*int(r))
						}
						if counted != 1 {
							t.Errorf("%s through a TCP worker's gate: decided alone (%v) but counted %d times in the page", msg.name, r, counted)
						}
					}
				}
			}
		})
	}
}

func check(t *testing.T, msg, entry string, have overload.Answer, want overload.Refusal, retryAfter int) {
	t.Helper()
	if have.Refusal != want || have.Ask {
		t.Errorf("%s through %s: want %v, have %v (ask %v)", msg, entry, want, have.Refusal, have.Ask)
	}
	if have.RetryAfter != retryAfter {
		t.Errorf("%s through %s: want the configured Retry-After %d, have %d", msg, entry, retryAfter, have.RetryAfter)
	}
}

// askingEnv is a worker's environment whose calls the supervisor answers
// as answerAdmit does: the wire's bytes, both ways.
func askingEnv(a *overload.Admission, g *overload.Gate) *Env {
	return &Env{Call: func(req []byte) ([]byte, error) {
		method, callID, ok := wire.ParseAdmitRequest(req)
		if !ok {
			return nil, nil
		}
		ans, _, _ := a.AnswerAsk(g, sipscan.Method(method), callID)
		return wire.AdmitAnswer(byte(ans.Refusal), ans.RetryAfter), nil
	}}
}

// doorAnswer passes a datagram through a front door as the supervisor
// wires it, and reads its answer from what it did: a 503 and its
// Retry-After, counted by reason, or the datagram handed to a worker.
func doorAnswer(t *testing.T, a *overload.Admission, g *overload.Gate, dgram []byte, retryAfter int) overload.Answer {
	t.Helper()
	var replies [][]byte
	target := &acceptAll{}
	d := frontdoor.New(0, func(*sipscan.Msg, bool, int64) frontdoor.Target { return target },
		func(m *sipscan.Msg, now int64) (overload.Refusal, int) { return a.Decide(g, m) },
		func(b []byte, _ netip.AddrPort) { replies = append(replies, append([]byte(nil), b...)) })
	d.Probe = func(int64) (bool, int) { return a.ProbeRefused() }
	d.RetryAfter = func() int { return retryAfter }
	var told []overload.Refusal
	d.OnRefused = func(r overload.Refusal, _ overload.Class, _ sipscan.Kind) { told = append(told, r) }
	d.Handle(append(make([]byte, wire.MsgHeaderLen), dgram...), netip.MustParseAddrPort("127.0.0.1:5070"), time.Now().UnixNano())
	if len(replies) == 0 {
		if target.n != 1 {
			t.Errorf("the door neither refused nor handed on %q", dgram[:bytes.IndexByte(dgram, '\r')])
		}
		return overload.Answer{RetryAfter: retryAfter}
	}
	if !bytes.HasPrefix(replies[0], []byte("SIP/2.0 503 ")) || len(told) != 1 {
		t.Errorf("want one 503, told once, have %d told and\n%s", len(told), replies[0])
		return overload.Answer{}
	}
	ans := overload.Answer{Refusal: told[0]}
	if i := bytes.Index(replies[0], []byte("\r\nRetry-After: ")); i >= 0 {
		v := replies[0][i+len("\r\nRetry-After: "):]
		ans.RetryAfter, _ = strconv.Atoi(string(v[:bytes.IndexByte(v, '\r')]))
	}
	if told[0] != overload.RefuseSuspended || !frontdoor.IsProbe(mustScan(t, dgram)) {
		if n := d.Stats.Refused[told[0]].Load(); n != 1 {
			t.Errorf("refusal %v told but not counted", told[0])
		}
	}
	return ans
}

// newPage is a worker's stats page, as the supervisor maps it.
func newPage(t *testing.T) *wire.StatsPage {
	t.Helper()
	f, pg, err := wire.NewStatsFile("admission-test")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pg.Unmap(); f.Close() })
	return pg
}

func mustScan(t *testing.T, b []byte) *sipscan.Msg {
	t.Helper()
	var m sipscan.Msg
	if err := sipscan.Scan(b, &m); err != nil {
		t.Fatal(err)
	}
	return &m
}
