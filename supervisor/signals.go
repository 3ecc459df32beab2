package supervisor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/overload/watermark"
)

var sigTERM os.Signal = syscall.SIGTERM

// hupLoop reloads on SIGHUP and on requests from the control API.
func (s *Supervisor) hupLoop(ctx context.Context) error {
	c := s.hup
	defer signal.Stop(c)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c:
			if _, err := s.doReload(); err != nil {
				s.logReloadFailed("SIGHUP", err)
			}
		case reply := <-s.reload:
			p, err := s.doReload()
			if err != nil {
				s.logReloadFailed("ctl reload", err)
			}
			reply <- reloadReply{p, err}
		}
	}
}

// logReloadFailed logs a reload that failed, with where the first problem
// is (FILE:LINE), as the lines that take a restart are logged; the error
// names every problem.
func (s *Supervisor) logReloadFailed(by string, err error) {
	args := []any{"by", by, "file", s.opts.ConfigPath}
	if at := problemAt(err); at != "" {
		args = append(args, "at", at)
	}
	s.log.Error("reload failed, keeping the running config", append(args, "error", err)...)
}

// problemAt is the FILE:LINE of the first config problem in err, "" when
// err names none (a file that cannot be read).
func problemAt(err error) string {
	var ce *config.Error
	if !errors.As(err, &ce) || ce.Pos.File == "" {
		return ""
	}
	return ce.Pos.File + ":" + strconv.Itoa(ce.Pos.Line)
}

type reloadReply struct {
	plan reloadPlan
	err  error
}

// Reload re-reads the config file; see doReload. It returns the settings
// that changed and the lines that take a restart.
func (s *Supervisor) Reload() (reloadPlan, error) {
	reply := make(chan reloadReply, 1)
	s.reload <- reply
	r := <-reply
	return r.plan, r.err
}

// doReload re-reads the config file and applies every setting that can
// change while sipvisor runs; planReload says which. What a setting set
// with ctl set held gives way to the file's value. A change that takes a
// restart (a socket, the control address, a group's starting size) is
// logged with its FILE:LINE, and the value in force stays until then, while
// the rest applies.
//
// The groups' profiles change at once (a group whose profile changes
// starts its history afresh, as does every group when auto_scaling_cycle
// changes). The script and settings the workers load reach the UDP and
// timer groups at once: each of their workers is renewed (a new one started
// from the new snapshot, the old one drained once it is ready), so new
// calls see the new script while the calls in progress finish on the
// workers that hold them, as OpenSIPS's reload_routes applies new routes in
// every process. TCP workers are not renewed, since draining one waits for
// its clients to close their connections: each loads the new script in
// place and keeps its connections and transactions (its other settings
// change only when a TCP worker starts). A file that fails to load leaves
// the running config in place, as CoreDNS's reload does.
func (s *Supervisor) doReload() (reloadPlan, error) {
	if s.opts.ConfigPath == "" {
		s.log.Info("reload: running the built-in config, nothing to re-read")
		return reloadPlan{}, nil
	}
	cfg, err := config.LoadFile(s.opts.ConfigPath)
	if err == nil {
		// New workers would open the new store and old ones keep the old:
		// registrations would split between them.
		if sp, _ := cfg.Store(); sp != s.store.spec {
			err = fmt.Errorf("location_store changed from %s to %s: it changes only on a restart; the running config stays", s.store.spec, sp)
		}
	}
	if err != nil {
		s.m.reloadOK.Set(0)
		s.m.reloads.WithLabelValues("failure").Inc()
		return reloadPlan{}, err
	}
	plan := planReload(s.inForce(), cfg)
	s.mu.Lock()
	if err := s.writeSnapshot(cfg); err != nil {
		s.mu.Unlock()
		s.m.reloadOK.Set(0)
		s.m.reloads.WithLabelValues("failure").Inc()
		return reloadPlan{}, err
	}
	for _, gr := range s.groups {
		name := gr.g.Name()
		var prof string
		switch gr.g.Kind() {
		case "tcp":
			prof = cfg.TCPWorkers.Profile
		case "timer":
			prof = cfg.TimerWorkers.Profile
		default:
			prof = cfg.UDPWorkers.Profile
			if sk, ok := s.socketInFile(name, cfg); ok && sk.Profile != "" {
				prof = sk.Profile
			}
		}
		var np *profileRef
		if prof != "" {
			p := cfg.Profiles[prof]
			np = &p
		}
		if !sameProfile(gr.profile, np) {
			gr.profile = np
			if np != nil {
				gr.g.SetCeiling(max(np.UpTo, gr.g.Live()))
			}
			s.resetScaling(gr)
			s.log.Info("reload: group profile changed", "group", name, "profile", prof)
		}
	}
	s.mu.Unlock()
	// What takes a restart keeps its running value in the config in force;
	// workers still load the file as written (the snapshot), taking their
	// sockets from the supervisor whatever it says.
	old := s.config()
	cfg.Sockets = old.Sockets
	cfg.HTTPListen, cfg.HTTPToken = old.HTTPListen, old.HTTPToken
	cfg.LogFormat = old.LogFormat
	cfg.UDPWorkers.Workers, cfg.TCPWorkers.Workers, cfg.TimerWorkers.Workers = old.UDPWorkers.Workers, old.TCPWorkers.Workers, old.TimerWorkers.Workers
	s.applySettings(plan, cfg)
	timers := !sameTimers(old, cfg)
	s.cfg.Store(cfg)
	s.ds.poke() // it sleeps while the config has no destinations
	s.bans.apply(cfg.Bans)
	for _, u := range s.sockets.doors {
		u.mu.Lock()
		u.pike.Set(cfg.Bans.Policy())
		u.mu.Unlock()
	}
	if plan.changed("auto_scaling_cycle") {
		s.mu.Lock()
		for _, gr := range s.groups {
			s.resetScaling(gr)
			for id := range gr.workers {
				delete(gr.workers, id)
			}
		}
		s.mu.Unlock()
		notify(s.cycleChanged)
	}
	if plan.changed("echo_interval") {
		notify(s.echoChanged)
	}
	if plan.changed("aor_keep_port") {
		s.fileWithoutPorts(cfg)
	}
	if timers || plan.changed("nat_keepalive_interval") {
		s.log.Info("reload: timer_route schedule changed")
		notify(s.timersChanged)
	}
	for _, gr := range s.groupRuns() {
		if gr.g.Kind() == "tcp" {
			if n := gr.g.ReloadInPlace(); n > 0 {
				s.log.Info("reload: workers reload their script in place", "group", gr.g.Name(), "workers", n)
			}
			continue
		}
		if n := gr.g.Renew(); n > 0 {
			s.log.Info("reload: renewing workers", "group", gr.g.Name(), "workers", n)
		}
	}
	for _, r := range plan.Restart {
		s.log.Warn("reload: this change takes a restart", "at", r.At.File+":"+strconv.Itoa(r.At.Line), "change", r.Msg)
	}
	s.m.reloadOK.Set(1)
	s.m.reloads.WithLabelValues("success").Inc()
	s.log.Info("config reloaded", "file", s.opts.ConfigPath, "changed", plan.Changed, "restart_needed", len(plan.Restart))
	return plan, nil
}

// notify wakes a loop waiting on c; one pending wake-up is enough, since
// the loop reads the newest config.
func notify(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// socketInFile finds, in cfg, the socket line of the UDP group called name.
func (s *Supervisor) socketInFile(name string, cfg *config.Config) (config.Socket, bool) {
	for i, sk := range s.opts.Config.Sockets {
		if i >= len(s.sockets.list) || s.sockets.list[i].Name() != name {
			continue
		}
		for _, n := range cfg.Sockets {
			if socketKey(n) == socketKey(sk) {
				return n, true
			}
		}
	}
	return config.Socket{}, false
}

// applySettings puts the new config's settings in force: every one that a
// reload applies, whatever ctl set changed since.
func (s *Supervisor) applySettings(plan reloadPlan, cfg *config.Config) {
	o := s.ov
	o.SetSuspend(cfg.Suspend.Enable, cfg.Suspend.Watermarks())
	thr := s.throttleConfig()
	want := cfg.Throttle
	want.EchoInterval = thr.EchoInterval
	if thr != want {
		s.setThrottle(want)
	}
	setLimits(o.Limits(), cfg.Limits)
	s.connSess.t.MaxCallDuration.Store(int64(cfg.Limits.MaxCallDuration))
	o.SetFlipHealth(cfg.FlipHealth)
	for _, gr := range s.groupRuns() {
		gr.g.SetMaxQueueWait(cfg.Limits.MaxQueueWait)
		if gr.door != nil {
			gr.door.Sessions.MaxCallDuration.Store(int64(cfg.Limits.MaxCallDuration))
		}
		gr.g.SetWorkerLimits(cfg.Workers.ReadyTimeout, cfg.Workers.DrainTimeout, cfg.Workers.MemoryLimit)
	}
	// Workers that read their own sockets learn the new limits now, not at
	// the next refresh.
	s.steerNow()
	if ss := cfg.SlowStart; s.ssCfg.Load() != nil || plan.changed("slow_start_mode") ||
		plan.changed("slow_start_unit") || plan.changed("slow_start_value") || plan.changed("slow_start_interval") || plan.changed("slow_start_increment") {
		if err := s.setSlowStart(ss); err != nil {
			s.log.Warn("reload: slow start settings not applied", "error", err)
		}
		s.ssCfg.Store(nil)
	}
	if s.opts.LogLevel != nil && plan.changed("log_level") && cfg.LogLevel != "" {
		var l slog.Level
		if l.UnmarshalText([]byte(cfg.LogLevel)) == nil {
			s.opts.LogLevel.Set(l)
		}
	}
}

// inForce is the config in force: the one last loaded, with the values
// ctl set changed since.
func (s *Supervisor) inForce() *config.Config {
	c := *s.config()
	o := s.ov
	c.Suspend.Enable = o.AutoSuspend()
	marks := o.Marks()
	c.Suspend.EventQueueUsage = marks[watermark.EventQueueUsage]
	c.Suspend.HeapUsage = marks[watermark.HeapUsage]
	c.Suspend.NumberOfSessions = marks[watermark.NumberOfSessions]
	c.Suspend.SystemMemory = marks[watermark.SystemMemoryUsage]
	echo := c.Throttle.EchoInterval
	c.Throttle = s.throttleConfig()
	c.Throttle.EchoInterval = echo
	l := o.Limits()
	c.Limits.MaxSessions = int(l.MaxSessions.Load())
	c.Limits.MaxSessionsPerGroup = int(l.MaxPerGroup.Load())
	c.Limits.MaxSessionsPerSocket = int(l.MaxPerSocket.Load())
	c.Limits.MaxCalls = int(l.MaxByKind[sipscan.KindCall].Load())
	c.Limits.MaxRegistrations = int(l.MaxByKind[sipscan.KindRegistration].Load())
	c.Limits.MaxSubscriptions = int(l.MaxByKind[sipscan.KindSubscription].Load())
	c.Limits.QueueAdmission = l.QueueAdmission.Load()
	c.Limits.QueueDelay = time.Duration(l.QueueDelay.Load())
	if ss := s.ssCfg.Load(); ss != nil {
		c.SlowStart = *ss
	}
	return &c
}

func sameTimers(a, b *config.Config) bool {
	if a.Script == nil || b.Script == nil {
		return a.Script == b.Script
	}
	if len(a.Script.Timers) != len(b.Script.Timers) {
		return false
	}
	for i, t := range a.Script.Timers {
		u := b.Script.Timers[i]
		if t.Name != u.Name || t.Interval != u.Interval {
			return false
		}
	}
	return true
}
