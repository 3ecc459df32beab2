package pool

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// Command is how a worker process is started: normally the supervisor's own
// executable with the argument "worker"; tests use their own binary.
type Command struct {
	Path string
	Args []string
	Env  []string
}

// spawned is what start hands back: the process and the supervisor's ends.
type spawned struct {
	cmd    *exec.Cmd
	ctl    *net.UnixConn
	dataFD int
	data   *os.File
	stats  *statsPage
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

// start forks and execs one worker. The child gets its descriptors at fixed
// numbers (see the package doc) and dies with the supervisor (Pdeathsig).
func start(c Command, group string, id int, configPath string, memLimit int64, sockets []*os.File, socketNames []string) (*spawned, error) {
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
	statsFile, stats, err := newStatsFile(fmt.Sprintf("sipvisor-%s-%d", group, id))
	if err != nil {
		ctlOurs.Close()
		dataOurs.Close()
		return nil, err
	}
	defer statsFile.Close()

	cleanup := func() {
		ctlOurs.Close()
		dataOurs.Close()
		stats.unmap()
	}
	dataFD := int(dataOurs.Fd())
	_ = unix.SetsockoptInt(dataFD, unix.SOL_SOCKET, unix.SO_SNDBUF, sndBuf)
	if err := unix.SetNonblock(dataFD, true); err != nil {
		cleanup()
		return nil, fmt.Errorf("data channel: %w", err)
	}

	cmd := exec.Command(c.Path, c.Args...)
	env := append(os.Environ(), c.Env...)
	env = append(env,
		EnvCookie+"="+cookie,
		EnvGroup+"="+group,
		EnvWorkerID+"="+strconv.Itoa(id),
		EnvSockets+"="+strings.Join(socketNames, ","),
		EnvConfig+"="+configPath,
	)
	if memLimit > 0 {
		env = append(env, "GOMEMLIMIT="+strconv.FormatInt(memLimit, 10))
	}
	cmd.Env = env
	cmd.Stdout = os.Stderr
	cmd.Stderr = os.Stderr
	cmd.ExtraFiles = append([]*os.File{ctlTheirs, dataTheirs, statsFile}, sockets...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		cleanup()
		return nil, fmt.Errorf("start worker: %w", err)
	}
	fc, err := net.FileConn(ctlOurs)
	ctlOurs.Close()
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		dataOurs.Close()
		stats.unmap()
		return nil, fmt.Errorf("control channel: %w", err)
	}
	return &spawned{cmd: cmd, ctl: fc.(*net.UnixConn), dataFD: dataFD, data: dataOurs, stats: stats}, nil
}
