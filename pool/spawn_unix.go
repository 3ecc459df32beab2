package pool

import (
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"syscall"

	"github.com/sipvisor/sipvisor/internal/wire"
	"golang.org/x/sys/unix"
)

// WorkerGOGC is the workers' GOGC unless the supervisor's environment
// sets one: how far, in percent of what the last collection left live, a
// worker's heap grows before it collects again. The memory limit
// (GOMEMLIMIT, from worker_memory_limit) bounds the heap whatever this
// says, the collector working harder as the heap nears it. Chosen by
// bench/gc.sh (the collector's share of the workers' CPU at 1,000 calls/s)
// and bench/soak.sh (a worker's heap at 3,200 calls/s for 5 minutes), at 4
// allocations a call (commit dd121cb): GOGC 150 0.28-0.30 % of CPU, 200
// 0.21 %; the heap's peak 28.9-29.6 MiB at 150, 37.6-39.6 MiB at 200, over
// the 40 MB a worker is to stay under with about 14 MiB held by its calls.
// The heap monitor (suspend_heap_usage_high) counts the garbage too.
// At 10 allocations a call (commit 5feab15) 100 cost 1.6 %, 200 0.8 %, 400
// 0.4 %; at 129, 100 cost 3.8 % and 400 0.9 %.
const WorkerGOGC = 150

// Command is how a worker process is started: normally the supervisor's own
// executable with the argument "worker"; tests use their own binary.
type Command struct {
	Path string
	Args []string
	Env  []string
}

// spawned is what start hands back: the process and the supervisor's ends.
type spawned struct {
	proc   *os.Process
	ctl    *wire.ControlConn
	dataFD int
	data   *os.File
	stats  *wire.StatsPage
}

// wait reaps the process; nil for exit status 0.
func (p *spawned) wait() error {
	st, err := p.proc.Wait()
	if err != nil {
		return err
	}
	if !st.Success() {
		return fmt.Errorf("worker %s", st)
	}
	return nil
}

// sndBuf is the data channel's send buffer: the worker's queue. Its size bounds
// how much the front door can hand a worker before frames are refused.
const sndBuf = 4 << 20

func socketpair(kind int) (ours, theirs *os.File, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, kind|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, fmt.Errorf("socketpair: %w", err)
	}
	return os.NewFile(uintptr(fds[0]), "sup"), os.NewFile(uintptr(fds[1]), "worker"), nil
}

// rawFD is f's descriptor without os.File.Fd's side effect: Fd switches the
// open file description to blocking mode, which it shares with the
// supervisor's own socket, whose reads would then ignore deadlines.
func rawFD(f *os.File) (int, error) {
	rc, err := f.SyscallConn()
	if err != nil {
		return -1, err
	}
	var fd int
	if err := rc.Control(func(x uintptr) { fd = int(x) }); err != nil {
		return -1, err
	}
	return fd, nil
}

// start forks and execs one worker. The child gets its descriptors at fixed
// numbers (see package wire) and dies with the supervisor (Pdeathsig).
// It uses syscall.StartProcess, which takes raw descriptors, rather than
// os/exec, which calls Fd on every file it passes (see rawFD).
func start(c Command, group string, id int, configPath string, memLimit int64, tickets []byte, sockets []*os.File, socketNames []string) (*spawned, error) {
	ctlOurs, ctlTheirs, err := socketpair(unix.SOCK_SEQPACKET)
	if err != nil {
		return nil, err
	}
	defer ctlTheirs.Close()
	dataOurs, dataTheirs, err := socketpair(unix.SOCK_SEQPACKET)
	if err != nil {
		ctlOurs.Close()
		return nil, err
	}
	defer dataTheirs.Close()
	statsFile, stats, err := wire.NewStatsFile(fmt.Sprintf("sipvisor-%s-%d", group, id))
	if err != nil {
		ctlOurs.Close()
		dataOurs.Close()
		return nil, err
	}
	defer statsFile.Close()
	if len(tickets) == wire.TicketKeysLen {
		stats.WriteAt(wire.OffTicketKeys, tickets)
	}

	cleanup := func() {
		ctlOurs.Close()
		dataOurs.Close()
		stats.Unmap()
	}
	dataFD := int(dataOurs.Fd())
	_ = unix.SetsockoptInt(dataFD, unix.SOL_SOCKET, unix.SO_SNDBUF, sndBuf)
	if err := unix.SetNonblock(dataFD, true); err != nil {
		cleanup()
		return nil, fmt.Errorf("data channel: %w", err)
	}

	env := append(os.Environ(), c.Env...)
	env = append(env,
		wire.EnvCookie+"="+wire.Cookie,
		wire.EnvGroup+"="+group,
		wire.EnvWorkerID+"="+strconv.Itoa(id),
		wire.EnvSockets+"="+strings.Join(socketNames, ","),
		wire.EnvConfig+"="+configPath,
	)
	if memLimit > 0 {
		env = append(env, "GOMEMLIMIT="+strconv.FormatInt(memLimit, 10))
	}
	if !setsGOGC(env) {
		env = append(env, "GOGC="+strconv.Itoa(WorkerGOGC))
	}
	// stdout goes to stderr too: a worker's output is log output.
	fds := []uintptr{0, 2, 2}
	for _, f := range append([]*os.File{ctlTheirs, dataTheirs, statsFile}, sockets...) {
		fd, err := rawFD(f)
		if err != nil {
			cleanup()
			return nil, fmt.Errorf("pass descriptor %s: %w", f.Name(), err)
		}
		fds = append(fds, uintptr(fd))
	}
	pid, err := syscall.ForkExec(c.Path, append([]string{c.Path}, c.Args...), &syscall.ProcAttr{
		Env:   env,
		Files: fds,
		Sys:   &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: false},
	})
	if err != nil {
		cleanup()
		return nil, fmt.Errorf("start worker %s: %w", c.Path, err)
	}
	proc, err := os.FindProcess(pid)
	if err != nil {
		cleanup()
		return nil, err
	}
	fc, err := net.FileConn(ctlOurs)
	ctlOurs.Close()
	var ctl *wire.ControlConn
	if err == nil {
		if ctl, err = wire.NewControlConn(fc.(*net.UnixConn)); err != nil {
			fc.Close()
		}
	}
	if err != nil {
		proc.Kill()
		proc.Wait()
		dataOurs.Close()
		stats.Unmap()
		return nil, fmt.Errorf("control channel: %w", err)
	}
	return &spawned{proc: proc, ctl: ctl, dataFD: dataFD, data: dataOurs, stats: stats}, nil
}

// setsGOGC reports whether env gives GOGC a value (an empty one is the
// runtime's default, as unset).
func setsGOGC(env []string) bool {
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "GOGC="); ok && v != "" {
			return true
		}
	}
	return false
}
