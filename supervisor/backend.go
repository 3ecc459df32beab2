package supervisor

import (
	"net/http"
	"sort"
	"time"

	"github.com/sipvisor/sipvisor/ctl"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/location"
	"github.com/sipvisor/sipvisor/overload"
)

// backend is the supervisor as the control API sees it.
type backend struct{ s *Supervisor }

var _ ctl.Backend = backend{}

func (s *Supervisor) miHandler() http.Handler {
	return ctl.Handler(backend{s}, s.config().HTTPToken)
}

func (b backend) PS() []ctl.Group {
	s := b.s
	var out []ctl.Group
	for _, gr := range s.groupRuns() {
		s.mu.Lock()
		g := ctl.Group{Name: gr.g.Name(), Kind: string(gr.g.Kind())}
		if gr.profile != nil {
			g.Profile = gr.profile.Name
		}
		l := gr.views.Loads()
		g.Load = ctl.Loads{Second: l.Second, Minute: l.Minute, TenMinutes: l.TenMinutes}
		views := make(map[int]ctl.Loads, len(gr.workers))
		for id, v := range gr.workers {
			l := v.Loads()
			views[id] = ctl.Loads{Second: l.Second, Minute: l.Minute, TenMinutes: l.TenMinutes}
		}
		s.mu.Unlock()
		now := time.Now()
		for _, w := range gr.g.Workers() {
			wk := ctl.Worker{ID: w.ID, Pid: w.Pid, State: w.State().String(),
				Load: views[w.ID], Queue: w.Queue(), QueueWaitSeconds: w.QueueAge(now.UnixNano()).Seconds(), Sessions: w.Sessions(), Age: now.Sub(w.Started),
				HeapBytes: w.HeapBytes(), GCCPUSeconds: w.GCCPUSeconds(), CPUSeconds: w.CPUSeconds(), Handled: w.Handled(), Dropped: w.Dropped()}
			if pct, ok := w.GCShare(); ok {
				wk.GCCPUPercent = &pct
			}
			g.Workers = append(g.Workers, wk)
		}
		sort.Slice(g.Workers, func(i, j int) bool { return g.Workers[i].ID < g.Workers[j].ID })
		out = append(out, g)
	}
	return s.withOldPS(out)
}

func (b backend) Stats() ctl.Stats {
	s := b.s
	st := ctl.Stats{UptimeSeconds: time.Since(s.started).Seconds(), Counters: map[string]float64{}}
	o := s.ov
	sus := o.Status()
	st.Suspended = sus.Suspended
	st.SuspendedManually = sus.Manual
	if st.Suspended {
		st.SuspendedSeconds = time.Since(sus.Since).Seconds()
		st.SuspendReasons = []string{sus.Reason}
		st.Warning = sus.Warning
	}
	st.Healthy, st.HealthReason = s.healthy()
	now := time.Now()
	st.Flips = o.Flips().Counts(now)
	st.FlipThreshold = o.Flips().Threshold()
	st.FlipWindowSeconds = o.Flips().Window().Seconds()
	total, byKind := o.Sessions()
	st.Counters["sessions"] = float64(total)
	st.Counters["calls"] = float64(byKind[sipscan.KindCall])
	st.Counters["registrations"] = float64(byKind[sipscan.KindRegistration])
	st.Counters["subscriptions"] = float64(byKind[sipscan.KindSubscription])
	for _, gr := range s.groupRuns() {
		if t := gr.gate.Throttle(); t != nil {
			st.Throttle = append(st.Throttle, ctl.Throttle{Group: gr.g.Name(), Enabled: true, SharePercent: 100 * t.Share(),
				RTTSeconds: gr.gate.LastRTT().Seconds(), ThresholdSeconds: t.Config().Threshold.Seconds()})
		}
	}
	for _, gr := range s.groupRuns() {
		dropped, refused := gr.g.Stale()
		st.Counters["stale_dropped"] += float64(dropped)
		st.Counters["stale_refused"] += float64(refused)
		if gr.stream != nil {
			gr.stream.Collect()
		}
		if gr.door == nil {
			for r := range gr.refusedConn {
				if v := gr.refusedConn[r].Load(); v > 0 {
					st.Counters["refused_"+overload.Refusal(r).String()] += float64(v)
				}
			}
			st.Counters["probes_refused"] += float64(gr.probesRefusedConn.Load())
			continue
		}
		d := &gr.door.Stats
		st.Counters["received"] += float64(d.Received.Load())
		st.Counters["forwarded"] += float64(d.Forwarded.Load())
		if gr.steer != nil {
			st.Counters["direct"] += float64(gr.steer.Counter(wire.OffDirectRead))
		}
		for r := range d.Refused {
			v := d.Refused[r].Load()
			if gr.steer != nil {
				v += gr.steer.Counter(wire.OffDoorRefused + 8*r)
			}
			if v > 0 {
				st.Counters["refused_"+overload.Refusal(r).String()] += float64(v)
			}
		}
		var bad uint64
		for i := range d.Malformed {
			bad += d.Malformed[i].Load()
		}
		absorbed, probes := d.Absorbed.Load(), d.ProbesRefused.Load()
		if gr.steer != nil {
			for i := 1; i < int(sipscan.NumErrors); i++ {
				bad += gr.steer.Counter(wire.OffDoorCounters + 8*(wire.DoorMalformed+i))
			}
			absorbed += gr.steer.Counter(wire.OffDoorCounters + 8*wire.DoorAbsorbed)
			probes += gr.steer.Counter(wire.OffDoorCounters + 8*wire.DoorProbesRefused)
		}
		st.Counters["malformed"] += float64(bad)
		st.Counters["retransmissions_absorbed"] += float64(absorbed)
		st.Counters["probes_refused"] += float64(probes)
	}
	return st
}

func (b backend) Params() *ctl.Params { return b.s.params }

func (b backend) Suspend() error {
	b.s.ov.SuspendManually(time.Now())
	return nil
}

func (b backend) Resume() error { return b.s.ov.ResumeManually(time.Now()) }

func (b backend) ResourceMonitor() []ctl.Resource { return b.s.resources() }

func (b backend) Reload() (ctl.ReloadResult, error) {
	p, err := b.s.Reload()
	r := ctl.ReloadResult{Reloaded: err == nil, Changed: p.Changed}
	for _, l := range p.Restart {
		r.RestartNeeded = append(r.RestartNeeded, l.String())
	}
	return r, err
}

func (b backend) Locations(aor string) ([]ctl.Binding, error) {
	bs, err := b.s.store.findBindings(aor)
	if err != nil {
		return nil, err
	}
	var out []ctl.Binding
	for _, l := range bs {
		out = append(out, ctl.Binding{AOR: l.AOR, Contact: l.Contact, Expires: l.Expires, Source: l.Received})
	}
	return out, nil
}

func (b backend) RemoveLocation(aor, contact string) (int, error) {
	return b.s.removeBindings(aor, contact)
}

func (b backend) Users() ([]ctl.User, error) {
	us, err := b.s.store.users()
	if err != nil {
		return nil, err
	}
	list, err := us.ListUsers()
	if err != nil {
		return nil, err
	}
	out := make([]ctl.User, 0, len(list))
	for _, u := range list {
		out = append(out, ctl.User{Name: u.Name, Realm: u.Realm})
	}
	return out, nil
}

func (b backend) AddUser(u ctl.User) error {
	us, err := b.s.store.users()
	if err != nil {
		return err
	}
	if err := us.PutUser(location.User{Name: u.Name, Realm: u.Realm, HA1MD5: u.HA1MD5, HA1SHA256: u.HA1SHA256}); err != nil {
		return err
	}
	b.s.log.Info("subscriber added by ctl user add", "user", u.Name, "realm", u.Realm)
	return nil
}

func (b backend) RemoveUser(name, realm string) error {
	us, err := b.s.store.users()
	if err != nil {
		return err
	}
	ok, err := us.RemoveUser(name, realm)
	if err != nil {
		return err
	}
	if !ok {
		return ctl.ErrNoUser
	}
	b.s.log.Info("subscriber removed by ctl user rm", "user", name, "realm", realm)
	return nil
}

func (b backend) Bans() []ctl.Ban { return b.s.bans.bans() }

func (b backend) Unban(source string) error { return b.s.bans.lift(source) }

func (b backend) Sockets() []ctl.Socket {
	return b.s.servedSockets()
}

var _ ctl.DispatcherBackend = backend{}

func (b backend) Destinations() []ctl.Destination {
	var out []ctl.Destination
	for _, d := range b.s.ds.list(time.Now()) {
		out = append(out, ctl.Destination{Set: d.Set, URI: d.URI, Flags: d.Flags, Priority: d.Priority, Weight: d.Weight, Attrs: d.Attrs,
			State: d.State, Probed: d.Probed, RTTSeconds: d.RTT.Seconds(), Probes: d.Probes, ProbeFailures: d.Failures, LastCode: d.LastCode,
			Sent: d.Sent, Failovers: d.Failovers, CallsPerSecond: d.Rate, LossPercent: d.Loss, Shed: d.Shed})
	}
	return out
}

func (b backend) SetDestination(set int, uri, state string) error { return b.s.ds.set(set, uri, state) }
