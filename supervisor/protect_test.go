package supervisor

import (
	"bytes"
	"fmt"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/pool"
)

// client sends to a supervisor's first socket and sorts what comes back:
// the request itself (handled by a cost worker) or a 503 from the door.
type client struct {
	c            *net.UDPConn
	dst          *net.UDPAddr
	handled, ref atomic.Int64
	wg           sync.WaitGroup
}

func newClient(t *testing.T, s *Supervisor) *client {
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	c.SetReadBuffer(8 << 20)
	a := s.SIPAddrs()[0]
	cl := &client{c: c, dst: &net.UDPAddr{IP: net.ParseIP(a.Host), Port: a.Port}}
	cl.wg.Add(1)
	go func() {
		defer cl.wg.Done()
		buf := make([]byte, 4096)
		for {
			n, _, err := c.ReadFrom(buf)
			if err != nil {
				return
			}
			switch {
			case bytes.HasPrefix(buf[:n], []byte("SIP/2.0 503 ")):
				cl.ref.Add(1)
			case bytes.HasPrefix(buf[:n], []byte("INVITE ")):
				cl.handled.Add(1)
			}
		}
	}()
	t.Cleanup(func() { c.Close(); cl.wg.Wait() })
	return cl
}

// send paces n new sessions at rate per second, numbered from first.
func (cl *client) send(first, n, rate int) { cl.sendUntil(first, n, rate, nil) }

// sendUntil is send that also stops once stop is closed; it returns how
// many it sent.
func (cl *client) sendUntil(first, n, rate int, stop <-chan struct{}) int {
	start := time.Now()
	for i := 0; i < n; i++ {
		select {
		case <-stop:
			return i
		default:
		}
		if d := time.Duration(i) * time.Second / time.Duration(rate); time.Since(start) < d {
			time.Sleep(d - time.Since(start)) // pacing: the offered load is the workload under test
		}
		cl.c.WriteTo(numbered("INVITE", first+i), cl.dst)
	}
	return n
}

// decided is how many new sessions the front door has admitted or refused
// with 503: once every one sent is, the slow start counters, counted when
// the door picks a worker, are final. A session admitted is counted before
// its worker handles it, and a reply lost on the way back does not matter.
func decided(t *testing.T, st *started) float64 {
	t.Helper()
	body := st.metrics(t)
	return testkit.Metric(t, body, "sipvisor_frontdoor_admitted_sessions_total", `kind="call"`) +
		testkit.Metric(t, body, "sipvisor_frontdoor_refused_sessions_total")
}

// A worker made slow by a per-message cost raises the echo round trip; the
// throttle refuses a growing share of new sessions, and lets go once the
// backlog is gone (the Junos resource monitor's behaviour, with time-scaled settings).
//
// Not parallel: the echo round trip it watches would carry other tests' load.
func TestThrottleEngagesAndLetsGo(t *testing.T) {
	st := startSupervisor(t, cfgf(`
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 1
# A round trip of 250 ms is a backlog of a dozen messages, well above what
# a machine busy with other work adds to an idle worker's.
throttle_rtt_threshold = 0.25
echo_interval = 0.05
throttle_count = 3
throttle_step = 10
# Only the throttle refuses here: queue delay admission would take some of
# the refusals this test counts.
queue_delay_admission = 0
route { exit; }
`), costWorker(20*time.Millisecond), nil)
	g := st.s.Groups()[0]
	testkit.WaitFor(t, patience, "a ready worker", func() bool { return len(g.Routable()) == 1 })
	cl := newClient(t, st.s)
	// 100 new sessions a second against a worker that handles 50: the queue,
	// and with it the round trip, grows. The share is watched from the
	// start: it may rise and fall while the sessions are still being sent.
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		cl.send(0, 200, 100)
	}()
	peak := 0.0
	// The share is published from the group's first echo sample on; before
	// that there is no series, and nothing refused.
	ratio := func() (float64, bool) {
		r, ok := st.lookup(t, "sipvisor_overload_throttle_refused_ratio")
		peak = max(peak, r)
		return r, ok
	}
	testkit.WaitFor(t, patience, "the throttle to engage", func() bool {
		ratio()
		return st.metric(t, "sipvisor_frontdoor_refused_sessions_total", `reason="throttle"`) > 0
	})
	<-sent
	testkit.WaitFor(t, 30*time.Second, "the throttle to let go", func() bool { r, ok := ratio(); return ok && r == 0 })
	refused := cl.ref.Load()
	// Once let go, new sessions are admitted again.
	handled := cl.handled.Load()
	cl.send(1000, 10, 20)
	testkit.WaitFor(t, patience, "an answer to each new session", func() bool {
		return cl.handled.Load()-handled+cl.ref.Load()-refused >= 10
	})
	if h, r := cl.handled.Load()-handled, cl.ref.Load()-refused; h != 10 {
		t.Fatalf("once let go: want 10 new sessions handled, have %d handled and %d refused", h, r)
	}
	if refused == 0 || peak < 0.1 {
		t.Fatalf("want refusals and a refused share of at least 10%%, have %d refusals, peak %.2f", refused, peak)
	}
	t.Logf("peak refused share %.0f%%, %d sessions refused with 503", 100*peak, refused)
}

// A worker that replaces a crashed one takes new sessions at the manual
// slow start rate, the rest going to the established worker; the share is
// read from the front door's counters.
//
// Not parallel: it measures shares of paced traffic on a loaded machine.
func TestSlowStartRampsNewWorker(t *testing.T) {
	st := startSupervisor(t, cfgf(`
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 2
slow_start_mode = manual
slow_start_unit = per_second
slow_start_value = 5
slow_start_interval = 0.5
route { exit; }
`), costWorker(0), nil)
	g := st.s.Groups()[0]
	testkit.WaitFor(t, patience, "2 ready workers", func() bool { return len(g.Routable()) == 2 })
	victim := g.Routable()[0]
	victim.Signal(syscall.SIGKILL)
	<-victim.Done()
	var fresh *pool.Worker
	testkit.WaitFor(t, patience, "a replacement", func() bool {
		for _, w := range g.Routable() {
			if w.ID > 2 {
				fresh = w
			}
		}
		return fresh != nil
	})
	testkit.WaitFor(t, 10*time.Second, "the replacement in slow start", func() bool {
		n, ok := st.lookup(t, "sipvisor_slowstart_workers") // set once a ramp starts
		return ok && n == 1
	})
	cl := newClient(t, st.s)
	// 4 s at 100/s: an equal share would be 200; at 5/s the new worker takes
	// about 20 (one at once, then the rate).
	start := time.Now()
	cl.send(0, 400, 100)
	elapsed := time.Since(start)
	testkit.WaitFor(t, patience, "every session admitted", func() bool { return decided(t, st) == 400 })
	got := st.metric(t, "sipvisor_slowstart_new_sessions_total", `ramping="true"`)
	want := 5*elapsed.Seconds() + 1
	if got < want*0.5 || got > want*1.5 {
		t.Fatalf("want about %.0f sessions on the worker in slow start, have %v", want, got)
	}
	if h := fresh.Handled(); h > 2*uint64(want)+10 {
		t.Fatalf("want the new worker to have handled about %.0f messages, have %d", want, h)
	}
	t.Logf("worker in slow start took %v of 400 new sessions in %v", got, elapsed.Round(time.Millisecond))
	// Manual mode holds until changed; a value of 0 set at run time ends it.
	if err := st.s.params.Set("slow_start/value", "0"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, 10*time.Second, "the ramp to end", func() bool {
		return st.metric(t, "sipvisor_slowstart_workers") == 0
	})
	if err := st.s.params.Set("slow_start/value", "-1"); err == nil {
		t.Fatal("want a negative slow start value refused")
	}
}

// Crashes are status flips of the group's health; enough of them within the
// window make /healthz unhealthy, and one good reading does not clear it.
func TestFlappingWorkersTurnUnhealthy(t *testing.T) {
	t.Parallel()
	st := startSupervisor(t, cfgf(`
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 1
flip_threshold = 6
flip_window = 10m
route { exit; }
`), costWorker(0), nil)
	g := st.s.Groups()[0]
	health := func() int {
		resp, err := http.Get("http://" + st.s.HTTPAddr() + "/healthz")
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	// flips is the group's flip count, which /healthz publishes as it
	// answers.
	flips := func() float64 {
		health()
		return st.metric(t, "sipvisor_overload_flips", `component="workers/`+g.Name()+`"`)
	}
	// Each crash and restart is two flips (down, up): three crashes reach
	// six. The supervisor hears of an exit after the worker's Done, so each
	// crash is awaited as counted before /healthz is asked.
	const crashes = 3
	for i := 0; i < crashes; i++ {
		if code := health(); code != http.StatusOK {
			t.Fatalf("after %d crashes: want /healthz 200, have %d", i, code)
		}
		var w *pool.Worker
		testkit.WaitFor(t, 30*time.Second, "a ready worker", func() bool {
			ws := g.Routable()
			if len(ws) == 1 {
				w = ws[0]
			}
			return w != nil
		})
		w.Signal(syscall.SIGKILL)
		<-w.Done()
		testkit.WaitFor(t, 10*time.Second, fmt.Sprintf("crash %d counted as flips", i+1), func() bool { return flips() == float64(2*(i+1)) })
	}
	if code := health(); code != http.StatusServiceUnavailable {
		t.Fatalf("after %d crashes: want /healthz 503, have %d", crashes, code)
	}
	testkit.WaitFor(t, 30*time.Second, "a ready worker again", func() bool { return len(g.Routable()) == 1 })
	if code := health(); code != http.StatusServiceUnavailable {
		t.Fatalf("a healthy worker again must not clear the flips: want 503, have %d", code)
	}
}

// A worker forked by the scaler ramps in automatically: its rate grows by
// the increment every interval, and it takes less than an equal share
// meanwhile.
//
// Not parallel: the fork waits for one worker's measured load, which
// other tests' load would blur.
func TestSlowStartAutoRampsForkedWorker(t *testing.T) {
	st := startSupervisor(t, cfgf(`
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
auto_scaling_cycle = 0.2
auto_scaling_profile = P scale up to 2 on 50%% for 2 cycles within 2
udp_workers = 1 use_auto_scaling_profile P
slow_start_mode = auto
slow_start_unit = per_second
slow_start_value = 5
slow_start_increment = 5
slow_start_interval = 0.5
route { exit; }
`), costWorker(5*time.Millisecond), nil)
	g := st.s.Groups()[0]
	testkit.WaitFor(t, patience, "a ready worker", func() bool { return len(g.Routable()) == 1 })
	cl := newClient(t, st.s)
	// 150 new sessions a second at 5 ms each keep one worker 75 % busy: the
	// group forks its second worker, which ramps in. They go on until the
	// ramp has been seen to grow, for at most a minute.
	stop, sent := make(chan struct{}), make(chan int, 1)
	go func() { sent <- cl.sendUntil(0, 150*60, 150, stop) }()
	stopSending := sync.OnceFunc(func() { close(stop) })
	defer stopSending()
	testkit.WaitFor(t, patience, "the forked worker in slow start", func() bool {
		n, ok := st.lookup(t, "sipvisor_slowstart_workers") // set once a ramp starts
		return ok && n == 1
	})
	var rates []float64
	testkit.WaitFor(t, patience, "the ramp to grow", func() bool {
		r := st.metric(t, "sipvisor_slowstart_rate")
		if len(rates) == 0 || r != rates[len(rates)-1] {
			rates = append(rates, r)
		}
		return len(rates) >= 3
	})
	for i := 1; i < len(rates); i++ {
		if rates[i] <= rates[i-1] {
			t.Fatalf("want a growing rate, have %v", rates)
		}
	}
	stopSending()
	n := float64(<-sent)
	testkit.WaitFor(t, 30*time.Second, "every session admitted or refused", func() bool { return decided(t, st) == n })
	ramped := st.metric(t, "sipvisor_slowstart_new_sessions_total", `ramping="true"`)
	established := st.metric(t, "sipvisor_slowstart_new_sessions_total", `ramping="false"`)
	if ramped == 0 || ramped >= established {
		t.Fatalf("want the forked worker to take some but less than the established one, have %v vs %v", ramped, established)
	}
	t.Logf("ramp rates %v; new sessions: %v to the ramping worker, %v to the established one", rates, ramped, established)
}
