package pool

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/internal/testkit/testworker"
	"github.com/sipvisor/sipvisor/internal/wire"
)

func TestWorkersServeThroughSharedSocket(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, GroupOptions{Initial: 2, Command: testCommand(testworker.Echo, 0)})
	testkit.WaitFor(t, patience, "2 ready workers", func() bool { return len(fx.g.Routable()) == 2 })
	const n = 200
	for i := 0; i < n; i++ {
		if err := fx.send(fx.g.Pick(), i); err != nil {
			t.Fatal(err)
		}
	}
	got := fx.receive(n, patience)
	if len(got) != n {
		t.Fatalf("want %d replies, have %d", n, len(got))
	}
	// Both workers took work: Pick spreads it.
	for _, w := range fx.g.Workers() {
		if w.Handled() == 0 {
			t.Errorf("worker %d handled nothing", w.ID)
		}
	}
}

// The group's load is the share of wall time its workers spend in the
// handler: none for an idle worker, all of it for one inside the handler
// throughout. The samples are taken at chosen instants, so the shares are
// exact whatever the machine's speed.
func TestLoadIsBusyShare(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, GroupOptions{Initial: 1, Command: testCommand(testworker.Hold, 0)})
	testkit.WaitFor(t, patience, "a ready worker", func() bool { return len(fx.g.Routable()) == 1 })
	w := fx.g.Routable()[0]
	defer w.Signal(testworker.ReleaseSignal)
	t0 := time.Now()
	fx.g.Sample(t0)
	if load, ok, _ := fx.g.Sample(t0.Add(50 * time.Millisecond)); !ok || load != 0 {
		t.Fatalf("idle worker: want load 0, have %.1f (ok %v)", load, ok)
	}
	for i := range 3 {
		if err := fx.send(w, i); err != nil {
			t.Fatal(err)
		}
	}
	var since int64
	testkit.WaitFor(t, patience, "the worker inside its handler", func() bool {
		since = int64(w.p.stats.Load(wire.OffBusySince))
		return since != 0
	})
	t1 := time.Unix(0, since).Add(time.Millisecond)
	fx.g.Sample(t1)
	load, ok, ws := fx.g.Sample(t1.Add(300 * time.Millisecond))
	if !ok || load != 100 {
		t.Fatalf("worker in its handler throughout: want load 100, have %.1f (ok %v)", load, ok)
	}
	if ws[0].Queue < 2 {
		t.Errorf("want 2 messages queued behind the held one, have %d", ws[0].Queue)
	}
	if err := w.Signal(testworker.ReleaseSignal); err != nil {
		t.Fatal(err)
	}
	if got := fx.receive(3, patience); len(got) != 3 {
		t.Fatalf("once let go: want 3 replies, have %d", len(got))
	}
}

// Everything handed to a worker before it was told to drain is handled
// before it exits, and it exits cleanly.
func TestDrainLosesNothing(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	fx := newFixture(t, GroupOptions{Initial: 1, Command: testCommand(testworker.Echo, 200*time.Microsecond), Metrics: NewMetrics(reg)})
	testkit.WaitFor(t, patience, "a ready worker", func() bool { return len(fx.g.Routable()) == 1 })
	w := fx.g.Routable()[0]
	const n = 1000
	for i := 0; i < n; i++ {
		if err := fx.send(w, i); err != nil {
			t.Fatal(err)
		}
	}
	fx.g.Drain(w)
	if err := fx.send(w, n); err != nil {
		// A draining worker still takes frames sent to it (the front door
		// sends it messages of transactions it holds).
		t.Fatalf("send to draining worker: %v", err)
	}
	got := fx.receive(n+1, patience)
	select {
	case <-w.Done():
	case <-time.After(patience):
		t.Fatal("drained worker did not exit")
	}
	if len(got) != n+1 {
		t.Fatalf("want %d replies, have %d", n+1, len(got))
	}
	if r := w.ExitReason(); r != ExitClean {
		t.Fatalf("want exit reason %s, have %s", ExitClean, r)
	}
	if v := testutil.ToFloat64(fx.g.opts.Metrics.exits.WithLabelValues("udp0", ExitClean)); v != 1 {
		t.Fatalf("want 1 clean exit counted, have %v", v)
	}
	if fx.g.Live() != 0 {
		t.Fatalf("want a drained worker not replaced, have %d live", fx.g.Live())
	}
}

func TestCrashedWorkerIsReplacedAndCounted(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	fx := newFixture(t, GroupOptions{Initial: 2, Command: testCommand(testworker.Echo, 0), Metrics: NewMetrics(reg)})
	testkit.WaitFor(t, patience, "2 ready workers", func() bool { return len(fx.g.Routable()) == 2 })
	victim := fx.g.Routable()[0]
	if err := victim.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-victim.Done()
	if r := victim.ExitReason(); r != ExitCrash {
		t.Fatalf("want %s, have %s", ExitCrash, r)
	}
	testkit.WaitFor(t, patience, "a replacement", func() bool {
		ws := fx.g.Routable()
		return len(ws) == 2 && ws[0] != victim && ws[1] != victim
	})
	m := fx.g.opts.Metrics
	if v := testutil.ToFloat64(m.exits.WithLabelValues("udp0", ExitCrash)); v != 1 {
		t.Errorf("want 1 crash counted, have %v", v)
	}
	if v := testutil.ToFloat64(m.restarts.WithLabelValues("udp0")); v != 1 {
		t.Errorf("want 1 restart counted, have %v", v)
	}
	if v := testutil.ToFloat64(m.spawns.WithLabelValues("udp0")); v != 3 {
		t.Errorf("want 3 spawns, have %v", v)
	}
}

func TestReadyTimeoutKills(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, GroupOptions{Initial: 1, Command: testCommand(testworker.NeverReady, 0), ReadyTimeout: 300 * time.Millisecond})
	w := fx.g.Workers()[0]
	select {
	case <-w.Done():
	case <-time.After(patience):
		t.Fatal("worker that never got ready is still there")
	}
	if r := w.ExitReason(); r != ExitReadyTimeout {
		t.Fatalf("want %s, have %s", ExitReadyTimeout, r)
	}
}

func TestDrainDeadlineKills(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, GroupOptions{Initial: 1, Command: testCommand(testworker.SlowDrain, 0), DrainTimeout: 300 * time.Millisecond})
	testkit.WaitFor(t, patience, "a ready worker", func() bool { return len(fx.g.Routable()) == 1 })
	w := fx.g.Shrink()
	if w == nil {
		t.Fatal("Shrink found no worker")
	}
	select {
	case <-w.Done():
	case <-time.After(patience):
		t.Fatal("worker past its drain deadline is still there")
	}
	if r := w.ExitReason(); r != ExitKilled {
		t.Fatalf("want %s, have %s", ExitKilled, r)
	}
}

func TestCrashLoopBacksOff(t *testing.T) {
	t.Parallel()
	type exit struct {
		id      int
		started time.Time
		reason  string
	}
	exits := make(chan exit, 16)
	fx := newFixture(t, GroupOptions{Initial: 1, Command: testCommand(testworker.CrashAfterReady, 0),
		OnExit: func(w *Worker, reason string) { exits <- exit{w.ID, w.Started, reason} }})
	// Every worker crashes once ready. The first is replaced at once, the
	// second after RestartDelay(2), the third after RestartDelay(3): each
	// replacement starts at least that long after the one before started.
	// A slow machine only widens the gaps.
	byID := map[int]exit{}
	for len(byID) < 4 {
		select {
		case e := <-exits:
			if e.reason != ExitCrash {
				t.Fatalf("worker %d: want exit reason %s, have %s", e.id, ExitCrash, e.reason)
			}
			byID[e.id] = e
		case <-time.After(patience):
			t.Fatalf("want 4 crashed workers, have %d", len(byID))
		}
	}
	for id := 2; id <= 4; id++ {
		gap := byID[id].started.Sub(byID[id-1].started)
		if want := RestartDelay(id - 1); gap < want {
			t.Errorf("worker %d started %v after worker %d; want at least RestartDelay(%d) = %v", id, gap, id-1, id-1, want)
		}
	}
	// The first three crashes were replaced before the fourth worker ran;
	// the fourth's replacement may still be being counted.
	if v := testutil.ToFloat64(fx.g.opts.Metrics.restarts.WithLabelValues("udp0")); v < 3 {
		t.Errorf("want at least 3 restarts counted, have %v", v)
	}
}

func TestRestartDelay(t *testing.T) {
	t.Parallel()
	for _, r := range []struct {
		n    int
		want time.Duration
	}{
		{1, 0}, {2, 250 * time.Millisecond}, {3, 500 * time.Millisecond}, {4, time.Second},
		{9, 32 * time.Second / 1}, {100, 30 * time.Second},
	} {
		want := min(r.want, 30*time.Second)
		if have := RestartDelay(r.n); have != want {
			t.Errorf("n=%d: want %v, have %v", r.n, want, have)
		}
	}
}

// Workers never outlive their supervisor, even one killed with SIGKILL.
func TestWorkersDieWithSupervisor(t *testing.T) {
	t.Parallel()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "POOL_TEST_SUPERVISOR=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var pids []int
	sc := bufio.NewScanner(out)
	lines := make(chan string)
	go func() {
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	timeout := time.After(patience)
loop:
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatal("supervisor ended early")
			}
			if p, found := strings.CutPrefix(l, "pid "); found {
				pid, _ := strconv.Atoi(p)
				pids = append(pids, pid)
			}
			if l == "ready" {
				break loop
			}
		case <-timeout:
			t.Fatal("supervisor did not start its workers")
		}
	}
	if len(pids) != 2 {
		t.Fatalf("want 2 worker pids, have %v", pids)
	}
	cmd.Process.Signal(syscall.SIGKILL)
	cmd.Wait()
	testkit.WaitFor(t, patience, "workers to die", func() bool {
		for _, pid := range pids {
			if alive(pid) {
				return false
			}
		}
		return true
	})
}

// alive reports whether pid runs; a zombie waiting to be reaped is dead.
func alive(pid int) bool {
	st := testkit.ProcState(pid)
	return st != 0 && st != 'Z'
}

// A worker reaches state kept in the supervisor with worker.Env.Call.
func TestWorkerCallsSupervisor(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, GroupOptions{Initial: 1, Command: testCommand(testworker.Call, 0),
		OnCall: func(w *Worker, req []byte) []byte { return append([]byte("7"), req...) }})
	testkit.WaitFor(t, patience, "a ready worker", func() bool { return len(fx.g.Routable()) == 1 })
	w := fx.g.Routable()[0]
	for i := 0; i < 20; i++ {
		if err := fx.send(w, i); err != nil {
			t.Fatal(err)
		}
	}
	got := fx.receive(20, patience)
	for i := 0; i < 20; i++ {
		if !got[700+i] && !(i < 10 && got[70+i]) {
			t.Fatalf("want answer 7%d, have %v", i, got)
		}
	}
}

// A worker tells the supervisor what needs no answer with worker.Env.Note, in
// order.
func TestWorkerNotesSupervisor(t *testing.T) {
	t.Parallel()
	var mu sync.Mutex
	var notes []string
	fx := newFixture(t, GroupOptions{Initial: 1, Command: testCommand(testworker.Note, 0),
		OnNote: func(w *Worker, note []byte) {
			mu.Lock()
			notes = append(notes, string(note))
			mu.Unlock()
		}})
	testkit.WaitFor(t, patience, "a ready worker", func() bool { return len(fx.g.Routable()) == 1 })
	w := fx.g.Routable()[0]
	for i := 0; i < 20; i++ {
		if err := fx.send(w, i); err != nil {
			t.Fatal(err)
		}
	}
	fx.receive(20, patience)
	testkit.WaitFor(t, patience, "20 notes", func() bool { mu.Lock(); defer mu.Unlock(); return len(notes) == 20 })
	mu.Lock()
	defer mu.Unlock()
	for i, n := range notes {
		if n != strconv.Itoa(i) {
			t.Fatalf("want the notes in order 0..19, have %q", notes)
		}
	}
}

// Renew puts a new worker in place of each one and drains the old ones once
// their replacements are ready; what is sent meanwhile is all handled, and
// a scale-down in between takes an old worker, not a new one.
func TestRenewReplacesEveryWorker(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, GroupOptions{Initial: 2, Command: testCommand(testworker.Echo, 0)})
	testkit.WaitFor(t, patience, "2 ready workers", func() bool { return len(fx.g.Routable()) == 2 })
	old := append([]*Worker(nil), fx.g.Routable()...)
	if n := fx.g.Renew(); n != 2 {
		t.Fatalf("want 2 workers renewed, have %d", n)
	}
	if n := fx.g.Renew(); n != 2 {
		t.Fatalf("want only the 2 new workers renewed again, have %d", n)
	}
	// Messages go out in rounds until every old worker has gone: all of
	// them are sent while the renewal runs, whatever it takes.
	oldGone := func() bool {
		for _, w := range old {
			select {
			case <-w.Done():
			default:
				return false
			}
		}
		return true
	}
	sent := 0
	deadline := time.Now().Add(patience)
	for round := 0; round < 30 || !oldGone(); round++ {
		if time.Now().After(deadline) {
			t.Fatalf("old workers not drained within %v", patience)
		}
		first := sent
		for range 10 {
			if w := fx.g.Pick(); w != nil && fx.send(w, sent) == nil {
				sent++
			}
		}
		got := fx.receive(sent-first, patience)
		for i := first; i < sent; i++ {
			if !got[i] {
				t.Fatalf("message %d sent during the renewal got no reply", i)
			}
		}
	}
	for _, w := range old {
		select {
		case <-w.Done():
		case <-time.After(patience):
			t.Fatalf("old worker %d not drained", w.ID)
		}
		if r := w.ExitReason(); r != ExitClean {
			t.Fatalf("old worker %d: want exit reason %s, have %s", w.ID, ExitClean, r)
		}
	}
	testkit.WaitFor(t, patience, "2 ready workers of the second renewal", func() bool {
		ws := fx.g.Routable()
		if len(ws) != 2 {
			return false
		}
		for _, w := range ws {
			if w.ID <= 4 {
				return false
			}
		}
		return true
	})
	testkit.WaitFor(t, patience, "only the renewed workers left", func() bool { return len(fx.g.Workers()) == 2 })
}

// While a renewal runs, Shrink drains a worker being replaced first, though
// it would otherwise take the newest.
func TestShrinkTakesAStaleWorkerFirst(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, GroupOptions{Initial: 2, Command: testCommand(testworker.Echo, 0)})
	testkit.WaitFor(t, patience, "2 ready workers", func() bool { return len(fx.g.Routable()) == 2 })
	first := fx.g.Routable()[0]
	for _, w := range fx.g.Routable() {
		if w.ID < first.ID {
			first = w
		}
	}
	fx.g.mu.Lock()
	first.stale = true
	fx.g.mu.Unlock()
	if w := fx.g.Shrink(); w != first {
		t.Fatalf("want the stale worker %d drained, have %v", first.ID, w)
	}
}

// A request that waited longer than the group's MaxQueueWait is dropped
// unhandled and counted; a fresh request and a response of any age are
// handled. The bound applies to a running worker as soon as it is set.
func TestStaleRequestsDropped(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, GroupOptions{Initial: 1, Command: testCommand(testworker.Echo, 0)})
	testkit.WaitFor(t, patience, "a ready worker", func() bool { return len(fx.g.Routable()) == 1 })
	w := fx.g.Workers()[0]
	from := fx.client.LocalAddr().(*net.UDPAddr).AddrPort()
	send := func(body string, age time.Duration) {
		t.Helper()
		frame := make([]byte, wire.MsgHeaderLen, wire.MsgHeaderLen+len(body))
		wire.PutMsgHeader(frame, 0, from, time.Now().Add(-age).UnixNano())
		if err := w.Send(append(frame, body...)); err != nil {
			t.Fatal(err)
		}
	}
	// No bound yet: an old request is handled.
	send("OPTIONS old-unbounded", 24*time.Hour)
	// The bound is read when a frame is taken: wait until this one was.
	testkit.WaitFor(t, patience, "the first frame handled", func() bool { return w.Handled() >= 1 })
	// The bound is far above any wait of a fresh frame on a loaded machine,
	// the stale ones far above the bound.
	fx.g.SetMaxQueueWait(patience)
	send("OPTIONS stale", time.Hour)
	send("SIP/2.0 200 old-response", time.Hour)
	send("OPTIONS fresh", 0)
	testkit.WaitFor(t, patience, "4 frames handled", func() bool { return w.Handled() >= 4 })
	got := map[string]bool{}
	fx.client.SetReadDeadline(time.Now().Add(patience))
	for len(got) < 3 {
		n, _, err := fx.client.ReadFrom(fx.buf)
		if err != nil {
			t.Fatalf("want 3 answers, have %v: %v", got, err)
		}
		got[string(fx.buf[:n])] = true
	}
	if got["OPTIONS stale"] || !got["OPTIONS old-unbounded"] || !got["SIP/2.0 200 old-response"] || !got["OPTIONS fresh"] {
		t.Fatalf("want every frame but the stale request handled, have %v", got)
	}
	if s, _ := fx.g.Stale(); s != 1 {
		t.Fatalf("stale drops: want 1, have %d", s)
	}
}

// QueueAge is the wait of the oldest frame still queued, measured, whatever
// each frame costs.
func TestQueueAge(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, GroupOptions{Initial: 1, Command: testCommand(testworker.Echo, 0)})
	testkit.WaitFor(t, patience, "a ready worker", func() bool { return len(fx.g.Routable()) == 1 })
	w := fx.g.Workers()[0]
	resume := testkit.StopProcess(t, w.Pid)
	base := time.Now().UnixNano()
	frame := make([]byte, wire.MsgHeaderLen, wire.MsgHeaderLen+8)
	wire.PutMsgHeader(frame, 0, fx.client.LocalAddr().(*net.UDPAddr).AddrPort(), base)
	frame = append(frame, "OPTIONS"...)
	for i := range 3 {
		if _, err := w.SendSeq(frame, base+int64(i)*int64(time.Second)); err != nil {
			t.Fatal(err)
		}
	}
	if age := w.QueueAge(base + int64(5*time.Second)); age != 5*time.Second {
		t.Fatalf("want the oldest of 3 queued frames 5 s old, have %v", age)
	}
	resume()
	testkit.WaitFor(t, patience, "the queue empty", func() bool { return w.Queue() == 0 })
	if age := w.QueueAge(base + int64(5*time.Second)); age != 0 {
		t.Fatalf("an empty queue: want age 0, have %v", age)
	}
}

func TestFrameCost(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		busy    int64
		handled uint64
		last    int64
		want    int64
	}{
		{"busy time per frame", 30_000_000, 3, 0, 10_000_000},
		{"idle keeps the last cost", 0, 0, 7_000, 7_000},
		{"only echoes handled: idle", 0, 2, 7_000, 7_000},
		{"stuck on one frame: at least its time so far", 1_000_000_000, 0, 10_000_000, 1_000_000_000},
		{"stuck, but cost more before", 5_000_000, 0, 10_000_000, 10_000_000},
		{"fast frames replace a slow past", 3_000, 100, 10_000_000, 30},
	} {
		if have := frameCost(c.busy, c.handled, c.last); have != c.want {
			t.Errorf("%s: want %d, have %d", c.name, c.want, have)
		}
	}
}

// Echoes are handled frames that cost no busy time: they must not make the
// work look cheap.
func TestQueuedFrames(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name            string
		handled, echoes uint64
		want            uint64
	}{
		{"work and echoes", 5, 2, 3},
		{"only echoes", 2, 2, 0},
		{"an echo answered after the sample", 1, 2, 0},
		{"no echo", 4, 0, 4},
	} {
		if have := queuedFrames(c.handled, c.echoes); have != c.want {
			t.Errorf("%s: want %d, have %d", c.name, c.want, have)
		}
	}
	// A lull with a timer's few microseconds of work and two echoes keeps
	// what a frame last cost.
	if have := frameCost(20_000, queuedFrames(2, 2), 40_000_000); have != 40_000_000 {
		t.Errorf("a lull: want the last cost 40ms kept, have %d ns", have)
	}
}

// A worker reports its heap and its GC's CPU time on the stats page, and a
// sample carries them.
func TestWorkerReportsHeapAndGCCPU(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, GroupOptions{Initial: 1, Command: testCommand(testworker.GC, 0)})
	testkit.WaitFor(t, patience, "a ready worker", func() bool { return len(fx.g.Routable()) == 1 })
	w := fx.g.Routable()[0]
	testkit.WaitFor(t, patience, "the heap reported", func() bool { return w.HeapBytes() > 0 })
	for i := range 3 {
		if err := fx.send(w, i); err != nil {
			t.Fatal(err)
		}
	}
	if got := fx.receive(3, patience); len(got) != 3 {
		t.Fatalf("want 3 replies, have %d", len(got))
	}
	testkit.WaitFor(t, patience, "the GC's CPU time reported", func() bool { return w.GCCPUSeconds() > 0 })
	_, _, ws := fx.g.Sample(time.Now())
	if len(ws) != 1 || ws[0].Heap == 0 || ws[0].GCCPU <= 0 {
		t.Fatalf("want a sample with heap and GC CPU time, have %+v", ws)
	}
}

// The front door and the samplers hold workers from snapshots of the
// routable list, which outlive a worker's exit: reading an exited worker's
// queue and counters must give its last values, not fault on a page
// unmapped under the reader.
func TestExitedWorkerStillReadable(t *testing.T) {
	t.Parallel()
	fx := newFixture(t, GroupOptions{Initial: 1, Command: testCommand(testworker.Echo, 0)})
	testkit.WaitFor(t, patience, "a ready worker", func() bool { return len(fx.g.Routable()) == 1 })
	w := fx.g.Routable()[0]
	if err := w.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-w.Done()
	_ = w.Queue()
	_ = w.QueueDelay()
	_ = w.Handled()
	_ = w.Sessions()
	if _, _, ws := fx.g.Sample(time.Now()); len(ws) > 1 {
		t.Errorf("want at most the replacement sampled, have %+v", ws)
	}
}

// A UDP or TCP worker runs its loop on one P unless the environment says
// otherwise; a timer worker keeps the runtime's default.
func TestSIPWorkersRunOnOneProc(t *testing.T) {
	t.Parallel()
	if _, ok := os.LookupEnv("GOMAXPROCS"); ok {
		t.Skip("GOMAXPROCS is set for the test, and so for its workers")
	}
	procs := func(kind Kind, env ...string) string {
		cmd := testCommand(testworker.Procs, 0)
		cmd.Env = append(cmd.Env, env...)
		fx := newFixture(t, GroupOptions{Name: string(kind) + "0", Kind: kind, Initial: 1, Command: cmd})
		testkit.WaitFor(t, patience, "a ready worker", func() bool { return len(fx.g.Routable()) == 1 })
		if err := fx.send(fx.g.Pick(), 0); err != nil {
			t.Fatal(err)
		}
		fx.client.SetReadDeadline(time.Now().Add(patience))
		n, _, err := fx.client.ReadFrom(fx.buf)
		if err != nil {
			t.Fatal(err)
		}
		return string(fx.buf[:n])
	}
	if got := procs(KindUDP); got != "procs=1" {
		t.Errorf("UDP worker: want procs=1, have %s", got)
	}
	if got := procs(KindUDP, "GOMAXPROCS=2"); got != "procs=2" {
		t.Errorf("UDP worker with GOMAXPROCS=2 set: want procs=2, have %s", got)
	}
	if got := procs(KindTCP); got != "procs=1" {
		t.Errorf("TCP worker: want procs=1, have %s", got)
	}
	want := fmt.Sprintf("procs=%d", runtime.GOMAXPROCS(0)) // the same default as this process
	if got := procs(KindTimer); got != want {
		t.Errorf("timer worker: want %s, the runtime's default, have %s", want, got)
	}
}
