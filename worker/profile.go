package worker

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"runtime/pprof"
	"time"

	"github.com/sipvisor/sipvisor/internal/wire"
	"golang.org/x/sys/unix"
)

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
		if status != wire.ProfileOK {
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
	if err := wire.CheckProfile(name, seconds); err != nil {
		return wire.ProfileFailed, err
	}
	if name != wire.CPUProfile {
		if err := pprof.Lookup(name).WriteTo(buf, 0); err != nil {
			return wire.ProfileFailed, err
		}
		return wire.ProfileOK, nil
	}
	if err := pprof.StartCPUProfile(buf); err != nil {
		return wire.ProfileBusy, err
	}
	defer pprof.StopCPUProfile()
	end := time.NewTimer(time.Duration(seconds) * time.Second)
	defer end.Stop()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-end.C:
			return wire.ProfileOK, nil
		case <-tick.C:
			if readerGone(out) {
				return wire.ProfileFailed, errors.New("the supervisor stopped waiting")
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
