package supervisor

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/pool"
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
			if err := s.doReload(); err != nil {
				s.log.Error("reload failed, keeping the running config", "error", err)
			}
		case reply := <-s.reload:
			reply <- s.doReload()
		}
	}
}

// Reload re-reads the config file; see doReload.
func (s *Supervisor) Reload() error {
	reply := make(chan error, 1)
	s.reload <- reply
	return <-reply
}

// doReload re-reads the config file. What can change live: the groups'
// profiles (a group whose profile changes starts its history afresh) and the
// script and settings the workers load, which the UDP and timer groups take
// at once: each of their workers is renewed (a new one started from the new
// snapshot, the old one drained once it is ready), so new calls see the new
// script while the calls in progress finish on the workers that hold them,
// as OpenSIPS's reload_routes applies new routes in every process. TCP
// workers are not renewed, since draining one waits for its clients to
// close their connections: each loads the new script in place and keeps its
// connections and transactions (its other settings change only when a TCP
// worker starts). A file that fails to load leaves the running config in
// place, as CoreDNS's reload does.
func (s *Supervisor) doReload() error {
	if s.opts.ConfigPath == "" {
		s.log.Info("reload: running the built-in config, nothing to re-read")
		return nil
	}
	cfg, err := config.LoadFile(s.opts.ConfigPath)
	if err == nil {
		// New workers would open the new store and old ones keep the old:
		// registrations would split between them.
		if sp, _ := cfg.Store(); sp != s.storeSpec {
			err = fmt.Errorf("location_store changed from %s to %s: it changes only on a restart; the running config stays", s.storeSpec, sp)
		}
	}
	if err != nil {
		s.m.reloadOK.Set(0)
		s.m.reloads.WithLabelValues("failure").Inc()
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if err := s.writeSnapshot(cfg); err != nil {
		s.m.reloadOK.Set(0)
		s.m.reloads.WithLabelValues("failure").Inc()
		return err
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
			for i, sk := range s.config().Sockets {
				if sk.Proto == "udp" && s.sockets[i].Name() == name && i < len(cfg.Sockets) && cfg.Sockets[i].Profile != "" {
					prof = cfg.Sockets[i].Profile
				}
			}
		}
		var next *profileRef
		if prof != "" {
			p := cfg.Profiles[prof]
			next = &p
		}
		if !sameProfile(gr.profile, next) {
			gr.profile = next
			if next != nil {
				gr.g.SetCeiling(max(next.UpTo, gr.g.Live()))
			}
			s.resetScaling(gr)
			s.log.Info("reload: group profile changed", "group", name, "profile", prof)
		}
	}
	if !sameSockets(s.config().Sockets, cfg.Sockets) {
		s.log.Warn("reload: sockets changed in the file; they change only on a restart", "file", s.opts.ConfigPath)
	}
	// Limits apply at once; values set with ctl set give way to the file's.
	s.ov.setLimits(cfg.Limits)
	for _, gr := range s.groups {
		if gr.g.Kind() == pool.KindUDP {
			gr.g.SetMaxQueueWait(cfg.Limits.MaxQueueWait)
		}
		if gr.door != nil {
			gr.door.MaxCallDuration.Store(int64(cfg.Limits.MaxCallDuration))
		}
	}
	timers := !sameTimers(s.config(), cfg)
	s.cfg.Store(cfg)
	if timers {
		s.log.Info("reload: timer_route schedule changed")
		select {
		case s.timersChanged <- struct{}{}:
		default: // one pending is enough: the loop reads the newest config
		}
	}
	for _, gr := range s.groups {
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
	s.m.reloadOK.Set(1)
	s.m.reloads.WithLabelValues("success").Inc()
	s.log.Info("config reloaded", "file", s.opts.ConfigPath)
	return nil
}

func sameSockets(a, b []config.Socket) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i].Proto != b[i].Proto || a[i].Host != b[i].Host || a[i].Port != b[i].Port {
			return false
		}
	}
	return true
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
