package pool

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// ProfileNames are the profiles a worker can be asked for, named as
// net/http/pprof names them: the runtime's profiles, and CPUProfile.
var ProfileNames = []string{"heap", "allocs", "goroutine", CPUProfile, "block", "mutex", "threadcreate"}

// CPUProfile is the CPU profile's name; it is taken over a number of seconds.
const CPUProfile = "profile"

// Bounds of a CPU profile's length. A profile runs beside the worker's work,
// so a long one costs little, but it holds the process's one CPU profiler.
const (
	DefaultProfileSeconds = 10
	MaxProfileSeconds     = 120
)

// Errors of Worker.Profile.
var (
	ErrUnknownProfile = errors.New("unknown profile")
	ErrProfileSeconds = errors.New("bad CPU profile length")
	// ErrProfileBusy: the worker is taking a CPU profile already; the
	// runtime takes one at a time.
	ErrProfileBusy = errors.New("CPU profile in progress")
	// ErrWorkerGone: the worker exited, or closed the pipe, before it sent
	// the profile.
	ErrWorkerGone = errors.New("worker gone before sending its profile")
	// ErrProfileTimeout: the worker did not answer before the deadline.
	ErrProfileTimeout = errors.New("no profile in time")
)

// The profile pipe carries one status byte, then for profileOK the
// profile's length (8 bytes) and the profile, else an error message. The
// worker builds the whole profile before it writes anything, so that the
// length goes first: a pipe that ends short is then a failure the
// supervisor can tell from the end of a profile.
const (
	profileOK     = 0
	profileBusy   = 1
	profileFailed = 2
	maxProfileErr = 4 << 10
)

// profileBodyWait bounds the transfer of a profile once its length has
// arrived: the worker writes it at once, so only a reader that stops
// reading takes long.
const profileBodyWait = 30 * time.Second

// profileError is a message that reads well on its own, carrying one of
// the errors above for errors.Is.
type profileError struct {
	msg  string
	kind error
}

func (e *profileError) Error() string { return e.msg }
func (e *profileError) Unwrap() error { return e.kind }

func profileErrorf(kind error, format string, args ...any) error {
	return &profileError{fmt.Sprintf(format, args...), kind}
}

// CheckProfile says why the profile name of seconds cannot be taken, or
// returns nil; seconds counts for CPUProfile only.
func CheckProfile(name string, seconds int) error {
	if !slices.Contains(ProfileNames, name) {
		hint := ""
		if strings.EqualFold(name, "cpu") {
			hint = fmt.Sprintf(" (the CPU profile is %q)", CPUProfile)
		}
		return profileErrorf(ErrUnknownProfile, "unknown profile %q: want one of %s%s", name, strings.Join(ProfileNames, ", "), hint)
	}
	if name == CPUProfile && (seconds < 1 || seconds > MaxProfileSeconds) {
		return profileErrorf(ErrProfileSeconds, "a CPU profile of %d seconds: want 1 to %d", seconds, MaxProfileSeconds)
	}
	return nil
}

// ProfileData is a profile on its way from a worker: Size bytes of pprof
// data (gzip-compressed protocol buffers). Read returns an error, not EOF,
// if the worker's pipe ends short. Close it.
type ProfileData struct {
	Size    int64
	w       *Worker
	f       *os.File
	left    int64
	release func()
}

func (p *ProfileData) Read(b []byte) (int, error) {
	if p.left <= 0 {
		return 0, io.EOF
	}
	if int64(len(b)) > p.left {
		b = b[:p.left]
	}
	n, err := p.f.Read(b)
	p.left -= int64(n)
	if err == io.EOF && p.left > 0 {
		err = profileErrorf(io.ErrUnexpectedEOF, "worker %d (pid %d) ended its profile %d bytes short", p.w.ID, p.w.Pid, p.left)
	}
	return n, err
}

// Close closes the supervisor's end of the pipe; a worker still writing
// then gets EPIPE and closes its own.
func (p *ProfileData) Close() error {
	p.release()
	return p.f.Close()
}

// CPUProfiling reports whether a CPU profile of the worker is being taken
// through Profile.
func (w *Worker) CPUProfiling() bool { return w.cpuProfiling.Load() }

// Profile asks the worker for the profile name (one of ProfileNames);
// seconds is the CPU profile's length, ignored for the others. ctx bounds
// the wait for the profile to start arriving: the request is a data frame,
// so it waits behind the work queued to the worker, and a CPU profile takes
// its seconds on top.
//
// The worker writes the profile to a pipe from a goroutine of its own, so
// its loop goes on handling messages meanwhile.
func (w *Worker) Profile(ctx context.Context, name string, seconds int) (*ProfileData, error) {
	if err := CheckProfile(name, seconds); err != nil {
		return nil, err
	}
	release := func() {}
	if name == CPUProfile {
		// Answered here rather than by the worker, so that a second request
		// is refused at once, not after the queue in front of it.
		if !w.cpuProfiling.CompareAndSwap(false, true) {
			return nil, profileErrorf(ErrProfileBusy, "worker %d is being CPU-profiled already: one CPU profile at a time per process", w.ID)
		}
		var once sync.Once
		release = func() { once.Do(func() { w.cpuProfiling.Store(false) }) }
	}
	rd, wr, err := os.Pipe()
	if err != nil {
		release()
		return nil, fmt.Errorf("profile pipe: %w", err)
	}
	frame := []byte{FrameProfile, 0, 0}
	binary.BigEndian.PutUint16(frame[1:3], uint16(seconds))
	frame = append(frame, name...)
	err = w.sendFile(frame, wr)
	// The frame in flight holds the write end now: once the worker has
	// closed its copy, or exited without reading the frame, the read end
	// sees EOF.
	wr.Close()
	if err != nil {
		rd.Close()
		release()
		return nil, err
	}

	start := time.Now()
	if d, ok := ctx.Deadline(); ok {
		rd.SetReadDeadline(d)
	}
	stop := context.AfterFunc(ctx, func() { rd.SetReadDeadline(time.Unix(1, 0)) })
	status, size, msg, err := readProfileHeader(rd)
	if !stop() {
		// ctx ended as the header came: its AfterFunc may yet cut the
		// body's deadline short, so the profile is as good as late.
		err = os.ErrDeadlineExceeded
	}
	if err == nil && status == profileOK {
		rd.SetReadDeadline(time.Now().Add(profileBodyWait))
		return &ProfileData{Size: size, w: w, f: rd, left: size, release: release}, nil
	}
	rd.Close()
	release()
	switch {
	case err == nil && status == profileBusy:
		return nil, profileErrorf(ErrProfileBusy, "worker %d (pid %d): %s: one CPU profile at a time per process", w.ID, w.Pid, msg)
	case err == nil:
		return nil, fmt.Errorf("worker %d (pid %d): %s", w.ID, w.Pid, msg)
	case ctx.Err() == context.Canceled:
		return nil, ctx.Err()
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, profileErrorf(ErrProfileTimeout, "worker %d (pid %d) sent no profile within %v: it may be stuck on a message (%d frames in its queue)",
			w.ID, w.Pid, time.Since(start).Round(time.Millisecond), w.Queue())
	}
	// End of file: the worker is gone, or going. Its exit follows its
	// descriptors' closing closely; say which it was if it comes.
	select {
	case <-w.done:
		return nil, profileErrorf(ErrWorkerGone, "worker %d (pid %d) exited (%s) before sending its profile", w.ID, w.Pid, w.ExitReason())
	case <-time.After(time.Second):
		return nil, profileErrorf(ErrWorkerGone, "worker %d (pid %d) closed the profile pipe without sending its profile (%v)", w.ID, w.Pid, err)
	}
}

func readProfileHeader(r io.Reader) (status byte, size int64, msg string, err error) {
	var b [9]byte
	if _, err := io.ReadFull(r, b[:1]); err != nil {
		return 0, 0, "", err
	}
	if b[0] != profileOK {
		m, err := io.ReadAll(io.LimitReader(r, maxProfileErr))
		return b[0], 0, string(m), err
	}
	if _, err := io.ReadFull(r, b[1:9]); err != nil {
		return 0, 0, "", err
	}
	return b[0], int64(binary.BigEndian.Uint64(b[1:9])), "", nil
}

// sendFile hands the worker a frame with f's descriptor (SCM_RIGHTS). It is
// not refused by QueueCapacity, only by a full channel.
func (w *Worker) sendFile(frame []byte, f syscall.Conn) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	w.sendMu.RLock()
	defer w.sendMu.RUnlock()
	if w.ended {
		return ErrEnded
	}
	var sendErr error
	// Control, not Fd: Fd would switch the file to blocking mode.
	if err := rc.Control(func(fd uintptr) {
		for {
			sendErr = unix.Sendmsg(w.p.dataFD, frame, unix.UnixRights(int(fd)), nil, 0)
			if sendErr != unix.EINTR {
				return
			}
		}
	}); err != nil {
		return err
	}
	switch sendErr {
	case nil:
		w.count(time.Now().UnixNano())
		return nil
	case unix.EAGAIN:
		return ErrQueueFull
	}
	return sendErr
}

// handleProfile takes the profile a 'P' frame asks for and writes it to
// the descriptor the frame brought, from a goroutine of its own: a CPU
// profile lasts seconds, and the loop must go on meanwhile.
func handleProfile(b []byte, fd int) {
	if len(b) < 3 {
		unix.Close(fd)
		return
	}
	seconds := int(binary.BigEndian.Uint16(b[1:3]))
	name := string(b[3:])
	// The supervisor made the pipe non-blocking; set it anyway so that the
	// writes below go through the network poller and never hold a thread.
	unix.SetNonblock(fd, true)
	out := os.NewFile(uintptr(fd), "profile")
	go func() {
		defer out.Close()
		var buf bytes.Buffer
		status, err := takeProfile(&buf, out, name, seconds)
		var hdr [9]byte
		hdr[0] = status
		if status != profileOK {
			out.Write(append(hdr[:1], err.Error()...))
			return
		}
		binary.BigEndian.PutUint64(hdr[1:], uint64(buf.Len()))
		if _, err := out.Write(hdr[:]); err == nil {
			out.Write(buf.Bytes())
		}
	}()
}

// takeProfile writes the profile name to buf; out is the pipe it is for,
// watched so that a CPU profile nobody waits for any more ends early.
func takeProfile(buf *bytes.Buffer, out *os.File, name string, seconds int) (byte, error) {
	if err := CheckProfile(name, seconds); err != nil {
		return profileFailed, err
	}
	if name != CPUProfile {
		if err := pprof.Lookup(name).WriteTo(buf, 0); err != nil {
			return profileFailed, err
		}
		return profileOK, nil
	}
	if err := pprof.StartCPUProfile(buf); err != nil {
		return profileBusy, err
	}
	defer pprof.StopCPUProfile()
	end := time.NewTimer(time.Duration(seconds) * time.Second)
	defer end.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-end.C:
			return profileOK, nil
		case <-tick.C:
			if readerGone(out) {
				return profileFailed, errors.New("the supervisor stopped waiting")
			}
		}
	}
}

// readerGone reports whether the pipe's read end is closed: the supervisor
// gave up (its client left, or its deadline passed), and holding the
// process's one CPU profiler any longer would only refuse the next request.
func readerGone(f *os.File) bool {
	rc, err := f.SyscallConn()
	if err != nil {
		return true
	}
	gone := false
	rc.Control(func(fd uintptr) {
		p := []unix.PollFd{{Fd: int32(fd)}}
		if n, err := unix.Poll(p, 0); err == nil && n > 0 {
			gone = p[0].Revents&(unix.POLLERR|unix.POLLHUP) != 0
		}
	})
	return gone
}
