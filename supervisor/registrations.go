package supervisor

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/ctl"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/location"
)

// openStore opens the location store the config names, so that one out of
// reach stops the start with its reason, before any worker is forked.
func (s *Supervisor) openStore(cfg *config.Config) error {
	sp, err := cfg.Store()
	if err != nil {
		return err
	}
	if sp.Kind == location.KindSQLite && cfg.File == config.DefaultName {
		// The built-in config's store is in the state directory, which a
		// first run makes.
		if err := os.MkdirAll(filepath.Dir(sp.Path), 0o700); err != nil {
			return fmt.Errorf("location store %s: %w", sp, err)
		}
	}
	// Every call here is an operator's or a periodic one, and must see the
	// store as it is now: no pause after a failure (location.OpenUnpaused).
	st, err := location.OpenUnpaused(sp)
	if err != nil {
		return fmt.Errorf("%w (location_store in %s)", err, cfg.File)
	}
	s.store.locations, s.store.spec = st, sp
	s.m.storeUp.Set(1)
	return nil
}

// fileWithoutPorts moves, unless aor_keep_port, every binding filed under
// an AOR with a port (by a server with aor_keep_port, or by one from
// before the port was dropped) to the AOR without it, where the workers'
// lookup() finds it now: sip:carol@127.0.0.1:5070 becomes
// sip:carol@127.0.0.1. It reads every binding once, before any worker is
// forked; a store out of reach leaves them where they are, said in the log.
func (s *Supervisor) fileWithoutPorts(cfg *config.Config) {
	if cfg.AORKeepPort {
		return
	}
	start := time.Now()
	n, err := moveToPortless(s.store.locations)
	if err != nil {
		s.log.Warn("bindings filed with a port not moved to their AOR without it", "moved", n, "error", err)
		return
	}
	if n > 0 {
		s.log.Info("bindings filed with a port moved to their AOR without it (aor_keep_port = no)", "moved", n, "took", time.Since(start))
	}
}

// moveToPortless is fileWithoutPorts' work on st.
func moveToPortless(st location.Store) (int, error) {
	bs, err := st.List()
	if err != nil {
		return 0, err
	}
	n := 0
	for _, b := range bs {
		bare := location.DropPort(b.AOR)
		if bare == b.AOR {
			continue
		}
		old := b.AOR
		b.AOR = bare
		if err := st.Save(bare, b); err != nil {
			return n, err
		}
		if err := st.Remove(old, b.Contact); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// sweepEvery is how often lapsed rows are deleted from a store that does
// not lapse them itself (SQLite): lookups skip them meanwhile, and the
// sweep reads the whole table.
const sweepEvery = 30 * time.Second

// sharedCountEvery is how often the bindings of a shared store are
// counted: the count reads the Call-ID of every binding (3.3 ms for 10,000
// in SQLite, BenchmarkSQLiteCallIDs10k; 30 ms when it read them whole,
// BenchmarkSQLiteList10k), too much to do each second.
const sharedCountEvery = 5 * time.Second

// countShare bounds the processor a count of a shared store's bindings
// takes: the next count waits countShare times as long as the last took.
// A count reads every binding, so its cost grows with the registrations:
// 288,000 bindings in SQLite made an idle server take 61 ms of CPU a
// second when counted every sharedCountEvery, and 10 ms paced so
// (bench/profile.sh --kind idle --bindings 288000).
const countShare = 200

// countEvery is how long after a count that took took the next one comes:
// sharedCountEvery, or for a store whose count takes longer than
// sharedCountEvery/countShare, the whole multiple of it that keeps the
// counts under 1/countShare of a processor, up to countEveryMost. The
// count of bindings (max_registrations, number_of_sessions) and the
// Call-IDs that tell a refresh from a new registration are that much
// older; a refresh comes half an expiry after its registration, minutes
// at least.
func countEvery(took time.Duration) time.Duration {
	n := (took*countShare + sharedCountEvery - 1) / sharedCountEvery
	return min(max(n, 1)*sharedCountEvery, countEveryMost)
}

// countEveryMost is the longest wait between two counts.
const countEveryMost = 2 * time.Minute

// registrationsLoop counts the bindings (for max_registrations and for
// telling refreshes from new registrations) and sweeps lapsed ones, apart
// from the cycle loop, so that a slow or absent store never delays scaling
// decisions: each cycle for the memory store, every sharedCountEvery or
// longer (countEvery) for a shared one.
func (s *Supervisor) registrationsLoop(ctx context.Context) error {
	base := s.config().AutoScalingCycle
	if s.store.spec.Shared() {
		base = max(base, sharedCountEvery)
	}
	every := base
	t := newTicks(every)
	defer t.Stop()
	var lastSweep time.Time
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case now := <-t.C:
			start := time.Now()
			err := s.store.refresh()
			// A count that failed (the store unreachable, waiting out its
			// timeout) says nothing of the store's size: the next comes at
			// the base pace, so that its return is seen as soon as before.
			if every = base; err == nil && s.store.spec.Shared() {
				every = max(base, countEvery(time.Since(start)))
			}
			t.arm(every, true)
			if err == nil && (!s.store.spec.Shared() || now.Sub(lastSweep) >= sweepEvery) {
				_, err = s.store.locations.Expire(now)
				lastSweep = now
			}
			s.noteStore(err)
		}
	}
}

// noteStore logs the store's going and coming back once each, and keeps
// the metrics.
func (s *Supervisor) noteStore(err error) {
	if err != nil {
		s.m.storeErrors.WithLabelValues("supervisor").Inc()
		s.m.storeUp.Set(0)
		if !s.store.down.Swap(true) {
			s.log.Error("location store out of reach: REGISTERs and lookups are answered 503 until it is back", "store", s.store.spec.String(), "error", err)
		}
		return
	}
	s.m.storeUp.Set(1)
	if s.store.down.Swap(false) {
		s.log.Info("location store reachable again", "store", s.store.spec.String())
	}
}

// findBindings is `ul show`: every binding, those of one AOR (normalised
// as the registrar files it), or those of one user name in any domain.
func (st *store) findBindings(aor string) ([]location.Binding, error) {
	switch {
	case aor == "":
		return st.locations.List()
	case strings.Contains(aor, "@"):
		return st.bindingsOf(aor)
	}
	all, err := st.locations.List()
	if err != nil {
		return nil, err
	}
	var out []location.Binding
	for _, b := range all {
		if user, _, ok := strings.Cut(strings.TrimPrefix(b.AOR, "sip:"), "@"); ok && user == aor {
			out = append(out, b)
		}
	}
	return out, nil
}

// removeBindings is `ul rm`: contact matches a binding's contact as `ul
// show` prints it, with or without its angle brackets.
func (s *Supervisor) removeBindings(aor, contact string) (int, error) {
	bs, err := s.store.bindingsOf(aor)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, b := range bs {
		if contact != "" && b.Contact != contact && b.Contact != strings.Trim(contact, "<>") {
			continue
		}
		if err := s.store.locations.Remove(b.AOR, b.Contact); err != nil {
			return n, err
		}
		n++
	}
	if n == 0 {
		return 0, ctl.ErrNoBinding
	}
	s.log.Info("bindings removed by ctl ul rm", "aor", location.Key(aor), "contact", contact, "removed", n)
	return n, nil
}

// bindingsOf is the bindings of aor as ul show and ul rm take it: filed
// under it as written or without its port (aor_keep_port files the one,
// the default the other); when neither holds any, those filed with any
// port under its bare form, as a server with aor_keep_port filed its own
// address with its port (sip:carol@127.0.0.1:5070 for sip:carol@127.0.0.1).
func (st *store) bindingsOf(aor string) ([]location.Binding, error) {
	key := location.Key(aor)
	bare := location.DropPort(key)
	out, err := st.locations.Lookup(bare)
	if err != nil {
		return nil, err
	}
	if key != bare {
		bs, err := st.locations.Lookup(key)
		if err != nil {
			return nil, err
		}
		out = append(out, bs...)
	}
	if len(out) > 0 {
		return out, nil
	}
	all, err := st.locations.List()
	if err != nil {
		return nil, err
	}
	for _, b := range all {
		if b.AOR != bare && location.DropPort(b.AOR) == bare {
			out = append(out, b)
		}
	}
	return out, nil
}

// users is the credentials side of the location store.
func (st *store) users() (location.Users, error) { return location.UsersOf(st.locations) }

// refresh recounts the bindings and their REGISTER Call-IDs.
// A store out of reach keeps the last counts.
func (st *store) refresh() error {
	ids := make(map[uint64]struct{}, st.regCount.Load())
	n, err := location.EachCallID(st.locations, func(id []byte) {
		if len(id) > 0 {
			ids[sipscan.CallIDHash(id)] = struct{}{}
		}
	})
	if err != nil {
		return err
	}
	st.regIDs.Store(&ids)
	st.regCount.Store(int64(n))
	return nil
}

// refreshesBinding reports whether a REGISTER refreshes a live binding.
func (st *store) refreshesBinding(callID []byte) bool {
	ids := st.regIDs.Load()
	if ids == nil {
		return false
	}
	_, ok := (*ids)[sipscan.CallIDHash(callID)]
	return ok
}

// close closes the location store.
func (st *store) close() error { return st.locations.Close() }
