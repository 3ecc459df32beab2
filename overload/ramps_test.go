package overload

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sipvisor/sipvisor/overload/slowstart"
)

// worker is a worker as slow start sees it: who it is and its queue.
type worker struct {
	id    int
	queue int
	ready bool
}

func (w *worker) Queue() int { return w.queue }

// A worker in slow start gets new sessions as its ramp allows; what its
// ramp refuses goes to the least loaded established worker, or to it when
// there is none. Messages of no new session are not slow start's to steer.
func TestRampsPick(t *testing.T) {
	t.Parallel()
	old1, old2, fresh := &worker{id: 1, queue: 5, ready: true}, &worker{id: 2, queue: 3, ready: true}, &worker{id: 3, ready: true}
	all := []*worker{old1, old2, fresh}
	now := time.Unix(1000, 0)
	manual := slowstart.Config{Mode: slowstart.Manual, Unit: slowstart.PerSecond, Value: 1}
	for _, tc := range []struct {
		name       string
		routable   []*worker
		newSession bool
		first      *worker // what the first pick of the instant gets
		second     *worker // and the second, once the ramp's budget is spent
	}{
		{"a new session", all, true, fresh, old2},
		{"no established worker", []*worker{fresh}, true, fresh, fresh},
		{"no new session", all, false, fresh, fresh},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := NewRamps[*worker]("udp", NewSlowStartMetrics(prometheus.NewRegistry()))
			started, rate, err := rs.Start(fresh, manual, len(tc.routable), now)
			if err != nil || !started || rate != 1 {
				t.Fatalf("start: %v %v %v, want started at 1/s", started, rate, err)
			}
			routable := func() []*worker { return tc.routable }
			if w := rs.Pick(fresh, routable, tc.newSession, now); w != tc.first {
				t.Fatalf("first pick: worker %d, want %d", w.id, tc.first.id)
			}
			if w := rs.Pick(fresh, routable, tc.newSession, now); w != tc.second {
				t.Fatalf("second pick: worker %d, want %d", w.id, tc.second.id)
			}
			if w := rs.Pick(nil, routable, tc.newSession, now); w != nil {
				t.Fatalf("no worker to pick: have %d", w.id)
			}
		})
	}
}

// Without ramps every pick is the least loaded worker; off starts none.
func TestRampsOff(t *testing.T) {
	t.Parallel()
	rs := NewRamps[*worker]("udp", NewSlowStartMetrics(prometheus.NewRegistry()))
	w := &worker{id: 1, ready: true}
	if started, _, err := rs.Start(w, slowstart.Config{Mode: slowstart.Off}, 2, time.Unix(1, 0)); started || err != nil {
		t.Fatalf("off: started %v, %v", started, err)
	}
	if got := rs.Pick(w, nil, true, time.Unix(1, 0)); got != w {
		t.Fatal("want the least loaded worker")
	}
}

// A tick drops the ramps that ended, saying why, and those of workers no
// longer ready, silently.
func TestRampsTick(t *testing.T) {
	t.Parallel()
	rs := NewRamps[*worker]("udp", NewSlowStartMetrics(prometheus.NewRegistry()))
	now := time.Unix(1000, 0)
	auto := slowstart.Config{Mode: slowstart.Auto, Unit: slowstart.PerSecond, Increment: 4, Interval: 10 * time.Second}
	idle, gone := &worker{id: 1, ready: true}, &worker{id: 2, ready: true}
	for _, w := range []*worker{idle, gone} {
		if started, _, err := rs.Start(w, auto, 4, now); !started || err != nil {
			t.Fatalf("start %d: %v %v", w.id, started, err)
		}
	}
	gone.ready = false
	ready := func(w *worker) bool { return w.ready }
	var ended []Ended[*worker]
	for i := 1; i <= slowstart.IdleIntervals; i++ {
		ended = append(ended, rs.Tick(now.Add(time.Duration(i)*10*time.Second), 10, 4, ready)...)
	}
	if len(ended) != 1 || ended[0].W != idle || ended[0].Reason != slowstart.ReasonNoTraffic {
		t.Fatalf("ended %+v, want worker 1 for no traffic", ended)
	}
	if rs.Len() != 0 {
		t.Fatalf("want no ramp left, have %d", rs.Len())
	}
}

// The door's side starts ramps (a worker became ready) while the ticker
// ticks them: no ramp started meanwhile is lost, and a started ramp's rate
// is read before the ticker owns it (the race detector checks that).
func TestRampsStartWhileTicking(t *testing.T) {
	t.Parallel()
	rs := NewRamps[*worker]("udp", NewSlowStartMetrics(prometheus.NewRegistry()))
	now := time.Unix(1000, 0)
	manual := slowstart.Config{Mode: slowstart.Manual, Unit: slowstart.PerSecond, Value: 1, Increment: 1, Interval: time.Hour}
	const n = 200
	stop := make(chan struct{})
	ticked := make(chan struct{})
	go func() {
		defer close(ticked)
		ready := func(*worker) bool { return true }
		for {
			select {
			case <-stop:
				return
			default:
				rs.Tick(now, 0.001, n+1, ready)
			}
		}
	}()
	for i := range n {
		if started, _, err := rs.Start(&worker{id: i, ready: true}, manual, n+1, now); !started || err != nil {
			t.Fatalf("start %d: %v %v", i, started, err)
		}
	}
	close(stop)
	<-ticked
	if rs.Len() != n {
		t.Fatalf("want %d workers in slow start, have %d: ramps started during a tick were lost", n, rs.Len())
	}
}
