package pool

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/internal/testkit/testworker"
	"github.com/sipvisor/sipvisor/internal/wire"
)

// pipes counts the pipes process pid ("self" for this one) holds open.
func pipes(pid string) int {
	ents, _ := os.ReadDir("/proc/" + pid + "/fd")
	n := 0
	for _, e := range ents {
		if l, err := os.Readlink("/proc/" + pid + "/fd/" + e.Name()); err == nil && strings.HasPrefix(l, "pipe:") {
			n++
		}
	}
	return n
}

// readyWorker starts a group of one worker of the test handler in mode
// with a per-message cost, and returns it once ready.
func readyWorker(t *testing.T, mode testworker.Mode, cost time.Duration) (*fixture, *Worker) {
	t.Helper()
	fx := newFixture(t, GroupOptions{Initial: 1, Command: testCommand(mode, cost)})
	testkit.WaitFor(t, patience, "a ready worker", func() bool { return len(fx.g.Routable()) == 1 })
	return fx, fx.g.Routable()[0]
}

// gunzip checks that b is what pprof writes, gzip-compressed data, and
// returns it decompressed.
func gunzip(t *testing.T, b []byte) []byte {
	t.Helper()
	if len(b) < 2 || b[0] != 0x1f || b[1] != 0x8b {
		t.Fatalf("want gzip data, have %d bytes starting %q", len(b), b[:min(len(b), 8)])
	}
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(zr)
	if err != nil {
		t.Fatalf("decompress: %v", err)
	}
	if len(raw) == 0 {
		t.Fatal("empty profile")
	}
	return raw
}

func readProfile(t *testing.T, p *ProfileData) []byte {
	t.Helper()
	defer p.Close()
	b, err := io.ReadAll(p)
	if err != nil {
		t.Fatal(err)
	}
	if int64(len(b)) != p.Size {
		t.Fatalf("want %d bytes, have %d", p.Size, len(b))
	}
	return b
}

// Every profile but the CPU one comes back as pprof data, and neither the
// supervisor nor the worker keeps a descriptor of the pipe afterwards.
func TestProfileFromWorker(t *testing.T) {
	_, w := readyWorker(t, testworker.Echo, 0)
	pid := strconv.Itoa(w.Pid)
	ours, theirs := pipes("self"), pipes(pid)
	for _, name := range wire.ProfileNames {
		if name == wire.CPUProfile {
			continue
		}
		ctx, cancel := context.WithTimeout(t.Context(), patience)
		p, err := w.Profile(ctx, name, 0)
		cancel()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		gunzip(t, readProfile(t, p))
	}
	if n := pipes("self"); n != ours {
		t.Errorf("supervisor side: want %d pipes open, have %d", ours, n)
	}
	testkit.WaitFor(t, patience, "the worker to close its pipes", func() bool { return pipes(pid) == theirs })
}

// A second CPU profile while one is being taken is refused at once, by the
// supervisor side: the worker is stopped meanwhile, so an answer that
// waited for it could not come. The first one completes.
func TestProfileCPUOneAtATime(t *testing.T) {
	t.Parallel()
	_, w := readyWorker(t, testworker.Echo, 0)
	resume := testkit.StopProcess(t, w.Pid)
	type result struct {
		b   []byte
		err error
	}
	first := make(chan result, 1)
	go func() {
		p, err := w.Profile(t.Context(), wire.CPUProfile, 1)
		if err != nil {
			first <- result{err: err}
			return
		}
		defer p.Close()
		b, err := io.ReadAll(p)
		first <- result{b, err}
	}()
	testkit.WaitFor(t, patience, "the first CPU profile to start", w.cpuProfiling.Load)
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	defer cancel()
	_, err := w.Profile(ctx, wire.CPUProfile, 1)
	if !errors.Is(err, ErrProfileBusy) {
		t.Fatalf("second CPU profile, the worker stopped: want %v at once, have %v", ErrProfileBusy, err)
	}
	resume()
	r := <-first
	if r.err != nil {
		t.Fatalf("first CPU profile: %v", r.err)
	}
	gunzip(t, r.b)
	// The reader is closed after the result is handed over.
	testkit.WaitFor(t, patience, "the worker to count as no longer CPU-profiled", func() bool { return !w.cpuProfiling.Load() })
}

// The runtime takes one CPU profile at a time, and the worker says so when
// asked twice (past the supervisor's own check).
func TestProfileWorkerRefusesSecondCPUProfile(t *testing.T) {
	t.Parallel()
	_, w := readyWorker(t, testworker.Echo, 0)
	var reads []*os.File
	for range 2 {
		rd, wr, err := os.Pipe()
		if err != nil {
			t.Fatal(err)
		}
		defer rd.Close()
		if err := w.sendFile(append([]byte{wire.FrameProfile, 0, 1}, wire.CPUProfile...), wr); err != nil {
			t.Fatal(err)
		}
		wr.Close()
		reads = append(reads, rd)
	}
	statuses := map[byte]int{}
	for _, rd := range reads {
		rd.SetReadDeadline(time.Now().Add(patience))
		status, _, msg, err := readProfileHeader(rd)
		if err != nil {
			t.Fatal(err)
		}
		statuses[status]++
		if status == wire.ProfileBusy && !strings.Contains(msg, "in use") {
			t.Errorf("busy answer: want the runtime's reason, have %q", msg)
		}
	}
	if statuses[wire.ProfileOK] != 1 || statuses[wire.ProfileBusy] != 1 {
		t.Fatalf("want one profile and one refusal, have %v", statuses)
	}
}

// A worker that exits in the middle of a CPU profile ends the wait with an
// error that says so, and leaves no pipe open in the supervisor.
func TestProfileWorkerExitsMidProfile(t *testing.T) {
	_, w := readyWorker(t, testworker.Echo, 0)
	ours := pipes("self")
	handled := w.Handled()
	errc := make(chan error, 1)
	go func() {
		p, err := w.Profile(t.Context(), wire.CPUProfile, 30)
		if err == nil {
			p.Close()
		}
		errc <- err
	}()
	testkit.WaitFor(t, patience, "the worker to take the profile frame", func() bool { return w.Handled() > handled })
	w.Signal(syscall.SIGKILL)
	select {
	case err := <-errc:
		if !errors.Is(err, ErrWorkerGone) || !strings.Contains(err.Error(), "exited") {
			t.Fatalf("want %v saying the worker exited, have %v", ErrWorkerGone, err)
		}
	case <-time.After(patience):
		t.Fatal("the wait for the profile did not end when the worker died")
	}
	// Waited for rather than read at once: the group forks a replacement
	// meanwhile, and a fork holds a pipe of its own for a moment.
	testkit.WaitFor(t, patience, "no profile pipe left open", func() bool { return pipes("self") == ours })
}

// A worker stuck on a message answers no profile: the wait ends at the
// caller's deadline, and once the worker gets to the frame it finds nobody
// reading, and closes its end too.
func TestProfileTimeoutBehindStuckWorker(t *testing.T) {
	fx, w := readyWorker(t, testworker.Hold, 0)
	defer w.Signal(testworker.ReleaseSignal)
	pid := strconv.Itoa(w.Pid)
	ours, theirs := pipes("self"), pipes(pid)
	if err := fx.send(w, 1); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 200*time.Millisecond)
	defer cancel()
	_, err := w.Profile(ctx, "heap", 0)
	if !errors.Is(err, ErrProfileTimeout) || !strings.Contains(err.Error(), "(2 frames in its queue)") {
		t.Fatalf("want %v naming the queue, have %v", ErrProfileTimeout, err)
	}
	if n := pipes("self"); n != ours {
		t.Errorf("supervisor side: want %d pipes open, have %d", ours, n)
	}
	if err := w.Signal(testworker.ReleaseSignal); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, patience, "the worker to handle the message and the profile frame", func() bool { return w.Queue() == 0 })
	testkit.WaitFor(t, patience, "the worker to close its pipe", func() bool { return pipes(pid) == theirs })
	if got := fx.receive(1, patience); !got[1] {
		t.Error("the message the worker was stuck on was not answered")
	}
}

func TestProfileRefusesBadRequests(t *testing.T) {
	t.Parallel()
	_, w := readyWorker(t, testworker.Echo, 0)
	sent := w.sent.Load()
	for _, tt := range []struct {
		name    string
		seconds int
		want    error
		msg     string
	}{
		{"cpu", 1, wire.ErrUnknownProfile, `the CPU profile is "profile"`},
		{"trace", 0, wire.ErrUnknownProfile, "want one of heap, allocs"},
		{wire.CPUProfile, 0, wire.ErrProfileSeconds, "want 1 to 120"},
		{wire.CPUProfile, wire.MaxProfileSeconds + 1, wire.ErrProfileSeconds, "121 seconds"},
	} {
		_, err := w.Profile(t.Context(), tt.name, tt.seconds)
		if !errors.Is(err, tt.want) || !strings.Contains(err.Error(), tt.msg) {
			t.Errorf("%s %d: want %v with %q, have %v", tt.name, tt.seconds, tt.want, tt.msg, err)
		}
	}
	if w.sent.Load() != sent {
		t.Error("a refused request reached the worker")
	}
	if w.cpuProfiling.Load() {
		t.Error("a refused request left the worker marked as being CPU-profiled")
	}
}

// A pipe that ends before the length the worker announced is an error, not
// the end of a profile: the supervisor must not pass on half a profile as
// a whole one.
func TestProfileDataShort(t *testing.T) {
	t.Parallel()
	rd, wr, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	wr.Write([]byte{0x1f, 0x8b, 1, 2, 3})
	wr.Close()
	released := false
	p := &ProfileData{Size: 10, left: 10, f: rd, w: &Worker{ID: 2, Pid: 99}, release: func() { released = true }}
	b, err := io.ReadAll(p)
	if !errors.Is(err, io.ErrUnexpectedEOF) || len(b) != 5 || !strings.Contains(err.Error(), "5 bytes short") {
		t.Fatalf("want 5 bytes and %v saying 5 are missing, have %d and %v", io.ErrUnexpectedEOF, len(b), err)
	}
	p.Close()
	if !released {
		t.Error("Close did not release the worker's CPU profile")
	}
}
