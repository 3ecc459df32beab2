package overload

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	uatomic "go.uber.org/atomic"

	"github.com/sipvisor/sipvisor/overload/slowstart"
)

// Worker is what slow start needs of a worker: who it is, and how much
// waits in its queue.
type Worker interface {
	comparable
	Queue() int
}

// ramp is one worker's slow start (Citrix ADC slow start). The door's
// goroutine asks Allow while the supervisor's loop ticks it, so a mutex
// guards it.
type ramp[W Worker] struct {
	w   W
	mu  sync.Mutex
	r   *slowstart.Ramp
	own atomic.Uint64 // new sessions handed to w since the last tick
}

// Ramps are the slow starts of one group's workers, and the pick of a
// worker for new work that they shape.
type Ramps[W Worker] struct {
	name string
	m    *SlowStartMetrics
	// list holds the workers ramping in, swapped whole under mu.
	list atomic.Pointer[[]*ramp[W]]
	mu   sync.Mutex
	// newSessions counts the group's new sessions since the last tick;
	// lastNewRate is their rate over the last interval (Tick only).
	newSessions atomic.Uint64
	lastNewRate uatomic.Float64
	// toRamping and toEstablished count new sessions by the kind of worker
	// that got them.
	toRamping, toEstablished prometheus.Counter
}

// NewRamps makes the ramps of the group called name.
func NewRamps[W Worker](name string, m *SlowStartMetrics) *Ramps[W] {
	return &Ramps[W]{name: name, m: m,
		toRamping: m.handed.WithLabelValues(name, "true"), toEstablished: m.handed.WithLabelValues(name, "false")}
}

func (rs *Ramps[W]) ramps() []*ramp[W] {
	if p := rs.list.Load(); p != nil {
		return *p
	}
	return nil
}

// Len is how many workers are in slow start.
func (rs *Ramps[W]) Len() int { return len(rs.ramps()) }

// Start puts w, which just became ready, in slow start under c. routable
// is how many workers of the group take new work, w among them. It
// reports whether w ramps in, and at what rate it starts.
func (rs *Ramps[W]) Start(w W, c slowstart.Config, routable int, now time.Time) (started bool, rate float64, err error) {
	if c.Mode == "" || c.Mode == slowstart.Off {
		return false, 0, nil
	}
	// An established worker's recent rate: what percent mode compares with.
	peers := routable - 1 - rs.Len()
	peerRate := 0.0
	if peers > 0 {
		peerRate = rs.lastNewRate.Load() / float64(peers)
	}
	r, err := slowstart.New(c, now, peerRate)
	if err != nil {
		return false, 0, err
	}
	if r.Done() {
		return false, 0, nil
	}
	// Read before the ramp is published: from then on the ticker owns it.
	rate = r.Rate()
	rs.mu.Lock()
	list := append(append([]*ramp[W](nil), rs.ramps()...), &ramp[W]{w: w, r: r})
	rs.list.Store(&list)
	rs.mu.Unlock()
	rs.m.ramping.WithLabelValues(rs.name).Set(float64(len(list)))
	rs.m.rate.WithLabelValues(rs.name).Set(rate)
	return true, rate, nil
}

// Pick picks the worker for a message with no affinity; least is the
// group's least loaded worker (the zero W when none takes work), routable
// those that take work. A new session goes to least unless it is in slow
// start and its ramp says no; then to the least loaded established worker.
// Nothing is refused because of slow start.
func (rs *Ramps[W]) Pick(least W, routable func() []W, newSession bool, now time.Time) W {
	var none W
	if least == none || !newSession {
		return least
	}
	rs.newSessions.Add(1)
	ramps := rs.ramps()
	if len(ramps) == 0 {
		rs.toEstablished.Inc()
		return least
	}
	for _, r := range ramps {
		if r.w != least {
			continue
		}
		r.mu.Lock()
		ok := r.r.Allow(now)
		r.mu.Unlock()
		if ok {
			r.own.Add(1)
			rs.toRamping.Inc()
			return least
		}
		if alt, ok := pickEstablished(routable(), ramps); ok {
			rs.toEstablished.Inc()
			return alt
		}
		// No established worker: the session goes to the new one anyway.
		r.own.Add(1)
		rs.toRamping.Inc()
		return least
	}
	rs.toEstablished.Inc()
	return least
}

// pickEstablished is the least loaded of ws not in slow start.
func pickEstablished[W Worker](ws []W, ramps []*ramp[W]) (best W, found bool) {
	bq := 0
outer:
	for _, w := range ws {
		for _, r := range ramps {
			if r.w == w {
				continue outer
			}
		}
		if q := w.Queue(); !found || q < bq {
			best, bq, found = w, q, true
		}
	}
	return best, found
}

// Ended is a worker out of slow start, and why.
type Ended[W Worker] struct {
	W      W
	Reason slowstart.Reason
}

// Tick ticks every ramp with what the group's workers received over the
// last secs seconds, and drops the ramps that ended and those of workers
// no longer ready. routable is how many workers of the group take new
// work. It returns the workers whose ramp ended.
func (rs *Ramps[W]) Tick(now time.Time, secs float64, routable int, ready func(W) bool) []Ended[W] {
	total := rs.newSessions.Swap(0)
	if secs > 0 {
		rs.lastNewRate.Store(float64(total) / secs)
	}
	ramps := rs.ramps()
	if len(ramps) == 0 {
		return nil
	}
	var own uint64
	counts := make([]uint64, len(ramps))
	for i, r := range ramps {
		counts[i] = r.own.Swap(0)
		own += counts[i]
	}
	peers := routable - len(ramps)
	keep := ramps[:0:0]
	var ended []Ended[W]
	for i, r := range ramps {
		r.mu.Lock()
		r.r.Tick(now, slowstart.Sample{Own: counts[i], Peers: total - own, PeerWorkers: max(peers, 0)})
		done, reason, rate := r.r.Done(), r.r.Reason(), r.r.Rate()
		r.mu.Unlock()
		if done || !ready(r.w) {
			if done {
				rs.m.ended.WithLabelValues(rs.name, string(reason)).Inc()
				ended = append(ended, Ended[W]{r.w, reason})
			}
			continue
		}
		rs.m.rate.WithLabelValues(rs.name).Set(rate)
		keep = append(keep, r)
	}
	rs.mu.Lock()
	// A worker that Start put in slow start since the snapshot above was
	// taken is not in it: it stays, or its ramp would be lost.
	for _, r := range rs.ramps() {
		if !slices.Contains(ramps, r) {
			keep = append(keep, r)
		}
	}
	rs.list.Store(&keep)
	rs.mu.Unlock()
	rs.m.ramping.WithLabelValues(rs.name).Set(float64(len(keep)))
	return ended
}

// Reconfigure applies a new setting to the ramps running (a manual value
// of 0 ends them at their next tick).
func (rs *Ramps[W]) Reconfigure(c slowstart.Config, now time.Time) error {
	for _, r := range rs.ramps() {
		r.mu.Lock()
		err := r.r.Reconfigure(c, now)
		r.mu.Unlock()
		if err != nil {
			return err
		}
	}
	return nil
}

// SlowStartMetrics are the ramps' metrics, shared by every group's.
type SlowStartMetrics struct {
	ramping *prometheus.GaugeVec
	rate    *prometheus.GaugeVec
	ended   *prometheus.CounterVec
	handed  *prometheus.CounterVec
}

// NewSlowStartMetrics registers the ramps' metrics with reg.
func NewSlowStartMetrics(reg prometheus.Registerer) *SlowStartMetrics {
	m := &SlowStartMetrics{
		ramping: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sipvisor", Subsystem: "slowstart", Name: "workers",
			Help: "Workers in slow start, per group."}, []string{"group"}),
		rate: prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: "sipvisor", Subsystem: "slowstart", Name: "rate",
			Help: "New sessions per second the group's newest worker in slow start may take."}, []string{"group"}),
		ended: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sipvisor", Subsystem: "slowstart", Name: "ended_total",
			Help: "Slow starts ended, by reason."}, []string{"group", "reason"}),
		handed: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "sipvisor", Subsystem: "slowstart", Name: "new_sessions_total",
			Help: "New sessions handed to workers, by whether the worker was in slow start."}, []string{"group", "ramping"}),
	}
	reg.MustRegister(m.ramping, m.rate, m.ended, m.handed)
	return m
}
