package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/oklog/run"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/ctl"
	"github.com/sipvisor/sipvisor/frontdoor"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/ticketkey"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/listeners"
	"github.com/sipvisor/sipvisor/location"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/overload/slowstart"
	"github.com/sipvisor/sipvisor/overload/watermark"
	"github.com/sipvisor/sipvisor/pool"
	"github.com/sipvisor/sipvisor/profile"
	"github.com/sipvisor/sipvisor/supervisor/steering"
)

// Options configures a Supervisor.
type Options struct {
	// Config is the loaded config; ConfigPath the file it came from, "" for
	// the built-in default. Workers load the same file.
	Config     *config.Config
	ConfigPath string
	// Worker is how workers are started; zero means this executable with the
	// argument "worker".
	Worker pool.Command
	Logger *slog.Logger
	// LogLevel, when set, is the level Logger logs at, which a reload
	// changes when log_level changes in the file.
	LogLevel *slog.LevelVar
	// LogFormat is the format Logger writes, text or json, which workers
	// log in too; empty takes the config's log_format.
	LogFormat string
	// Registry receives every metric; nil makes a new one.
	Registry *prometheus.Registry

	// inherited is what an upgrade passed (takeInheritance), nil when
	// this process was started otherwise.
	inherited *inheritance
}

// Supervisor owns the SIP sockets, the worker groups, the cycle loop and the
// control HTTP server of one sipvisor. Its state is in parts, each holding
// the fields that the same code uses together (doc.go lists them). A part
// with methods of its own is a named field (s.sockets, s.store, s.up); the
// others are embedded, read by the loops as s.groups or s.ov, their type
// saying which fields belong together.
type Supervisor struct {
	opts Options
	log  *slog.Logger
	reg  *prometheus.Registry
	m    *metrics
	pm   *pool.Metrics

	cfg     atomic.Pointer[config.Config]
	started time.Time
	// mem reads system_memory_usage for the cycle, which alone uses it.
	mem *watermark.MemoryReader

	// sockets is what it reads and writes the network through.
	sockets sockParts
	scaling
	admission
	control

	// store is the registrations (registrations.go).
	store store

	// up is this supervisor's part in upgrades (upgrade.go).
	up upgradeState
}

// sockParts is what the supervisor reads and writes the network through:
// the SIP sockets and their front doors, the control listener, and the
// connections the workers hold.
type sockParts struct {
	list   []*listeners.Socket
	files  []*os.File // the UDP sockets' descriptors, passed to every worker
	names  []string
	httpLn net.Listener
	doors  []*udpDoor

	// tickets are the TLS session ticket keys the TCP workers share.
	tickets *ticketkey.Keeper

	// conns counts the connections the workers hold; passCounts the
	// requests passed to the worker holding a connection.
	conns      *connCounts
	passCounts *passCounts
}

// closeBound closes the control listener and the SIP sockets, when the
// start fails after binding them.
func (k *sockParts) closeBound() {
	k.httpLn.Close()
	listeners.Close(k.list)
}

// close closes the SIP sockets and the descriptors passed to workers, at
// the end of a run (the control listener is closed when serving stops).
func (k *sockParts) close() {
	for _, f := range k.files {
		f.Close()
	}
	listeners.Close(k.list)
}

// scaling is the worker groups and what the cycle loop keeps to size them.
type scaling struct {
	mu     sync.Mutex // guards each groupRun's scaling state
	groups []*groupRun
	byName map[string]*groupRun
	udp    []*groupRun // by socket index of the UDP sockets
	tcp    *groupRun
	timer  *groupRun
	cycle  int64

	// snapshot is the file workers load their config from: the text of the
	// last config that loaded, so that a file broken since cannot reach a
	// new worker. snapDir holds it and goes when Run returns.
	snapshot, snapDir string

	// timersChanged tells the timer loop that a reload changed the
	// timer_route schedule; cycleChanged tells the cycle loop that its
	// interval changed.
	timersChanged, cycleChanged chan struct{}
	// timerPlans counts the schedules the timer loop has taken, the first
	// and one per reload that changed it, so that a test knows when a
	// reload has reached the loop.
	timerPlans atomic.Int64
}

// admission is the state the decision which new sessions are taken weighs
// (the decisions themselves are package overload's).
type admission struct {
	// ov decides which new sessions are taken; thr is the RTT throttle's
	// settings in force, as the file writes them (thrMu).
	ov    *overload.Admission
	thrMu sync.Mutex
	thr   config.Throttle
	ss    *overload.SlowStartMetrics
	ssCfg atomic.Pointer[slowstart.Config] // set by ctl; nil: the config's
	oc    *ocRun
	// connSess counts the sessions that come in over connections.
	connSess *connSessions
	// echoChanged tells the echo loop that its interval changed.
	echoChanged chan struct{}
}

// store is the registrations, held outside every worker, and what the
// supervisor counts of them.
type store struct {
	// locations holds the registrations, outside every worker, so that
	// scaling down or a crash never loses one: the shared store the
	// workers open too, or the memory one they reach through answerCall.
	locations location.Store
	spec      location.Spec
	// down is set while the supervisor's calls to the store fail.
	down atomic.Bool
	// regCount is the bindings in the location store, counted each cycle.
	regCount atomic.Int64
	// regIDs holds the Call-ID hashes of the live bindings' REGISTERs, so
	// that a refresh of an existing registration is never refused: it is
	// an existing session, not a new one.
	regIDs atomic.Pointer[map[uint64]struct{}]
}

// control is what the control server and the signals act on.
type control struct {
	params *ctl.Params
	// bans is the table of banned sources (package overload/pike).
	bans *banAuthority
	// ds probes the destination sets and tells the workers their states.
	ds *dsRun

	reload chan chan reloadReply
	hup    chan os.Signal

	// cpuProfiling is set while the supervisor's own CPU profile is taken;
	// profileWait bounds the wait for a worker's profile (nanoseconds; tests
	// shorten it).
	cpuProfiling atomic.Bool
	profileWait  atomic.Int64
}

// groupRun is a worker group and the scaling state the cycle loop keeps for it.
type groupRun struct {
	g       *pool.Group
	profile *profile.Profile // nil for a fixed-size group
	hist    *profile.History
	views   *profile.Views
	vals    []float64
	last    float64
	sampled bool
	// lastFork is the cycle of the last fork, or of startup: no drain within
	// the profile's cooldown after it.
	lastFork int64
	workers  map[int]*profile.Views
	// mem is each worker's heap and GC CPU time as of the last sample, for
	// the per-worker metrics; a worker is in it once it has reported.
	mem  map[int]pool.WorkerSample
	door *frontdoor.Door // nil for TCP and timer groups
	// steer is the group's direct reads, nil without them.
	steer *steering.Port
	// stream is the gate and quotas of a group whose workers read
	// connections (TCP), nil for others.
	stream *steering.Stream

	groupAdmission
}

// groupAdmission is a group's admission state and the counts of what was
// decided for the workers that read their own connections.
type groupAdmission struct {
	// gate is the group's admission state (its RTT throttle); ramps are
	// its workers in slow start.
	gate  *overload.Gate
	ramps *overload.Ramps[*pool.Worker]

	// refusedConn counts the new sessions refused to workers that read
	// their own connections (TCP), by reason, as the door counts its own:
	// those refused when they asked, and those they refused by their gates
	// (steering.Stream adds them).
	refusedConn [overload.NumRefusals]atomic.Uint64
	// probesRefusedConn counts the probes of the server those workers
	// answered 503 on the supervisor's word.
	probesRefusedConn atomic.Uint64
	// admittedConn counts those admitted there, for RFC 7339's loss.
	admittedConn atomic.Uint64
}

// New binds every SIP socket and the control address, so that an address in
// use fails start-up before any worker is forked.
func New(o Options) (*Supervisor, error) {
	if o.Config == nil {
		return nil, errors.New("supervisor: no config")
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	if o.Worker.Path == "" {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("find own executable for workers: %w", err)
		}
		o.Worker = pool.Command{Path: exe, Args: []string{"worker"}}
	}
	if o.LogFormat == "" {
		o.LogFormat = o.Config.LogFormat
	}
	// A copy: the caller's Command may be shared.
	o.Worker.Env = append(slices.Clip(o.Worker.Env), wire.EnvLogFormat+"="+o.LogFormat, wire.EnvGeneration+"="+strconv.Itoa(generation()))
	s := &Supervisor{opts: o, log: o.Logger.With("component", "supervisor"), reg: o.Registry}
	s.byName = map[string]*groupRun{}
	s.reload, s.hup = make(chan chan reloadReply), make(chan os.Signal, 1)
	s.timersChanged, s.cycleChanged, s.echoChanged = make(chan struct{}, 1), make(chan struct{}, 1), make(chan struct{}, 1)
	// Caught from the start: a SIGHUP before the reload loop runs must not
	// kill the process (its default action).
	signal.Notify(s.hup, syscall.SIGHUP)
	s.cfg.Store(o.Config)
	s.started = time.Now()
	tickets, terr := ticketkey.NewKeeper(s.started)
	if terr != nil {
		return nil, fmt.Errorf("session ticket keys: %w", terr)
	}
	s.sockets.tickets = tickets
	s.profileWait.Store(int64(defaultProfileWait))
	s.params = ctl.NewParams()
	s.params.Changed = func(string) { s.steerNow() }
	s.store.locations = location.NewMemory()
	s.connSess = newConnSessions(s.frontDoors)
	s.connSess.t.MaxCallDuration.Store(int64(o.Config.Limits.MaxCallDuration))
	s.m = newMetrics(s.reg)
	s.initUpgrade(o.inherited)
	s.sockets.conns = newConnCounts(s.reg)
	s.bans = newBanAuthority(s.log, s.reg, o.Config.Bans, s.banWorkers)
	s.sockets.passCounts = newPassCounts(s.reg)
	s.pm = pool.NewMetrics(s.reg)
	s.reg.MustRegister(newDoorCollector(s), newWorkerCollector(s),
		prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "sipvisor", Subsystem: "pool", Name: "responses_passed_directly_total",
			Help: "Responses a UDP worker read for a transaction a TCP worker holds and passed straight to it, past the supervisor (the rest are in sipvisor_pool_responses_passed_total)."},
			func() float64 {
				var n uint64
				for _, gr := range s.groupRuns() {
					n += gr.g.PeerPassed()
				}
				return float64(n)
			}))
	s.ds = newDSRun(s)
	s.oc = newOCRun(s)
	s.reg.MustRegister(newDSCollector(s.ds))
	s.ov = s.newAdmission(o.Config)
	s.ss = overload.NewSlowStartMetrics(s.reg)
	s.registerParams()

	var addrs []listeners.Addr
	for _, sk := range o.Config.Sockets {
		addrs = append(addrs, listeners.Addr{Proto: sk.Proto, Host: sk.Host, Port: sk.Port})
	}
	var err error
	if o.inherited != nil && o.Config.Workers.DirectReads {
		// The old generation's workers are members of each port's
		// SO_REUSEPORT group until they have drained, and the kernel
		// renumbers a group's members as they leave: this generation's
		// members would not keep the numbers its program places datagrams
		// by. So its door reads each port until the next start.
		s.log.Warn("udp_direct_reads is off in a generation started by an upgrade: the supervisor's door reads each UDP port until the next start")
		c := *o.Config
		c.Workers.DirectReads = false
		o.Config = &c
		s.opts.Config = &c
		s.cfg.Store(&c)
	}
	s.sockets.list, err = listeners.BindFrom(addrs, o.Config.Workers.DirectReads, s.inheritedSocket)
	if err != nil {
		o.inherited.closeRest()
		return nil, err
	}
	// Workers learn here the ports the kernel picked for a port 0; a
	// reload keeps the sockets bound, so this holds for every worker. The
	// host stays as written: a wildcard reads back as [::] once bound.
	adv := make([]listeners.Addr, len(s.sockets.list))
	for i, sk := range s.sockets.list {
		adv[i] = listeners.Addr{Proto: sk.Addr.Proto, Host: sk.Addr.Host, Port: sk.Bound.Port}
	}
	s.opts.Worker.Env = append(s.opts.Worker.Env, listeners.EnvBound+"="+listeners.FormatAddrs(adv))
	if f := o.inherited.take("http:" + o.Config.HTTPListen); f != nil {
		s.sockets.httpLn, err = net.FileListener(f)
		f.Close()
	} else {
		s.sockets.httpLn, err = net.Listen("tcp", o.Config.HTTPListen)
	}
	o.inherited.closeRest()
	if err != nil {
		listeners.Close(s.sockets.list)
		return nil, fmt.Errorf("control address %s: %w", o.Config.HTTPListen, err)
	}
	s.sockets.files, s.sockets.names, err = listeners.Files(s.sockets.list)
	if err != nil {
		s.sockets.closeBound()
		return nil, err
	}
	if err := s.writeSnapshot(o.Config); err != nil {
		s.sockets.closeBound()
		return nil, err
	}
	if err := s.openStore(o.Config); err != nil {
		s.sockets.closeBound()
		os.RemoveAll(s.snapDir)
		return nil, err
	}
	s.fileWithoutPorts(o.Config)
	s.makeGroups()
	if s.tcp != nil {
		// The bans' series exist from the start, so that a rule on their
		// increase sees the first.
		s.m.dropped.WithLabelValues("tcp", "banned")
		s.sockets.conns.closed.WithLabelValues("banned")
	}
	// The doors exist before Run so that metrics and the control API, which
	// read their counters, never see one appear.
	udpIndex := 0
	for _, sk := range s.sockets.list {
		if sk.UDP != nil {
			s.sockets.doors = append(s.sockets.doors, s.newUDPDoor(udpIndex, sk))
			udpIndex++
		}
	}
	return s, nil
}

// SIPAddrs are the SIP sockets' bound addresses, in config order.
func (s *Supervisor) SIPAddrs() []listeners.Addr {
	out := make([]listeners.Addr, len(s.sockets.list))
	for i, sk := range s.sockets.list {
		out[i] = sk.Bound
	}
	return out
}

// HTTPAddr is the control server's bound address.
func (s *Supervisor) HTTPAddr() string { return s.sockets.httpLn.Addr().String() }

// servedSockets is every address served, as bound: the SIP sockets in
// config order, then the control address. A port 0 in the config is the
// port the kernel gave, which is what peers and tests must be told.
func (s *Supervisor) servedSockets() []ctl.Socket {
	out := make([]ctl.Socket, 0, len(s.sockets.list)+1)
	for _, sk := range s.sockets.list {
		out = append(out, ctl.Socket{Proto: sk.Bound.Proto, Address: net.JoinHostPort(sk.Bound.Host, strconv.Itoa(sk.Bound.Port))})
	}
	return append(out, ctl.Socket{Proto: "http", Address: s.HTTPAddr()})
}

// logSockets logs each address served, as bound, one line each.
func (s *Supervisor) logSockets() {
	for i, so := range s.servedSockets() {
		what, configured := "SIP", ""
		if i < len(s.sockets.list) {
			configured = s.sockets.list[i].Addr.String()
		} else {
			what, configured = "control API (sipvisor ctl, /mi/), /metrics, /healthz, /readyz", s.config().HTTPListen
		}
		s.log.Info("serving", "proto", so.Proto, "address", so.Address, "configured", configured, "serves", what)
	}
}

// Groups returns the worker groups.
func (s *Supervisor) Groups() []*pool.Group {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]*pool.Group, len(s.groups))
	for i, gr := range s.groups {
		out[i] = gr.g
	}
	return out
}

// Run runs the supervisor until ctx ends or a SIGINT/SIGTERM arrives, then
// drains every worker and returns nil.
//
//	signals ──┐        ┌── SIGHUP: reload
//	          v        v
//	  +---------------------------+     data frames     +---------+
//	  | front door (per socket)   | ──────────────────> | workers |
//	  | cycle loop: sample/decide | <── shared stats ── | (procs) |
//	  | control HTTP              |                     +---------+
//	  +---------------------------+
func (s *Supervisor) Run(ctx context.Context) error {
	defer s.store.close()
	defer s.sockets.close()
	defer os.RemoveAll(s.snapDir)
	if err := s.startGroups(); err != nil {
		s.sockets.httpLn.Close()
		s.stopGroups()
		return err
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()

	// SIGINT/SIGTERM stay caught for the whole run, drain included: a second
	// one while workers drain must not kill the supervisor (and, through
	// Pdeathsig, every call in progress).
	term := make(chan os.Signal, 1)
	signal.Notify(term, os.Interrupt, sigTERM)
	defer signal.Stop(term)

	if s.up.in != nil {
		if err := s.awaitHandOver(ctx, term); err != nil {
			s.sockets.httpLn.Close()
			s.stopGroups()
			return err
		}
	}
	defer func() {
		if l := s.up.link.Load(); l != nil && l.old {
			l.close()
		}
	}()

	// The front doors and the control server run outside the run group:
	// while workers drain, the doors keep passing the messages of calls in
	// progress to them (refusing new sessions), and the control API stays up
	// (lame duck), so they stop only after the drain.
	var serving sync.WaitGroup
	failed := make(chan error, len(s.sockets.list)+1)
	serve := func(f func() error) {
		serving.Add(1)
		go func() {
			defer serving.Done()
			if err := f(); err != nil {
				failed <- err
			}
		}()
	}
	var doors sync.WaitGroup
	for _, u := range s.sockets.doors {
		doors.Add(1)
		serve(func() error {
			defer doors.Done()
			return u.run()
		})
	}
	for _, sk := range s.sockets.list {
		if sk.TCP != nil {
			serve(func() error { return s.acceptLoop(sk) })
		}
	}
	srv := s.httpServer()
	serve(func() error {
		if err := srv.Serve(s.sockets.httpLn); !errors.Is(err, errServerClosed) {
			return err
		}
		return nil
	})

	var g run.Group
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error {
			select {
			case sig := <-term:
				return run.SignalError{Signal: sig}
			case err := <-failed:
				return err
			case h := <-s.up.handOver:
				return h
			case <-ctx.Done():
				return ctx.Err()
			}
		}, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return s.usr2Loop(ctx) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return s.cycleLoop(ctx) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return s.hupLoop(ctx) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return s.registrationsLoop(ctx) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return s.echoLoop(ctx) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return s.slowStartLoop(ctx) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return s.bans.loop(ctx) }, func(error) { cancel() })
	}
	for _, gr := range s.udp {
		if gr.steer == nil {
			continue
		}
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return steerLoop(ctx, gr.steer) }, func(error) { cancel() })
	}
	if s.tcp != nil && s.tcp.stream != nil {
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return steerLoop(ctx, s.tcp.stream) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return s.timerLoop(ctx) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return s.ds.loop(ctx) }, func(error) { cancel() })
	}
	{
		ctx, cancel := context.WithCancel(ctx)
		g.Add(func() error { return s.oc.loop(ctx) }, func(error) { cancel() })
	}
	all := make([]string, len(s.sockets.list))
	for i, sk := range s.sockets.list {
		all[i] = sk.Name()
	}
	s.logSockets()
	s.log.Info("sipvisor running", "sockets", all, "http", s.HTTPAddr(), "groups", len(s.groups))
	go s.notifyReady(ctx)
	err := g.Run()

	var h *handover
	if errors.As(err, &h) {
		s.handOverSockets(h, &doors, srv)
		err = nil
	} else {
		s.log.Info("stopping: draining workers; new sessions are refused, calls in progress go on")
		sdNotify("STOPPING=1")
	}
	s.ov.Stop()
	for _, sk := range s.sockets.list {
		sk.CloseStream()
	}
	drained := make(chan struct{})
	go func() {
		for {
			select {
			case sig := <-term:
				s.log.Warn("already draining; send SIGKILL to stop at once", "signal", sig.String())
			case <-drained:
				return
			}
		}
	}()
	s.stopGroups()
	s.leaveOverlap()
	close(drained)
	for _, sk := range s.sockets.list {
		if sk.UDP != nil {
			sk.UDP.SetReadDeadline(time.Unix(1, 0))
		}
	}
	// Requests under way are answered first: the answer to the ctl upgrade
	// that handed this supervisor over may still be on its way when its
	// workers have drained, which takes milliseconds without calls. A
	// request that takes longer (a profile, a stream of events) is cut.
	sctx, scancel := context.WithTimeout(context.Background(), 2*time.Second)
	srv.Shutdown(sctx)
	scancel()
	srv.Close()
	serving.Wait()

	var sig run.SignalError
	if errors.As(err, &sig) || errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

// makeGroups makes one group per UDP socket, one for TCP, one for timers.
func (s *Supervisor) makeGroups() {
	cfg := s.config()
	files, names := s.sockets.files, s.sockets.names
	udpIndex := 0
	mk := func(name string, kind pool.Kind, workers int, profName string, sock *listeners.Socket) *groupRun {
		var p *profile.Profile
		ceiling := workers
		if profName != "" {
			pp := cfg.Profiles[profName]
			p = &pp
			ceiling = max(workers, pp.UpTo)
		}
		gr := &groupRun{profile: p, workers: map[int]*profile.Views{}, mem: map[int]pool.WorkerSample{}}
		gr.ramps = overload.NewRamps[*pool.Worker](name, s.ss)
		if p != nil {
			// From the start, not from the first sample: the alerts that
			// compare the workers with it see the group at once.
			s.m.maxWorkers.WithLabelValues(name).Set(float64(p.UpTo))
		}
		// Timer groups take no sessions: nothing to throttle. UDP workers
		// get their work through the door's queues; TCP ones read their own
		// connections.
		gr.gate = s.ov.NewGate(overload.GateOptions{Name: name, Group: groupLoad{gr, s.connSess},
			OwnConnections: kind != pool.KindUDP, NoSessions: kind == pool.KindTimer, Throttle: cfg.Throttle.Config()})
		var workerFiles func(int) ([]*os.File, []string, error)
		var onRoutable func()
		if sock != nil && cfg.Workers.DirectReads {
			gr.steer = s.newSteering(gr, name, sock, udpIndex)
			workerFiles, onRoutable = gr.steer.WorkerFiles, gr.steer.Poke
		}
		if kind != pool.KindTimer {
			// From the start: a count that stays 0 is what the gate is for.
			s.m.admissionAsks.WithLabelValues(name)
		}
		if kind == pool.KindTCP {
			gr.stream = steering.NewStream(steering.StreamOptions{
				Workers:   func() []*pool.Worker { return gr.g.Workers() },
				Admission: s.ov, Gate: gr.gate, RetryAfter: s.retryAfter, RetryAfterDrawn: s.retryAfterDrawn, HandedOver: s.up.old.Load,
				Admitted: &gr.admittedConn, Refused: &gr.refusedConn, ProbesRefused: &gr.probesRefusedConn})
			onRoutable = gr.stream.Poke
		}
		gr.g = pool.NewGroup(pool.GroupOptions{
			WorkerFiles: workerFiles, OnRoutable: onRoutable, TicketKeys: func() []byte { return s.sockets.tickets.At(time.Now()) },
			Name: name, Kind: kind, Initial: workers, Ceiling: ceiling,
			Command: s.opts.Worker, ConfigPath: s.snapshot,
			Sockets: files, SocketNames: names,
			ReadyTimeout: cfg.Workers.ReadyTimeout, DrainTimeout: cfg.Workers.DrainTimeout,
			MemoryLimit: cfg.Workers.MemoryLimit, Logger: s.opts.Logger, Metrics: s.pm,
			OnExit: func(w *pool.Worker, reason string) { s.workerExited(name, w, reason) },
			OnCall: s.answerCall,
			OnNote: func(w *pool.Worker, note []byte) {
				if s.bans.note(note) || s.sockets.conns.closedNote(w, note) || s.passResponse(note) || s.toDoor(w, note) || s.ds.note(note) {
					return
				}
				if s.handOffToNext(w, note) {
					return
				}
				if ok, err := s.sockets.conns.handOff(w, note, s.pickTCP); ok {
					if err != nil {
						s.log.Warn("connection hand-off failed; the connection is closed", "group", name, "error", err)
					}
					return
				}
				s.connSess.note(note, time.Now())
			},
		})
		gr.g.SetMaxQueueWait(cfg.Limits.MaxQueueWait)
		gr.g.SetOnReady(func(w *pool.Worker) {
			// Workers numbered past the initial count were forked by the
			// scaler or replace a crashed one: they ramp in. Timer groups
			// take no sessions.
			if kind != pool.KindTimer && w.ID > workers {
				s.startRamp(gr, w)
			}
			s.linkPeers(kind, w)
			if kind != pool.KindTimer {
				s.bans.workerReady()
			}
		})
		gr.g.SetOnEcho(func(w *pool.Worker, rtt time.Duration) { gr.gate.Echoed(rtt) })
		s.resetScaling(gr)
		s.groups = append(s.groups, gr)
		s.byName[name] = gr
		return gr
	}
	for i, sk := range cfg.Sockets {
		if sk.Proto != "udp" {
			continue
		}
		workers := sk.Workers
		if workers == 0 {
			workers = cfg.UDPWorkers.Workers
		}
		prof := sk.Profile
		if prof == "" {
			prof = cfg.UDPWorkers.Profile
		}
		gr := mk(s.sockets.list[i].Name(), pool.KindUDP, max(workers, 1), prof, s.sockets.list[i])
		s.udp = append(s.udp, gr)
		udpIndex++
	}
	for _, sk := range cfg.Sockets {
		if listeners.Stream(sk.Proto) {
			s.tcp = mk("tcp", pool.KindTCP, max(cfg.TCPWorkers.Workers, 1), cfg.TCPWorkers.Profile, nil)
			break
		}
	}
	if cfg.TimerWorkers.Workers > 0 {
		s.timer = mk("timer", pool.KindTimer, cfg.TimerWorkers.Workers, cfg.TimerWorkers.Profile, nil)
	}
}

// linkPeers gives each UDP worker the data channel of each TCP worker
// (pool.Worker.SendPeer), as either becomes ready: the answers a callee
// over UDP sends to a TCP worker's calls land on a UDP worker, which then
// passes them on itself rather than through the supervisor. One not
// linked (a send that failed, a worker that ended) passes them through the
// supervisor, as before.
func (s *Supervisor) linkPeers(kind pool.Kind, w *pool.Worker) {
	if kind != pool.KindUDP && kind != pool.KindTCP {
		return
	}
	for _, gr := range s.groupRuns() {
		switch {
		case kind == pool.KindTCP && gr.g.Kind() == pool.KindUDP:
			for _, u := range gr.g.Workers() {
				if err := u.SendPeer(w); err != nil {
					s.log.Debug("link worker to peer", "worker", u.Pid, "peer", w.Pid, "error", err)
				}
			}
		case kind == pool.KindUDP && gr.g.Kind() == pool.KindTCP:
			for _, t := range gr.g.Workers() {
				if err := w.SendPeer(t); err != nil {
					s.log.Debug("link worker to peer", "worker", w.Pid, "peer", t.Pid, "error", err)
				}
			}
		}
	}
}

// startGroups spawns every group's initial workers.
func (s *Supervisor) startGroups() error {
	var errs []error
	for _, gr := range s.groups {
		if err := gr.g.Start(); err != nil {
			errs = append(errs, err)
		}
		// The first reading of a component is its state, not a flip.
		s.ov.WorkersStarted(gr.g.Name(), time.Now())
	}
	return errors.Join(errs...)
}

// resetScaling starts a group's scaling state afresh: at start-up and when a
// reload gives it another profile. The start counts as a fork for the
// cooldown, as in OpenSIPS.
func (s *Supervisor) resetScaling(gr *groupRun) {
	n := 1
	if gr.profile != nil {
		n = gr.profile.HistoryLen()
	}
	gr.hist = profile.NewHistory(n)
	gr.views, _ = profile.NewViews(s.config().AutoScalingCycle)
	gr.lastFork = s.cycle
}

func (s *Supervisor) stopGroups() {
	deadline := time.Now().Add(s.config().Workers.DrainTimeout)
	var wg sync.WaitGroup
	for _, gr := range s.groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			gr.g.Stop(deadline)
		}()
	}
	wg.Wait()
}

func (s *Supervisor) workerExited(group string, w *pool.Worker, reason string) {
	if reason == pool.ExitCrash || reason == pool.ExitReadyTimeout {
		s.ov.WorkerCrashed(group, time.Now())
	}
	s.sockets.conns.workerGone(w)
	s.mu.Lock()
	gr := s.byName[group]
	s.mu.Unlock()
	if gr != nil && gr.steer != nil {
		gr.steer.Exited(w)
	}
	if gr != nil && gr.stream != nil {
		gr.stream.Exited(w)
	}
	s.mu.Lock()
	if gr := s.byName[group]; gr != nil {
		delete(gr.workers, w.ID)
		// Its series go with it, so that forks do not pile up label sets.
		// Sampling also holds s.mu, so a sample taken before the exit is
		// recorded before this, never after.
		delete(gr.mem, w.ID)
	}
	s.mu.Unlock()
}

// cycleLoop samples every group once per cycle and acts on the decision.
// Cycles begin at whole multiples of the cycle (ticks), which keeps a
// steady period: a slow cycle does not push the next one later (OpenSIPS's
// timer drifts to 1.2–1.33 s per 1 s cycle).
func (s *Supervisor) cycleLoop(ctx context.Context) error {
	t := newTicks(s.config().AutoScalingCycle)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case now := <-t.C:
			s.runCycle(now)
			t.arm(s.config().AutoScalingCycle, true)
		case <-s.cycleChanged:
			t.arm(s.config().AutoScalingCycle, false)
		}
	}
}

// runCycle is one cycle: sample, decide, act, for every group independently.
func (s *Supervisor) runCycle(now time.Time) {
	start := time.Now()
	s.connSess.expire(now)
	s.sample(now)
	s.mu.Lock()
	s.cycle++
	for _, gr := range s.groups {
		s.stepGroup(gr, now)
	}
	s.mu.Unlock()
	s.m.cycleDuration.Observe(time.Since(start).Seconds())
}

func (s *Supervisor) stepGroup(gr *groupRun, now time.Time) {
	load, ok, ws := gr.g.Sample(now)
	for _, w := range ws {
		v := gr.workers[w.ID]
		if v == nil {
			v, _ = profile.NewViews(s.config().AutoScalingCycle)
			gr.workers[w.ID] = v
		}
		v.Add(w.Load)
		// A Go heap is never empty: 0 is a worker that has not reported
		// yet, whose series must be missing rather than read as 0.
		if w.Heap > 0 {
			gr.mem[w.ID] = w
		}
	}
	if !ok {
		// No ready worker: no sample, never a zero.
		s.m.sampleFailures.WithLabelValues(gr.g.Name()).Inc()
		return
	}
	gr.last, gr.sampled = load, true
	gr.views.Add(load)
	if gr.profile == nil {
		s.m.maxWorkers.DeleteLabelValues(gr.g.Name())
		return
	}
	s.m.maxWorkers.WithLabelValues(gr.g.Name()).Set(float64(gr.profile.UpTo))
	gr.hist.Add(load)
	gr.vals = gr.hist.Values(gr.vals)
	live := gr.g.Live()
	d := profile.Decide(*gr.profile, profile.State{Workers: live, History: gr.vals, Cycle: s.cycle, LastFork: gr.lastFork})
	s.m.decisions.WithLabelValues(gr.g.Name(), d.Action.String()).Inc()
	switch d.Action {
	case profile.Up:
		w, err := gr.g.Grow()
		if err != nil {
			s.log.Error("scale up", "group", gr.g.Name(), "error", err)
			return
		}
		gr.hist.Rescale(live, live+1)
		gr.lastFork = s.cycle
		s.m.scalings.WithLabelValues(gr.g.Name(), "up").Inc()
		s.log.Info("scaling up", "group", gr.g.Name(), "cycle", s.cycle, "load", round1(load), "workers", live+1, "worker", w.ID, "pid", w.Pid, "reason", d.Reason)
	case profile.Down:
		w := gr.g.Shrink()
		if w == nil {
			return
		}
		gr.hist.Rescale(live, live-1)
		s.m.scalings.WithLabelValues(gr.g.Name(), "down").Inc()
		s.log.Info("scaling down", "group", gr.g.Name(), "cycle", s.cycle, "load", round1(load), "estimated_load", round1(d.EstimatedLoad), "workers", live-1, "worker", w.ID, "pid", w.Pid, "reason", d.Reason)
	default:
		s.log.Debug("cycle", "group", gr.g.Name(), "cycle", s.cycle, "load", round1(load), "workers", live, "decision", d.Reason)
	}
}

func round1(v float64) float64 { return float64(int(v*10+0.5)) / 10 }

// groupRuns returns the groups sorted by name, for stable output.
func (s *Supervisor) groupRuns() []*groupRun {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := append([]*groupRun(nil), s.groups...)
	sort.SliceStable(out, func(i, j int) bool { return kindOrder(out[i].g.Kind()) < kindOrder(out[j].g.Kind()) })
	return out
}

// banWorkers are the workers that read sockets or connections: those that
// must know the bans.
func (s *Supervisor) banWorkers() []*pool.Worker {
	var out []*pool.Worker
	for _, gr := range s.groupRuns() {
		if gr.g.Kind() != pool.KindTimer {
			out = append(out, gr.g.Workers()...)
		}
	}
	return out
}

func kindOrder(k pool.Kind) int {
	switch k {
	case pool.KindUDP:
		return 0
	case pool.KindTCP:
		return 1
	}
	return 2
}

type profileRef = profile.Profile

func sameProfile(a, b *profile.Profile) bool {
	if a == nil || b == nil {
		return a == b
	}
	return *a == *b
}

// retryAfter is the Retry-After of a refusal.
func (s *Supervisor) retryAfter() int { return s.config().RetryAfter.Draw() }

// retryAfterDrawn reports whether retry_after is a range to draw from.
func (s *Supervisor) retryAfterDrawn() bool { return s.config().RetryAfter.Drawn() }

// config is the running config; a reload swaps it whole.
func (s *Supervisor) config() *config.Config { return s.cfg.Load() }

// answerCall answers a worker's request: the memory location store, the
// count of a worker's failed store calls, and admission.
func (s *Supervisor) answerCall(w *pool.Worker, req []byte) []byte {
	if n, ok := location.ParseErrorReport(req); ok {
		s.m.storeErrors.WithLabelValues("worker").Add(float64(n))
		return nil
	}
	if location.IsRequest(req) {
		return location.Serve(s.store.locations, req)
	}
	if method, callID, ok := wire.ParseAdmitRequest(req); ok {
		return s.answerAdmit(w, sipscan.Method(method), callID)
	}
	if sock, to, from, msg, ok := wire.ParsePassRequest(req); ok {
		return s.answerPass(w, sock, to, from, msg)
	}
	if flags, to, msg, ok := wire.ParseWriteRequest(req); ok {
		return s.answerWrite(w, flags, to, msg)
	}
	if wire.IsDispatchStatesRequest(req) {
		return s.ds.states(w)
	}
	return nil
}

// answerAdmit decides about a new session that a worker read from its own
// connection or socket: the one decision (overload.Decide), for the
// worker's group.
func (s *Supervisor) answerAdmit(w *pool.Worker, method sipscan.Method, callID []byte) []byte {
	gr := s.groupOf(w)
	var gate *overload.Gate
	if gr != nil {
		gate = gr.gate
	}
	if gr != nil {
		s.m.admissionAsks.WithLabelValues(gr.g.Name()).Inc()
	}
	ans, c, k := s.ov.AnswerAsk(gate, method, callID)
	if ans.Refused() && s.up.old.Load() {
		// Handed over at an upgrade: admission here is stopping, and its
		// monitors and throttle have stopped with the loops. A worker that
		// still asks has read the request before it could let go of it: a
		// request pipelined on a TCP connection not yet moved (which moves
		// once what was read from it is answered), a datagram its own
		// socket held before its drain. The worker serves it, as it
		// serves the calls it drains, and the next generation decides
		// about everything that comes after; a 503 here would turn a
		// client away for the upgrade alone.
		ans = overload.Answer{RetryAfter: ans.RetryAfter}
	}
	if ans.Refused() {
		if gr != nil {
			if c == overload.ClassProbe {
				gr.probesRefusedConn.Add(1)
			} else {
				gr.refusedConn[ans.Refusal].Add(1)
			}
		}
		s.ov.Refused("asked by worker "+strconv.Itoa(w.ID), ans.Refusal, c, k)
	} else if gr != nil && c != overload.ClassProbe {
		gr.admittedConn.Add(1)
	}
	return wire.AdmitAnswer(byte(ans.Refusal), ans.RetryAfter)
}

// pickTCP is the TCP worker to take a connection, nil without one.
func (s *Supervisor) pickTCP() *pool.Worker {
	if s.tcp == nil {
		return nil
	}
	return s.tcp.g.Pick()
}

// frontDoors are the UDP front doors.
func (s *Supervisor) frontDoors() []*frontdoor.Door {
	var out []*frontdoor.Door
	for _, gr := range s.groupRuns() {
		if gr.door != nil {
			out = append(out, gr.door)
		}
	}
	return out
}

// groupOf is the group a worker belongs to.
func (s *Supervisor) groupOf(w *pool.Worker) *groupRun {
	for _, gr := range s.groupRuns() {
		if gr.g == w.Group() {
			return gr
		}
	}
	return nil
}

// echoLoop sends the echoes of the RTT throttle every echo interval.
func (s *Supervisor) echoLoop(ctx context.Context) error {
	t := newTicks(s.config().Throttle.EchoInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case now := <-t.C:
			s.echoTick(now)
			t.arm(s.config().Throttle.EchoInterval, true)
		case <-s.echoChanged:
			t.arm(s.config().Throttle.EchoInterval, false)
		}
	}
}

// writeSnapshot writes cfg's snapshot to a new file and makes it the one new
// workers load; the previous one goes (running workers have read theirs).
func (s *Supervisor) writeSnapshot(cfg *config.Config) error {
	b, err := cfg.Snapshot()
	if err != nil {
		return err
	}
	if s.snapDir == "" {
		if s.snapDir, err = os.MkdirTemp("", "sipvisor-"); err != nil {
			return fmt.Errorf("config snapshot: %w", err)
		}
	}
	f, err := os.CreateTemp(s.snapDir, "config-*.snapshot")
	if err != nil {
		return fmt.Errorf("config snapshot: %w", err)
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return fmt.Errorf("config snapshot: %w", err)
	}
	f.Close()
	old := s.snapshot
	s.snapshot = f.Name()
	for _, gr := range s.groups {
		gr.g.SetConfigPath(s.snapshot)
	}
	if old != "" {
		os.Remove(old)
	}
	return nil
}
