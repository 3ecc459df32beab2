package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/ctl"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload/pike"
	"github.com/sipvisor/sipvisor/pool"
)

// banAuthority is the one table of bans (package overload/pike): the
// supervisor's doors, the workers that read their sockets (wire.PikeNote)
// and the script engine (wire.AuthFailNote) report to it, and it sends the
// bans in force to every worker that reads a socket or a connection
// (wire.FrameBans), at each change and to each new worker. The
// supervisor's own doors and its accept loop read list.
type banAuthority struct {
	log *slog.Logger
	// workers lists the workers that read sockets or connections.
	workers func() []*pool.Worker

	mu    sync.Mutex
	t     *pike.Table
	reply bool
	gen   uint64 // bumped at each change the workers must learn
	frame []byte // the bans frame of gen, built once
	banLogRate

	list pike.List
	poke chan struct{}
	// asleep is set while the loop waits for a poke alone: the table
	// empty and every worker told. Whatever then puts something in the
	// table pokes it (wakeLocked). Guarded by mu.
	asleep bool
	// sent is, by worker, the gen it last learned; the loop's own.
	sent map[*pool.Worker]uint64

	banMetrics
}

// banLogRate bounds the bans logged to a few a second (guarded by
// banAuthority.mu).
type banLogRate struct {
	logSec int64 // the second of the last ban logged, unix
	logged int   // bans logged in that second
	quiet  int   // bans not logged since the last one logged
}

// banMetrics are the ban table's metrics.
type banMetrics struct {
	imposed  *prometheus.CounterVec
	active   prometheus.GaugeFunc
	failures prometheus.Counter
}

// banLogsPerSecond bounds the ban lines logged: a flood from many sources
// must not become a flood of log lines. The rest are summed up in the next
// line logged.
const banLogsPerSecond = 10

// bansEvery is how often the bans are sent to workers that have not
// learned them, and expired ones dropped, when no change pokes the loop
// sooner.
const bansEvery = 250 * time.Millisecond

func newBanAuthority(log *slog.Logger, reg prometheus.Registerer, cfg config.Bans, workers func() []*pool.Worker) *banAuthority {
	b := &banAuthority{log: log, workers: workers, t: pike.NewTable(cfg.Policy()), reply: cfg.Action == "reply",
		gen: 1, poke: make(chan struct{}, 1), sent: map[*pool.Worker]uint64{}}
	b.list.SetReply(b.reply)
	b.list.Set(map[netip.Addr]int64{})
	b.imposed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sipvisor", Subsystem: "frontdoor", Name: "banned_total",
		Help: "Sources banned, by reason: pike (more requests in pike_window than pike_requests) or auth (failed digest authentications past auth_failures_per_source or auth_failures_per_user).",
	}, []string{"reason"})
	for r := range pike.NumReasons {
		b.imposed.WithLabelValues(r.String())
	}
	b.active = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Namespace: "sipvisor", Subsystem: "frontdoor", Name: "bans",
		Help: "Sources banned now (sipvisor ctl bans lists them).",
	}, func() float64 {
		b.mu.Lock()
		defer b.mu.Unlock()
		return float64(len(b.t.Bans(time.Now().UnixNano())))
	})
	b.failures = prometheus.NewCounter(prometheus.CounterOpts{
		Namespace: "sipvisor", Subsystem: "auth", Name: "failures_total",
		Help: "Failed digest authentications (a wrong password, an unknown user, another user's identity), from any source; a challenge to a request without credentials is none.",
	})
	reg.MustRegister(b.imposed, b.active, b.failures)
	return b
}

// apply takes a loaded or reloaded config's bans.
func (b *banAuthority) apply(cfg config.Bans) {
	b.mu.Lock()
	b.t.SetPolicy(cfg.Policy())
	b.reply = cfg.Action == "reply"
	b.list.SetReply(b.reply)
	b.changedLocked()
	b.mu.Unlock()
}

// policy is the policy in force.
func (b *banAuthority) policy() pike.Policy {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.t.Policy()
}

// changedLocked publishes the table to the supervisor's readers and has
// the loop send it to the workers.
func (b *banAuthority) changedLocked() {
	b.gen++
	b.frame = nil
	b.list.Set(b.t.Until())
	b.pokeLocked()
}

// pokeLocked has the loop run now.
func (b *banAuthority) pokeLocked() {
	b.asleep = false
	select {
	case b.poke <- struct{}{}:
	default:
	}
}

// wakeLocked has a sleeping loop wake up to keep time for what the
// table now holds.
func (b *banAuthority) wakeLocked() {
	if b.asleep {
		b.pokeLocked()
	}
}

// workerReady has a new worker learn the bans now.
func (b *banAuthority) workerReady() {
	b.mu.Lock()
	b.pokeLocked()
	b.mu.Unlock()
}

// requests counts n requests of src that a reader reported.
func (b *banAuthority) requests(src netip.Addr, n uint32) {
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if ban, ok := b.t.Requests(src, int(n), now.UnixNano()); ok {
		b.imposedLocked(ban, now)
	}
	b.wakeLocked()
}

// authFailed counts a failed authentication of user from src.
func (b *banAuthority) authFailed(src netip.Addr, user string) {
	b.failures.Inc()
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if ban, ok := b.t.AuthFailed(src, user, now.UnixNano()); ok {
		b.imposedLocked(ban, now)
	}
	b.wakeLocked()
}

func (b *banAuthority) imposedLocked(ban pike.Ban, now time.Time) {
	b.imposed.WithLabelValues(ban.Reason.String()).Inc()
	b.changedLocked()
	if sec := now.Unix(); sec != b.logSec {
		b.logSec, b.logged = sec, 0
	}
	if b.logged >= banLogsPerSecond {
		b.quiet++
		return
	}
	b.logged++
	args := []any{"source", ban.Source.String(), "reason", ban.Reason.String(), "count", ban.Count,
		"until", time.Unix(0, ban.Until).UTC().Format(time.RFC3339)}
	if ban.User != "" {
		args = append(args, "user", ban.User)
	}
	if b.quiet > 0 {
		args = append(args, "not_logged_before", b.quiet)
		b.quiet = 0
	}
	b.log.Warn("source banned", args...)
}

// note takes a worker's PikeNote or AuthFailNote; it reports whether the
// note was one.
func (b *banAuthority) note(note []byte) bool {
	if src, n, ok := wire.ParsePikeNote(note); ok {
		b.requests(src, n)
		return true
	}
	if src, user, ok := wire.ParseAuthFailNote(note); ok {
		b.authFailed(src, user)
		return true
	}
	return false
}

// bans lists the bans in force, for ctl.
func (b *banAuthority) bans() []ctl.Ban {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []ctl.Ban
	for _, x := range b.t.Bans(time.Now().UnixNano()) {
		out = append(out, ctl.Ban{Source: x.Source.String(), Reason: x.Reason.String(), Since: time.Unix(0, x.Since),
			Until: time.Unix(0, x.Until), Count: x.Count, User: x.User})
	}
	return out
}

// lift ends the ban of source.
func (b *banAuthority) lift(source string) error {
	a, err := netip.ParseAddr(source)
	if err != nil {
		return fmt.Errorf("%q is not an IP address", source)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.t.Lift(a) {
		return ctl.ErrNoBan
	}
	b.changedLocked()
	b.log.Info("ban lifted", "source", a.Unmap().String())
	return nil
}

// loop drops the bans that ended and the counts whose windows did, and
// sends the table to the workers that have not learned it, every
// bansEvery while there is any of that to do. With nothing, it waits for
// a poke alone: an idle server's supervisor wakes for its cycle, not four
// times a second for an empty table.
func (b *banAuthority) loop(ctx context.Context) error {
	t := time.NewTimer(bansEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-b.poke:
		}
		if b.send(time.Now()) {
			t.Reset(bansEvery)
		} else {
			t.Stop()
		}
	}
}

// send expires what ended, sends the table to the workers that have not
// learned it, and reports whether there is more to do later: a ban or a
// count in the table, or a worker not told. When there is not, the loop
// is asleep from here on.
func (b *banAuthority) send(now time.Time) (more bool) {
	b.mu.Lock()
	if b.t.Expire(now.UnixNano()) {
		b.changedLocked()
	}
	gen := b.gen
	if b.frame == nil {
		p := b.t.Policy()
		b.frame = wire.BansFrame(b.reply, int64(p.Window), p.Step(), p.Exempt, b.t.Until())
	}
	frame := b.frame
	b.mu.Unlock()
	live := map[*pool.Worker]bool{}
	told := true
	for _, w := range b.workers() {
		live[w] = true
		if b.sent[w] == gen {
			continue
		}
		if err := w.SendOwn(frame); err == nil {
			b.sent[w] = gen
		} else if !errors.Is(err, pool.ErrEnded) {
			told = false
			b.log.Debug("bans not sent; retrying", "worker", w.ID, "error", err)
		}
	}
	for w := range b.sent {
		if !live[w] {
			delete(b.sent, w)
		}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// A change since the lock was let go bumped gen and poked the loop.
	if told && gen == b.gen && b.t.Empty() {
		b.asleep = true
		return false
	}
	return true
}
