package pool

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload/sessions"
)

// Kind is what a group serves; its workers are told it.
type Kind = wire.Kind

// The kinds of group.
const (
	KindUDP   = wire.KindUDP
	KindTCP   = wire.KindTCP
	KindTimer = wire.KindTimer
)

// GroupOptions configures a group.
type GroupOptions struct {
	Name    string
	Kind    Kind
	Initial int
	// Ceiling is the most live workers the group may have.
	Ceiling int
	Command Command
	// ConfigPath is the file workers load their script from.
	ConfigPath   string
	Sockets      []*os.File
	SocketNames  []string
	ReadyTimeout time.Duration
	DrainTimeout time.Duration
	MemoryLimit  int64
	Logger       *slog.Logger
	Metrics      *Metrics
	// OnEcho, when set, receives each echo's round trip.
	OnEcho func(w *Worker, rtt time.Duration)
	// OnExit, when set, is told of every worker exit and its reason.
	OnExit func(w *Worker, reason string)
	// OnReady, when set, is told when a worker becomes ready.
	OnReady func(w *Worker)
	// OnCall answers a worker's request (worker.Env.Call). It runs on the
	// worker's control reader, so one worker's calls are answered in order.
	OnCall func(w *Worker, req []byte) []byte
	// OnNote receives a worker's note (worker.Env.Note), on the worker's
	// control reader, in order with its calls.
	OnNote func(w *Worker, note []byte)
	// WorkerFiles, when set, gives each worker about to start descriptors
	// of its own, passed after Sockets, and environment variables (direct
	// reads: the worker's socket of the port's group). It runs under the
	// group's lock and must not call the group.
	WorkerFiles func(id int) (files []*os.File, env []string, err error)
	// OnRoutable, when set, is told that the set of routable workers
	// changed. It runs under the group's lock: it must only take note and
	// return, and read the set later (Routable).
	OnRoutable func()
	// TicketKeys, when set, is what each worker starts with of the TLS
	// session ticket keys every worker shares (package ticketkey).
	TicketKeys func() []byte
}

// Group is a set of worker processes that share one kind of work.
type Group struct {
	opts GroupOptions
	log  *slog.Logger

	mu      sync.Mutex
	nextID  int
	workers []*Worker // not yet reaped
	stopped bool
	crashes []time.Time // recent unplanned exits, for back-off
	pending int         // replacements scheduled but not started

	// routable is the workers that may take new work, swapped whole on every
	// state change so the front door reads it without a lock.
	routable atomic.Pointer[[]*Worker]
	rr       atomic.Uint32

	maxWait      atomic.Int64     // MaxQueueWait, ns
	staleRetired [2]atomic.Uint64 // stale drops and refusals of workers already reaped
	peerRetired  atomic.Uint64    // responses passed straight to workers already reaped
}

// NewGroup makes a group; Start spawns its initial workers.
func NewGroup(o GroupOptions) *Group {
	if o.Ceiling < o.Initial {
		o.Ceiling = o.Initial
	}
	if o.ReadyTimeout <= 0 {
		o.ReadyTimeout = 5 * time.Second
	}
	if o.DrainTimeout <= 0 {
		o.DrainTimeout = sessions.DrainTimeout
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Metrics == nil {
		o.Metrics = NewMetrics(nil)
	}
	g := &Group{opts: o, log: o.Logger.With("group", o.Name)}
	g.routable.Store(&[]*Worker{})
	o.Metrics.initGroup(o.Name)
	return g
}

// SetConfigPath changes the file that workers started from now on load
// their script from (after a reload).
func (g *Group) SetConfigPath(path string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.opts.ConfigPath = path
}

// SetMaxQueueWait bounds how long a request may wait in a worker's queue
// and still be handled; 0 removes the bound. It applies at once to every
// worker, and to those started later.
func (g *Group) SetMaxQueueWait(d time.Duration) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.maxWait.Store(int64(d))
	for _, w := range g.workers {
		w.setMaxWait(d)
	}
}

// MaxQueueWait is the bound SetMaxQueueWait set.
func (g *Group) MaxQueueWait() time.Duration { return time.Duration(g.maxWait.Load()) }

// SetWorkerLimits changes the ready timeout, the drain timeout and the Go
// memory limit (after a reload): a worker started from now on gets them,
// and a drain that starts from now on is bounded by the new timeout.
func (g *Group) SetWorkerLimits(ready, drain time.Duration, memoryLimit int64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if ready > 0 {
		g.opts.ReadyTimeout = ready
	}
	if drain > 0 {
		g.opts.DrainTimeout = drain
	}
	g.opts.MemoryLimit = memoryLimit
}

// Stale is how many requests the group's workers, live and gone, dropped
// or refused for having waited longer than MaxQueueWait (Worker.Stale).
func (g *Group) Stale() (dropped, refused uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	dropped, refused = g.staleRetired[0].Load(), g.staleRetired[1].Load()
	for _, w := range g.workers {
		d, r := w.Stale()
		dropped += d
		refused += r
	}
	return dropped, refused
}

// PeerPassed is how many responses the group's workers, reaped ones
// included, took straight from another worker (wire.FramePeerMessage).
func (g *Group) PeerPassed() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	n := g.peerRetired.Load()
	for _, w := range g.workers {
		n += w.p.stats.Load(wire.OffPeerPassed)
	}
	return n
}

// SetOnReady sets the ready callback; call it before Start.
func (g *Group) SetOnReady(f func(w *Worker)) { g.opts.OnReady = f }

// SetOnEcho sets the echo callback; call it before Start.
func (g *Group) SetOnEcho(f func(w *Worker, rtt time.Duration)) { g.opts.OnEcho = f }

// Name is the group's name.
func (g *Group) Name() string { return g.opts.Name }

// Kind is what the group serves.
func (g *Group) Kind() Kind { return g.opts.Kind }

// Start spawns the initial workers.
func (g *Group) Start() error {
	var errs []error
	for i := 0; i < g.opts.Initial; i++ {
		if _, err := g.Grow(); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// SetCeiling changes the most live workers the group may have (after a
// reload gives it another profile). Workers over it are not drained here: the
// scaling decision does that, one per cycle.
func (g *Group) SetCeiling(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.opts.Ceiling = max(n, 1)
}

// Live is the number of workers that count towards the group's size:
// spawning or ready, not draining.
func (g *Group) Live() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.liveLocked()
}

func (g *Group) liveLocked() int {
	n := g.pending
	for _, w := range g.workers {
		if s := w.State(); s == Spawning || s == Ready {
			n++
		}
	}
	return n
}

// ErrCeiling: the group already has as many workers as it may.
var ErrCeiling = errors.New("group at its ceiling")

// Grow spawns one worker, unless the group is at its ceiling.
func (g *Group) Grow() (*Worker, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.stopped {
		return nil, errors.New("group stopped")
	}
	if g.liveLocked() >= g.opts.Ceiling {
		return nil, ErrCeiling
	}
	return g.spawnLocked()
}

func (g *Group) spawnLocked() (*Worker, error) {
	g.nextID++
	id := g.nextID
	o := g.opts
	t0 := time.Now()
	cmd := o.Command
	cmd.Env = append(cmd.Env[:len(cmd.Env):len(cmd.Env)], wire.EnvKind+"="+string(o.Kind))
	if (o.Kind == KindUDP || o.Kind == KindTCP) && !setInEnv("GOMAXPROCS", cmd.Env) {
		// A UDP or TCP worker handles its messages on one loop: a second P
		// only brings the runtime's wake-ups of idle threads, a futex and
		// a context switch each time a datagram, or a message a
		// connection's reader hands over, readies the loop (bench/
		// perproc.sh over UDP: 7 % fewer switches and 5-15 % less CPU per
		// call; bench/ctxsw.sh over TCP at 300 calls/s: t1 0.137 against
		// 0.245 ms and 6.1 against 12.1 switches a call, tn 0.51 against
		// 0.71 ms). A worker scales out by the group's workers, not its
		// threads. The operator's GOMAXPROCS wins.
		cmd.Env = append(cmd.Env, "GOMAXPROCS=1")
	}
	files := o.Sockets
	if o.WorkerFiles != nil {
		own, env, err := o.WorkerFiles(id)
		if err != nil {
			return nil, fmt.Errorf("spawn worker for %s: %w", o.Name, err)
		}
		files = append(files[:len(files):len(files)], own...)
		cmd.Env = append(cmd.Env, env...)
	}
	var tickets []byte
	if o.TicketKeys != nil {
		tickets = o.TicketKeys()
	}
	p, err := start(cmd, o.Name, id, o.ConfigPath, o.MemoryLimit, tickets, files, o.SocketNames)
	if err != nil {
		return nil, fmt.Errorf("spawn worker for %s: %w", o.Name, err)
	}
	w := &Worker{ID: id, Pid: p.proc.Pid, Started: t0, g: g, p: p, done: make(chan struct{})}
	// The stats page is unmapped only when nothing can reach the worker any
	// more: the front door and the samplers read it through snapshots of the
	// routable list that outlive the exit, and a read of an unmapped page
	// would crash the supervisor.
	runtime.AddCleanup(w, func(st *wire.StatsPage) { st.Unmap() }, p.stats)
	w.setMaxWait(time.Duration(g.maxWait.Load()))
	w.state.Store(int32(Spawning))
	g.workers = append(g.workers, w)
	o.Metrics.spawns.WithLabelValues(o.Name).Inc()
	g.log.Debug("worker spawned", "worker", id, "pid", w.Pid)
	g.publishLocked()

	timer := time.AfterFunc(o.ReadyTimeout, func() { g.event(w, EvReadyTimeout) })
	go g.readControl(w, timer)
	go g.wait(w)
	return w, nil
}

// readControl handles the worker's control messages until its channel closes.
func (g *Group) readControl(w *Worker, readyTimer *time.Timer) {
	buf := make([]byte, wire.MaxCall+9)
	var ans []byte
	for {
		n, err := w.p.ctl.Read(buf)
		if err != nil || n == 0 {
			readyTimer.Stop()
			return
		}
		switch buf[0] {
		case wire.CtlReady:
			readyTimer.Stop()
			g.event(w, EvReady)
		case wire.CtlEcho:
			if seq, sent, ok := wire.ParseEcho(buf[:n]); ok {
				w.echoDone.Store(seq)
				if g.opts.OnEcho != nil {
					g.opts.OnEcho(w, time.Duration(time.Now().UnixNano()-sent))
				}
			}
		case wire.CtlCall:
			if n < 9 {
				continue
			}
			ans = append(ans[:0], wire.CtlAnswer)
			ans = append(ans, buf[1:9]...)
			if g.opts.OnCall != nil {
				ans = append(ans, g.opts.OnCall(w, buf[9:n])...)
			}
			if len(ans) > wire.MaxCall+9 {
				ans = ans[:9]
			}
			w.p.ctl.Write(ans)
		case wire.CtlNote:
			if g.opts.OnNote != nil {
				g.opts.OnNote(w, buf[1:n])
			}
		case wire.CtlNotes:
			if g.opts.OnNote != nil {
				wire.EachNote(buf[1:n], func(note []byte) { g.opts.OnNote(w, note) })
			}
		case wire.CtlDrained:
			// Nothing it holds needs more messages: end its work. Frames
			// already queued are still handled before the end frame.
			w.end()
		}
	}
}

// wait reaps the process and records why it ended.
func (g *Group) wait(w *Worker) {
	err := w.p.wait()
	g.mu.Lock()
	reason := ExitCrash
	switch {
	case w.killReason != "":
		reason = w.killReason
	case err == nil && w.State() == Draining:
		reason = ExitClean
	}
	w.exitReason = reason
	g.mu.Unlock()
	w.p.ctl.Close()
	w.sendMu.Lock()
	w.ended = true
	w.p.data.Close()
	w.sendMu.Unlock()
	g.event(w, EvExit)
	close(w.done)
}

// event applies one lifecycle event to a worker and carries out the action.
func (g *Group) event(w *Worker, e Event) {
	g.mu.Lock()
	defer g.mu.Unlock()
	from := w.State()
	to, action := next(from, e)
	w.state.Store(int32(to))
	if from != to {
		g.publishLocked()
	}
	o := g.opts
	switch {
	case from == Spawning && to == Ready:
		w.readyAt = time.Now()
		w.lastAt = w.readyAt.UnixNano()
		w.lastBusy = w.p.stats.BusyAt(w.lastAt)
		o.Metrics.ready.WithLabelValues(o.Name).Observe(w.readyAt.Sub(w.Started).Seconds())
		g.log.Info("worker ready", "worker", w.ID, "pid", w.Pid, "after", w.readyAt.Sub(w.Started))
		if o.OnReady != nil {
			go o.OnReady(w)
		}
	}
	switch action {
	case SendDrain:
		go func() {
			if _, err := w.send([]byte{wire.FrameDrain}, false, time.Now().UnixNano()); err != nil {
				// No room for the drain frame: the deadline will kill it.
				g.log.Warn("drain frame not delivered", "worker", w.ID, "pid", w.Pid, "error", err)
			}
		}()
		time.AfterFunc(o.DrainTimeout, func() { g.event(w, EvDrainDeadline) })
	case Kill:
		reason := ExitKilled
		if e == EvReadyTimeout {
			reason = ExitReadyTimeout
			g.log.Warn("worker not ready in time, killing", "worker", w.ID, "pid", w.Pid, "timeout", o.ReadyTimeout)
		} else if e == EvDrainDeadline {
			g.log.Warn("worker did not drain in time, killing", "worker", w.ID, "pid", w.Pid, "timeout", o.DrainTimeout)
		}
		w.kill(reason)
	case Replace, Retire:
		g.removeLocked(w)
		o.Metrics.exits.WithLabelValues(o.Name, w.exitReason).Inc()
		if o.OnExit != nil {
			go o.OnExit(w, w.exitReason)
		}
		if action == Replace && !g.stopped {
			g.log.Warn("worker exited unexpectedly, replacing", "worker", w.ID, "pid", w.Pid, "reason", w.exitReason)
			g.scheduleReplacementLocked(time.Now())
		} else {
			g.log.Info("worker exited", "worker", w.ID, "pid", w.Pid, "reason", w.exitReason)
		}
	}
}

func (g *Group) removeLocked(w *Worker) {
	for i, x := range g.workers {
		if x == w {
			// Under g.mu, as Stale reads: the group's count never moves back.
			d, r := w.Stale()
			g.staleRetired[0].Add(d)
			g.staleRetired[1].Add(r)
			g.peerRetired.Add(w.p.stats.Load(wire.OffPeerPassed))
			g.workers = append(g.workers[:i], g.workers[i+1:]...)
			break
		}
	}
	g.publishLocked()
}

// crashWindow is how far back unplanned exits count towards the back-off.
const crashWindow = time.Minute

// RestartDelay is how long to wait before replacing a worker when n workers
// of the group exited unexpectedly within the last minute, this one included.
// The first is replaced at once; a crash loop backs off exponentially to 30 s
// so it cannot become a fork storm.
func RestartDelay(n int) time.Duration {
	if n <= 1 {
		return 0
	}
	d := 250 * time.Millisecond
	for i := 2; i < n && d < 30*time.Second; i++ {
		d *= 2
	}
	return min(d, 30*time.Second)
}

func (g *Group) scheduleReplacementLocked(now time.Time) {
	keep := g.crashes[:0]
	for _, t := range g.crashes {
		if now.Sub(t) < crashWindow {
			keep = append(keep, t)
		}
	}
	g.crashes = append(keep, now)
	delay := RestartDelay(len(g.crashes))
	g.pending++
	g.opts.Metrics.restarts.WithLabelValues(g.opts.Name).Inc()
	time.AfterFunc(delay, func() {
		g.mu.Lock()
		defer g.mu.Unlock()
		g.pending--
		if g.stopped {
			return
		}
		if _, err := g.spawnLocked(); err != nil {
			g.log.Error("replace worker", "error", err)
		}
	})
}

// publishLocked recomputes the routable set and the state gauges.
func (g *Group) publishLocked() {
	r := make([]*Worker, 0, len(g.workers))
	var counts [4]int
	for _, w := range g.workers {
		s := w.State()
		counts[s]++
		if s == Ready {
			r = append(r, w)
		}
	}
	g.routable.Store(&r)
	if g.opts.OnRoutable != nil {
		g.opts.OnRoutable()
	}
	for s, n := range counts {
		g.opts.Metrics.workers.WithLabelValues(g.opts.Name, State(s).String()).Set(float64(n))
	}
}

// Routable is the workers that may take new work now. The slice is shared:
// do not modify it.
func (g *Group) Routable() []*Worker { return *g.routable.Load() }

// Pick returns the ready worker with the shortest queue, or nil. Ties go
// round-robin so that equal workers share new work evenly.
func (g *Group) Pick() *Worker {
	ws := *g.routable.Load()
	n := len(ws)
	if n == 0 {
		return nil
	}
	start := int(g.rr.Add(1)) % n
	best := ws[start]
	bq := best.Queue()
	for i := 1; i < n && bq > 0; i++ {
		w := ws[(start+i)%n]
		if q := w.Queue(); q < bq {
			best, bq = w, q
		}
	}
	return best
}

// Shrink drains one ready worker: one Renew is replacing if any, else the
// one holding the fewest sessions, the newest among equals (it has the least
// state and the least warm caches).
// It returns nil when no worker is ready.
func (g *Group) Shrink() *Worker {
	g.mu.Lock()
	var pick *Worker
	for _, w := range g.workers {
		if w.State() != Ready {
			continue
		}
		if pick == nil || w.stale && !pick.stale ||
			w.stale == pick.stale && (w.Sessions() < pick.Sessions() || (w.Sessions() == pick.Sessions() && w.ID > pick.ID)) {
			pick = w
		}
	}
	g.mu.Unlock()
	if pick != nil {
		g.event(pick, EvDrain)
	}
	return pick
}

// Drain asks one worker to drain.
func (g *Group) Drain(w *Worker) { g.event(w, EvDrain) }

// ReloadInPlace asks every worker that is not draining to load the group's
// config snapshot (SetConfigPath) without a restart, for handlers that are
// worker.Reloader, and returns how many it asked.
func (g *Group) ReloadInPlace() int {
	g.mu.Lock()
	frame := append([]byte{wire.FrameReload}, g.opts.ConfigPath...)
	g.mu.Unlock()
	n := 0
	for _, w := range g.Workers() {
		if s := w.State(); (s == Spawning || s == Ready) && w.sendOwn(frame) == nil {
			n++
		}
	}
	return n
}

// Renew replaces every worker the group has now with a new one, which loads
// the config snapshot as it is now (after a reload), and drains each old
// worker once its replacement is ready: the group never has fewer ready
// workers than before, and each old worker finishes the transactions it
// holds, as at any scale-down. A replacement that does not get ready leaves
// its old worker serving. The group is over its size meanwhile; Shrink
// drains old workers first. It returns how many workers it replaces.
func (g *Group) Renew() int {
	g.mu.Lock()
	if g.stopped {
		g.mu.Unlock()
		return 0
	}
	type pair struct{ old, new *Worker }
	var pairs []pair
	for _, w := range append([]*Worker(nil), g.workers...) {
		if s := w.State(); s != Spawning && s != Ready || w.stale {
			continue
		}
		nw, err := g.spawnLocked()
		if err != nil {
			g.log.Error("renew worker", "worker", w.ID, "error", err)
			break
		}
		w.stale, w.renewedBy = true, nw
		pairs = append(pairs, pair{w, nw})
	}
	timeout := g.opts.ReadyTimeout
	g.mu.Unlock()
	for _, p := range pairs {
		go func() {
			cur := p.new
			for {
				deadline := time.Now().Add(timeout + time.Second)
				for cur.State() == Spawning && time.Now().Before(deadline) {
					time.Sleep(20 * time.Millisecond)
				}
				g.mu.Lock()
				ready, next, stopped := !cur.readyAt.IsZero(), cur.renewedBy, g.stopped
				if !ready && next == nil {
					p.old.stale, p.old.renewedBy = false, nil
				}
				g.mu.Unlock()
				switch {
				case ready:
					// Even if it is draining already, renewed in turn by a
					// second reload: it took the old worker's place.
					g.log.Info("worker renewed", "old", p.old.ID, "new", cur.ID, "pid", cur.Pid)
					g.event(p.old, EvDrain)
				case next != nil:
					// Renewed by a second reload before it was ready: its
					// replacement takes the old worker's place.
					cur = next
					continue
				case !stopped:
					g.log.Warn("renewed worker not ready, keeping the old one", "worker", p.old.ID, "new", cur.ID)
				}
				return
			}
		}()
	}
	return len(pairs)
}

// WorkerSample is one worker's state at a sampling instant.
type WorkerSample struct {
	ID       int
	Pid      int
	State    State
	Load     float64 // percent busy since the previous sample
	Queue    int
	Sessions int
	Heap     uint64  // 0 until the worker has reported it
	GCCPU    float64 // seconds
	CPU      float64 // seconds, the runtime's busy CPU (Worker.CPUSeconds)
	// GCShare is the percent of CPU the GC took (Worker.GCShare), if
	// GCShareOK.
	GCShare   float64
	GCShareOK bool
	Handled   uint64
	Dropped   uint64
	Age       time.Duration
}

// Sample measures every worker's busy share since its previous sample and
// returns the group's load: the mean over ready workers. ok is false when no
// worker was ready, which is no sample rather than zero load.
func (g *Group) Sample(now time.Time) (load float64, ok bool, ws []WorkerSample) {
	g.mu.Lock()
	defer g.mu.Unlock()
	nowNs := now.UnixNano()
	var sum float64
	var n int
	for _, w := range g.workers {
		s := WorkerSample{ID: w.ID, Pid: w.Pid, State: w.State(), Queue: w.Queue(), Sessions: w.Sessions(),
			Heap: w.HeapBytes(), GCCPU: w.GCCPUSeconds(), CPU: w.CPUSeconds(), Handled: w.Handled(), Dropped: w.Dropped(), Age: now.Sub(w.Started)}
		if share, ok := w.gcWin.add(nowNs, s.GCCPU, s.CPU); ok {
			w.gcShare.Store(math.Float64bits(share + 1))
		}
		s.GCShare, s.GCShareOK = w.GCShare()
		if s.State == Ready || s.State == Draining {
			busy := w.p.stats.BusyAt(nowNs)
			if dt := nowNs - w.lastAt; dt > 0 {
				w.load = clamp(100*float64(busy-w.lastBusy)/float64(dt), 0, 100)
			}
			// What a frame costs is measured over finished frames only: the
			// part of a frame in progress counts in the load now, but the
			// frame counts as handled only in a later sample, and a cost
			// split that way read a 40 ms frame as 8 ms.
			done, echoes := int64(w.p.stats.Load(wire.OffBusyNs)), w.echoDone.Load()
			frames := queuedFrames(s.Handled-w.lastHandled, echoes-w.lastEchoes)
			if frames > 0 {
				w.frameNs.Store(frameCost(done-w.lastDone, frames, w.frameNs.Load()))
			} else {
				w.frameNs.Store(frameCost(busy-w.lastBusy, 0, w.frameNs.Load()))
			}
			w.lastBusy, w.lastAt, w.lastHandled, w.lastEchoes, w.lastDone = busy, nowNs, s.Handled, echoes, done
			s.Load = w.load
		}
		if s.State == Ready {
			sum += s.Load
			n++
		}
		ws = append(ws, s)
	}
	sort.Slice(ws, func(i, j int) bool { return ws[i].ID < ws[j].ID })
	if n == 0 {
		return 0, false, ws
	}
	load = sum / float64(n)
	g.opts.Metrics.load.WithLabelValues(g.opts.Name).Set(load / 100)
	return load, true, ws
}

func clamp(v, lo, hi float64) float64 { return max(lo, min(hi, v)) }

// queuedFrames is how many of the frames a worker handled over a sample
// were work: echoes count as handled but not as busy, and an idle worker
// whose only busy time was a timer (a reply retransmitted, say) would
// otherwise learn that a frame costs next to nothing, and a burst after the
// lull would be admitted whole. An echo answered after the sample was taken
// makes the count one short, never negative.
func queuedFrames(handled, echoes uint64) uint64 { return handled - min(echoes, handled) }

// frameCost is the busy time per frame over a sample with busy nanoseconds
// of work and handled frames. A worker that handled nothing while busy is
// stuck on one frame: each behind it waits at least that long. An idle one,
// whose only frames were echoes (answered outside the busy count), keeps
// what it last cost.
func frameCost(busy int64, handled uint64, last int64) int64 {
	switch {
	case busy <= 0:
		return last
	case handled > 0:
		return busy / int64(handled)
	}
	return max(last, busy)
}

// Echo sends every ready or draining worker an echo frame, queued behind its
// real work; answers come to OnEcho.
func (g *Group) Echo(now time.Time) {
	var b [wire.EchoLen]byte
	for _, w := range g.Workers() {
		if s := w.State(); s == Ready || s == Draining {
			seq := w.echoSent.Load() + 1
			frame := wire.PutEcho(b[:0], wire.FrameEcho, seq, now.UnixNano())
			if w.sendOwn(frame) == nil {
				w.echoTimes[seq%uint64(len(w.echoTimes))].Store(now.UnixNano())
				w.echoSent.Store(seq)
			}
		}
	}
}

// Workers is a snapshot of the group's workers that have not been reaped.
func (g *Group) Workers() []*Worker {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]*Worker(nil), g.workers...)
}

// Stop drains every worker and waits until all have exited or the deadline
// passes, then kills what is left. No replacement is started after Stop.
func (g *Group) Stop(deadline time.Time) {
	g.mu.Lock()
	g.stopped = true
	g.mu.Unlock()
	ws := g.Workers()
	for _, w := range ws {
		g.event(w, EvDrain)
	}
	for _, w := range ws {
		select {
		case <-w.done:
		case <-time.After(time.Until(deadline)):
			g.mu.Lock()
			w.kill(ExitKilled)
			g.mu.Unlock()
			<-w.done
		}
	}
}

// setInEnv reports whether name is set for a worker: in the supervisor's
// environment, which workers inherit, or in env, added to it.
func setInEnv(name string, env []string) bool {
	if _, ok := os.LookupEnv(name); ok {
		return true
	}
	for _, kv := range env {
		if strings.HasPrefix(kv, name+"=") {
			return true
		}
	}
	return false
}
