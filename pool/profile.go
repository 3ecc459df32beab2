package pool

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/sipvisor/sipvisor/internal/rawio"
	"github.com/sipvisor/sipvisor/internal/wire"
)

// Errors of Worker.Profile, besides those of wire.CheckProfile.
var (
	// ErrProfileBusy: the worker is taking a CPU profile already; the
	// runtime takes one at a time.
	ErrProfileBusy = errors.New("CPU profile in progress")
	// ErrWorkerGone: the worker exited, or closed the pipe, before it sent
	// the profile.
	ErrWorkerGone = errors.New("worker gone before sending its profile")
	// ErrProfileTimeout: the worker did not answer before the deadline.
	ErrProfileTimeout = errors.New("no profile in time")
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

// Profile asks the worker for the profile name (one of wire.ProfileNames);
// seconds is the CPU profile's length, ignored for the others. ctx bounds
// the wait for the profile to start arriving: the request is a data frame,
// so it waits behind the work queued to the worker, and a CPU profile takes
// its seconds on top.
//
// The worker writes the profile to a pipe from a goroutine of its own, so
// its loop goes on handling messages meanwhile.
func (w *Worker) Profile(ctx context.Context, name string, seconds int) (*ProfileData, error) {
	if err := wire.CheckProfile(name, seconds); err != nil {
		return nil, err
	}
	release := func() {}
	if name == wire.CPUProfile {
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
	frame := []byte{wire.FrameProfile, 0, 0}
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
	if err == nil && status == wire.ProfileOK {
		rd.SetReadDeadline(time.Now().Add(profileBodyWait))
		return &ProfileData{Size: size, w: w, f: rd, left: size, release: release}, nil
	}
	rd.Close()
	release()
	switch {
	case err == nil && status == wire.ProfileBusy:
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
	if b[0] != wire.ProfileOK {
		m, err := io.ReadAll(io.LimitReader(r, wire.MaxProfileErr))
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
		// rawio's sendmsg: through the scheduler's hooks, the first call
		// after the supervisor was idle woke the runtime's monitor thread,
		// once a connection.
		for {
			e := rawio.SendFD(w.p.dataFD, frame, int(fd))
			if e != rawio.EINTR {
				if e != 0 {
					sendErr = e
				}
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
	case rawio.EAGAIN:
		return ErrQueueFull
	}
	return sendErr
}
