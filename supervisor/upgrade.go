package supervisor

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sys/unix"

	"github.com/sipvisor/sipvisor/ctl"
	"github.com/sipvisor/sipvisor/frontdoor"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/listeners"
	"github.com/sipvisor/sipvisor/listeners/steer"
	"github.com/sipvisor/sipvisor/pool"
)

// An upgrade hands the node to the binary on disk without closing a socket:
//
//  1. the running supervisor (the old one) starts its own executable, as
//     found on disk now, with its own arguments, passing it every listening
//     socket (SIP and control) as inherited descriptors named in
//     envUpgradeFDs, as cloudflare/tableflip does, and one end of a
//     SOCK_SEQPACKET pair, the link;
//  2. the new one takes the sockets instead of binding, loads its config,
//     starts its workers and, once every group has a ready worker, says so
//     over the link; it reads no socket yet;
//  3. the old one stops reading every socket (its doors, accept loops and
//     control server), makes its ports' kernel program give every datagram
//     to the shared socket, answers "go", and drains as on SIGTERM, but
//     refuses no new session for it: one an old worker still reads (a
//     request pipelined on a connection not yet moved, a datagram its own
//     socket held) is admitted when the worker asks (answerAdmit), and the
//     gate in a direct-reading worker's page has it ask rather than refuse
//     (steering.Inputs.HandedOver);
//  4. the new one reads the sockets from then on. While the old one drains,
//     every datagram the new one's doors hold no affinity for goes over the
//     link to the old one, whose door places it on the old worker that holds
//     its Call-ID (a response for an old branch, an ACK, a CANCEL, a
//     retransmission), or sends it back, and the new door then places it as
//     usual. So exactly one process reads each socket at any time, and a
//     message of an old transaction reaches the old worker however it
//     arrives.
//
// Until step 3 the old one has changed nothing: if the new process exits,
// or is not ready within upgrade_timeout, it is stopped and the old one
// serves on, and the caller is told why with the new process's last lines,
// which reach the old one through a pipe that is the new one's stderr until
// the hand-over.
const (
	envUpgradeFDs = "SIPVISOR_UPGRADE_FDS"
	envGeneration = "SIPVISOR_GENERATION"
)

// Names of the descriptors passed at an upgrade, besides the sockets
// ("sip:" and the configured address, "http:" and http_listen).
const (
	fdLink   = "link"
	fdStderr = "stderr"
)

// Link messages: the first byte says what follows.
const (
	linkReady   = 'R' // new → old: pid, version
	linkGo      = 'G' // old → new: the sockets are yours
	linkForward = 'F' // new → old: a datagram without affinity here
	linkBounce  = 'B' // old → new: a forwarded datagram no old worker holds
	linkPS      = 'P' // old → new: the old side's ctl ps, as JSON
	linkConn    = 'C' // old → new: a TCP connection (its descriptor), remote, bytes read past its last message
	linkConnTLS = 'T' // old → new: a TLS connection, remote, its record layer's state
	linkPass    = 'W' // either way: a response for a branch of a worker of the other side (pid, source, message)
	// linkDone old → new: the old workers are gone, forward no more; new →
	// old, the answer: nothing forwarded follows it.
	linkDone = 'D'
)

// linkDoneWait bounds how long an old side whose workers are gone waits for
// the new side's linkDone (a new binary that does not know it never
// answers) before it closes the link.
const linkDoneWait = 2 * time.Second

// linkTail is how many of the new process's last lines a failed upgrade
// reports.
const linkTail = 20

// inheritance is what a supervisor started by an upgrade takes from the
// one before: the sockets, the link, and the pipe to it that is stderr
// until the hand-over.
type inheritance struct {
	files map[string]*os.File
	link  *net.UnixConn
	out   *switchWriter
	pipe  *os.File
}

// generation counts the supervisors that have served this node since it
// was started: 1 for the first, one more at each upgrade.
func generation() int {
	if n, err := strconv.Atoi(os.Getenv(envGeneration)); err == nil && n > 0 {
		return n
	}
	return 1
}

// takeInheritance takes the descriptors an upgrade passed, nil when this
// process was not started by one. From here the process's own stderr is
// the real one again (where its workers write), and out writes to the old
// supervisor until the hand-over, so that what goes wrong at start is told
// to whoever asked for the upgrade.
func takeInheritance() (*inheritance, error) {
	env, ok := os.LookupEnv(envUpgradeFDs)
	if !ok {
		return nil, nil
	}
	os.Unsetenv(envUpgradeFDs)
	in := &inheritance{files: map[string]*os.File{}}
	for i, name := range strings.Split(env, ",") {
		fd := 3 + i
		// Inherited descriptors come without close-on-exec: a worker must
		// not hold any of them.
		unix.CloseOnExec(fd)
		in.files[name] = os.NewFile(uintptr(fd), name)
	}
	if f := in.files[fdLink]; f != nil {
		delete(in.files, fdLink)
		c, err := net.FileConn(f)
		f.Close()
		if err != nil {
			return nil, fmt.Errorf("upgrade link: %w", err)
		}
		uc, ok := c.(*net.UnixConn)
		if !ok {
			c.Close()
			return nil, errors.New("upgrade link: not a Unix socket")
		}
		in.link = uc
	}
	if f := in.files[fdStderr]; f != nil {
		delete(in.files, fdStderr)
		pipe, err := unix.FcntlInt(2, unix.F_DUPFD_CLOEXEC, 3)
		if err != nil {
			return nil, fmt.Errorf("upgrade: keep the pipe to the old supervisor: %w", err)
		}
		if err := unix.Dup2(int(f.Fd()), 2); err != nil {
			return nil, fmt.Errorf("upgrade: take stderr back: %w", err)
		}
		f.Close()
		in.pipe = os.NewFile(uintptr(pipe), "upgrade-log")
	}
	if in.link == nil || in.pipe == nil {
		return nil, fmt.Errorf("%s names no link or stderr: %q", envUpgradeFDs, env)
	}
	in.out = &switchWriter{w: in.pipe}
	return in, nil
}

// take hands out the inherited socket of name once, nil if none.
func (in *inheritance) take(name string) *os.File {
	if in == nil {
		return nil
	}
	f := in.files[name]
	delete(in.files, name)
	return f
}

// closeRest closes what was passed and not taken: sockets the new config
// no longer has. The old supervisor holds its own until it exits.
func (in *inheritance) closeRest() {
	if in == nil {
		return
	}
	for name, f := range in.files {
		f.Close()
		delete(in.files, name)
	}
}

// genHandler ends every log line with the generation of the supervisor
// that wrote it, so that the lines of two generations that overlap after
// an upgrade are told apart. Last, so that a line reads as before up to it.
type genHandler struct {
	slog.Handler
	gen int
}

// WithGeneration is l with every line ended by generation gen, as the
// supervisor's lines are: a worker's logger.
func WithGeneration(l *slog.Logger, gen int) *slog.Logger {
	return slog.New(genHandler{l.Handler(), gen})
}

func (h genHandler) Handle(ctx context.Context, r slog.Record) error {
	r = r.Clone()
	r.AddAttrs(slog.Int("generation", h.gen))
	return h.Handler.Handle(ctx, r)
}

func (h genHandler) WithAttrs(a []slog.Attr) slog.Handler {
	return genHandler{h.Handler.WithAttrs(a), h.gen}
}

func (h genHandler) WithGroup(name string) slog.Handler {
	return genHandler{h.Handler.WithGroup(name), h.gen}
}

// switchWriter writes to the old supervisor until the hand-over, then to
// stderr.
type switchWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (s *switchWriter) Write(b []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(b)
}

func (s *switchWriter) set(w io.Writer) {
	s.mu.Lock()
	s.w = w
	s.mu.Unlock()
}

// upgradeState is a supervisor's part in upgrades: as the old side, the one
// upgrade under way; as either, the link while both overlap.
type upgradeState struct {
	gen int
	in  *inheritance // set in a supervisor started by an upgrade

	mu      sync.Mutex
	running bool
	handed  bool
	// handOver takes the new process, once ready, to Run, which stops
	// serving and hands the sockets over.
	handOver chan *handover

	// link is the other side while both serve, nil otherwise; old says
	// this side is the old one.
	link atomic.Pointer[upLink]
	old  atomic.Bool
	// oldPS is what the old side last said of its workers.
	oldPS atomic.Pointer[[]ctl.Group]
	// lost counts, on the old side, datagrams it could not send back.
	lost atomic.Uint64

	upgrades *prometheus.CounterVec
}

// handover is a new supervisor ready to take over.
type handover struct {
	link *upLink
	pid  int
	done chan struct{}
}

func (h *handover) Error() string { return "handed over to the new supervisor" }

func (s *Supervisor) initUpgrade(in *inheritance) {
	s.up.gen = generation()
	s.up.in = in
	s.up.handOver = make(chan *handover)
	s.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sipvisor_generation",
		Help: "The generation of the supervisor that serves: 1 when started, one more at each upgrade."},
		func() float64 { return float64(s.up.gen) }))
	s.reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "sipvisor_upgrade_overlap",
		Help: "1 while the previous generation drains its calls beside this one after an upgrade."},
		func() float64 {
			if s.up.link.Load() != nil && !s.up.old.Load() {
				return 1
			}
			return 0
		}))
	s.up.upgrades = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "sipvisor_upgrades_total",
		Help: "Upgrades this supervisor started, by result: handed_over, or rolled_back with the new process stopped."}, []string{"result"})
	s.up.upgrades.WithLabelValues("handed_over")
	s.up.upgrades.WithLabelValues("rolled_back")
	s.reg.MustRegister(s.up.upgrades)
}

// inheritedSocket is the bind hook: the socket an upgrade passed for a
// configured address.
func (s *Supervisor) inheritedSocket(a listeners.Addr) *os.File {
	return s.up.in.take("sip:" + a.String())
}

// UpgradeResult answers POST /mi/upgrade.
type UpgradeResult struct {
	Upgraded   bool   `json:"upgraded"`
	Pid        int    `json:"pid"`
	Generation int    `json:"generation"`
	Version    string `json:"version"`
	// Error says why the upgrade rolled back; Lines are the new process's
	// last lines then.
	Error string   `json:"error,omitempty"`
	Lines []string `json:"lines,omitempty"`
}

// errUpgradeRefused is an upgrade not even tried.
type errUpgradeRefused string

func (e errUpgradeRefused) Error() string { return string(e) }

// Upgrade starts the binary on disk as a new supervisor and hands it the
// node once it is ready, or stops it and keeps serving.
func (s *Supervisor) Upgrade(ctx context.Context) (UpgradeResult, error) {
	s.up.mu.Lock()
	switch {
	case s.up.handed:
		s.up.mu.Unlock()
		return UpgradeResult{}, errUpgradeRefused("this supervisor has handed over already and is draining")
	case s.up.running:
		s.up.mu.Unlock()
		return UpgradeResult{}, errUpgradeRefused("an upgrade is already under way")
	case s.up.link.Load() != nil:
		s.up.mu.Unlock()
		return UpgradeResult{}, errUpgradeRefused("the previous generation is still draining; upgrade again once it has exited")
	}
	s.up.running = true
	s.up.mu.Unlock()
	defer func() {
		s.up.mu.Lock()
		s.up.running = false
		s.up.mu.Unlock()
	}()
	res, err := s.upgrade(ctx)
	if err != nil {
		s.up.upgrades.WithLabelValues("rolled_back").Inc()
		s.log.Error("upgrade rolled back; this supervisor serves on", "error", err, "new_lines", len(res.Lines))
		return res, err
	}
	s.up.upgrades.WithLabelValues("handed_over").Inc()
	return res, nil
}

func (s *Supervisor) upgrade(ctx context.Context) (UpgradeResult, error) {
	res := UpgradeResult{Generation: s.up.gen + 1}
	exe, err := executable()
	if err != nil {
		return res, err
	}
	var files []*os.File
	var names []string
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	for _, sk := range s.sockets.list {
		f, err := sk.File()
		if err != nil {
			return res, fmt.Errorf("pass %s: %w", sk.Name(), err)
		}
		files, names = append(files, f), append(names, "sip:"+sk.Addr.String())
	}
	hf, err := s.sockets.httpLn.(*net.TCPListener).File()
	if err != nil {
		return res, fmt.Errorf("pass the control address: %w", err)
	}
	files, names = append(files, hf), append(names, "http:"+s.config().HTTPListen)
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return res, fmt.Errorf("upgrade link: %w", err)
	}
	ours, theirs := os.NewFile(uintptr(fds[0]), "link"), os.NewFile(uintptr(fds[1]), "link")
	files, names = append(files, theirs), append(names, fdLink)
	lc, err := fileUnixConn(ours)
	if err != nil {
		return res, fmt.Errorf("upgrade link: %w", err)
	}
	link := &upLink{c: lc, old: true, done: make(chan struct{})}
	logR, logW, err := os.Pipe()
	if err != nil {
		link.close()
		return res, err
	}
	defer logW.Close()
	files, names = append(files, os.Stderr), append(names, fdStderr)

	env := []string{}
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, envUpgradeFDs+"=") && !strings.HasPrefix(e, envGeneration+"=") {
			env = append(env, e)
		}
	}
	env = append(env, envUpgradeFDs+"="+strings.Join(names, ","), envGeneration+"="+strconv.Itoa(res.Generation))
	s.log.Info("upgrade: starting the binary on disk as the next generation", "path", exe, "new_generation", res.Generation)
	proc, err := startRaw(exe, os.Args, env, append([]*os.File{os.Stdin, os.Stdout, logW}, files...))
	files = files[:len(files)-1] // stderr is ours to keep
	logW.Close()
	if err != nil {
		link.close()
		logR.Close()
		return res, fmt.Errorf("start %s: %w", exe, err)
	}
	tail := &lineTail{max: linkTail}
	relayed := make(chan struct{})
	go func() {
		defer close(relayed)
		relay(logR, os.Stderr, tail)
	}()
	exited := make(chan error, 1)
	go func() {
		st, err := proc.Wait()
		if err == nil && !st.Success() {
			err = errors.New(st.String())
		}
		exited <- err
	}()
	ready := make(chan []byte, 1)
	go func() {
		b, err := link.recv()
		if err == nil && len(b) > 0 && b[0] == linkReady {
			ready <- b[1:]
		}
	}()

	timeout := s.config().Workers.UpgradeTimeout
	t := time.NewTimer(timeout)
	defer t.Stop()
	var why string
	select {
	case b := <-ready:
		pid, version, _ := strings.Cut(string(b), " ")
		res.Pid, _ = strconv.Atoi(pid)
		res.Version = version
		h := &handover{link: link, pid: res.Pid, done: make(chan struct{})}
		select {
		case s.up.handOver <- h:
		case <-ctx.Done():
			why = "the supervisor is stopping"
		}
		if why == "" {
			<-h.done
			res.Upgraded = true
			return res, nil
		}
	case err := <-exited:
		why = "exited before it was ready: " + exitText(err)
		exited <- err
	case <-t.C:
		why = fmt.Sprintf("was not ready within upgrade_timeout (%v)", timeout)
	case <-ctx.Done():
		why = "the supervisor is stopping"
	}
	// Rollback: closing the link tells the new process to stop; it takes
	// its workers with it.
	link.close()
	select {
	case <-exited:
	case <-time.After(3 * time.Second):
		proc.Kill()
		<-exited
	}
	select {
	case <-relayed:
	case <-time.After(2 * time.Second):
	}
	logR.Close()
	res.Lines = tail.lines()
	msg := fmt.Sprintf("the new process (%s, pid %d) %s; generation %d (pid %d) serves on", exe, proc.Pid, why, s.up.gen, os.Getpid())
	if len(res.Lines) > 0 {
		msg += "; its last lines:\n" + strings.Join(res.Lines, "\n")
	}
	res.Error = msg
	return res, errors.New(msg)
}

// startRaw starts a process with files as its descriptors 0, 1, 2, 3...
// It passes raw descriptors, as package pool does for workers: os/exec
// would call Fd on each file, which switches the open file description,
// shared with this process's own sockets, to blocking mode, and a door's
// read of a blocking socket no longer sees its deadline.
func startRaw(path string, argv, env []string, files []*os.File) (*os.Process, error) {
	fds := make([]uintptr, len(files))
	for i, f := range files {
		rc, err := f.SyscallConn()
		if err != nil {
			return nil, err
		}
		if err := rc.Control(func(x uintptr) { fds[i] = x }); err != nil {
			return nil, err
		}
	}
	pid, err := syscall.ForkExec(path, argv, &syscall.ProcAttr{Env: env, Files: fds})
	if err != nil {
		return nil, err
	}
	return os.FindProcess(pid)
}

func exitText(err error) string {
	if err == nil {
		return "exit status 0"
	}
	return err.Error()
}

// executable is this binary's path on disk. A binary replaced since it
// started reads back as "path (deleted)": the path is what an upgrade runs.
func executable() (string, error) {
	exe, err := os.Executable()
	if err != nil {
		return "", fmt.Errorf("find own executable: %w", err)
	}
	return strings.TrimSuffix(exe, " (deleted)"), nil
}

// relay copies the new process's output to w line by line, keeping the
// last ones.
func relay(r io.Reader, w io.Writer, tail *lineTail) {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		tail.add(line)
		fmt.Fprintln(w, line)
	}
	// A line too long to keep: the rest is copied as it comes, so that the
	// new process never blocks on a full pipe.
	io.Copy(w, r)
}

// lineTail keeps the last lines it was given.
type lineTail struct {
	mu  sync.Mutex
	max int
	l   []string
}

func (t *lineTail) add(s string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.l = append(t.l, s)
	if len(t.l) > t.max {
		t.l = t.l[len(t.l)-t.max:]
	}
}

func (t *lineTail) lines() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return append([]string(nil), t.l...)
}

// awaitHandOver is the new side's start: with its workers ready, it tells
// the old one so and waits for the sockets to be its own. An error (the old
// one closed the link: it rolled back) ends the process.
func (s *Supervisor) awaitHandOver(ctx context.Context, term <-chan os.Signal) error {
	in := s.up.in
	link := &upLink{c: in.link}
	got := make(chan error, 1)
	go func() {
		for {
			b, err := link.recv()
			if err != nil {
				got <- fmt.Errorf("the old supervisor called the upgrade off: %w", err)
				return
			}
			if len(b) > 0 && b[0] == linkGo {
				got <- nil
				return
			}
		}
	}()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for sent := false; ; {
		if !sent && s.allRoutable() {
			if err := link.send([]byte(fmt.Sprintf("%c%d %s", linkReady, os.Getpid(), Version))); err != nil {
				return fmt.Errorf("upgrade: tell the old supervisor: %w", err)
			}
			sent = true
			s.log.Info("upgrade: workers ready; waiting for the old supervisor to hand over")
		}
		select {
		case err := <-got:
			if err != nil {
				return err
			}
			s.up.link.Store(link)
			in.out.set(os.Stderr)
			in.pipe.Close()
			go s.linkLoop(link)
			s.log.Info("upgrade: this generation serves; the previous one drains its calls")
			return nil
		case <-tick.C:
		case sig := <-term:
			return fmt.Errorf("upgrade: %v before the hand-over", sig)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// allRoutable reports whether every group has a worker that takes work.
func (s *Supervisor) allRoutable() bool {
	for _, gr := range s.groupRuns() {
		if len(gr.g.Routable()) == 0 {
			return false
		}
	}
	return true
}

// handOverSockets is the old side's step 3: it stops reading every socket,
// hands them over and goes on to drain. doors is done when every door has
// stopped reading.
func (s *Supervisor) handOverSockets(h *handover, doors *sync.WaitGroup, srv *http.Server) {
	s.up.mu.Lock()
	s.up.handed = true
	s.up.mu.Unlock()
	// Direct reads: the kernel's program places datagrams on the old
	// workers' own sockets; from now on every datagram goes to member 0, the
	// socket the new supervisor reads. (Its steering loop has stopped with
	// the run group.)
	for _, gr := range s.udp {
		if gr.steer == nil {
			continue
		}
		for _, sk := range s.sockets.list {
			if sk.Name() != gr.g.Name() {
				continue
			}
			if rc, err := sk.UDP.SyscallConn(); err == nil {
				var aerr error
				rc.Control(func(fd uintptr) { aerr = steer.Attach(int(fd), steer.DoorProgram()) })
				if aerr != nil {
					s.log.Warn("upgrade: the door's program not installed; the old workers read what the kernel still gives them", "group", gr.g.Name(), "error", aerr)
				}
			}
		}
	}
	for _, sk := range s.sockets.list {
		if sk.UDP != nil {
			sk.UDP.SetReadDeadline(time.Unix(1, 0))
		}
		sk.CloseStream()
	}
	s.stopDoors(doors)
	s.sockets.httpLn.Close()
	// A client's kept-alive connection would still reach this side: each
	// is closed once idle, and the next request connects to the new one.
	srv.SetKeepAlivesEnabled(false)
	s.up.old.Store(true)
	// Go first: until the new side has read it, it drops anything else
	// the link carries, so the door sends nothing back before (it places
	// on the old workers, still ready, meanwhile).
	if err := h.link.send([]byte{linkGo}); err != nil {
		s.log.Error("upgrade: the new supervisor is gone at the hand-over", "error", err)
	}
	s.up.link.Store(h.link)
	go s.linkLoop(h.link)
	go s.sendPS(h.link)
	s.log.Info("upgrade: handed over; draining the calls in progress", "new_pid", h.pid, "new_generation", s.up.gen+1)
	close(h.done)
}

// withOldPS adds, while the previous generation drains, its groups to this
// one's, each group saying its generation.
func (s *Supervisor) withOldPS(gs []ctl.Group) []ctl.Group {
	old := s.up.oldPS.Load()
	if old == nil || s.up.old.Load() {
		return gs
	}
	for i := range gs {
		gs[i].Generation = s.up.gen
	}
	for _, g := range *old {
		g.Generation = s.up.gen - 1
		gs = append(gs, g)
	}
	return gs
}

// stopDoors waits for every door to stop reading. A process that made a
// socket of this one's with os.File.Fd (a worker's start, the new
// supervisor's) switched it to blocking mode for a moment: a door that
// entered its read then waits in the kernel for the next datagram, past
// its deadline. An empty datagram, which every door drops as a keepalive,
// wakes it.
func (s *Supervisor) stopDoors(doors *sync.WaitGroup) {
	done := make(chan struct{})
	go func() {
		doors.Wait()
		close(done)
	}()
	for range 40 {
		select {
		case <-done:
			return
		case <-time.After(50 * time.Millisecond):
		}
		for _, sk := range s.sockets.list {
			if sk.UDP == nil {
				continue
			}
			to := sk.UDP.LocalAddr().(*net.UDPAddr).AddrPort()
			if to.Addr().IsUnspecified() {
				to = netip.AddrPortFrom(netip.IPv6Loopback(), to.Port())
				if to.Addr().Is4In6() || sk.UDP.LocalAddr().(*net.UDPAddr).IP.To4() != nil {
					to = netip.AddrPortFrom(netip.AddrFrom4([4]byte{127, 0, 0, 1}), to.Port())
				}
			}
			if c, err := net.DialUDP("udp", nil, net.UDPAddrFromAddrPort(to)); err == nil {
				c.Write(nil)
				c.Close()
			}
		}
	}
	s.log.Warn("upgrade: a door did not stop reading; it passes what it still reads to the new generation")
}

// sendPS tells the new side, every second, what this side's workers are,
// for its ctl ps.
func (s *Supervisor) sendPS(l *upLink) {
	for s.up.link.Load() == l {
		b, err := json.Marshal(backend{s}.PS())
		if err == nil {
			err = l.send(append([]byte{linkPS}, b...))
		}
		if err != nil {
			return
		}
		time.Sleep(time.Second)
	}
}

// linkLoop handles what the other side sends while both serve, until the
// link closes (the old side has exited, or the new one has).
func (s *Supervisor) linkLoop(l *upLink) {
	defer func() {
		// The old side keeps its ended link: its door then drops what it
		// would have sent back rather than place or refuse it (upgradePick).
		if !l.old {
			s.up.link.CompareAndSwap(l, nil)
		}
		s.up.oldPS.Store(nil)
		l.close()
		if !s.up.old.Load() {
			s.log.Info("upgrade: the previous generation has exited; this one serves alone")
		}
	}()
	for {
		b, f, err := l.recvFile()
		if err != nil {
			return
		}
		if len(b) == 0 || (f != nil && b[0] != linkConn && b[0] != linkConnTLS) {
			if f != nil {
				f.Close()
			}
			continue
		}
		switch b[0] {
		case linkConn, linkConnTLS:
			s.takeConn(b[0] == linkConnTLS, b[1:], f)
		case linkPass:
			pid, from, msg, ok := wire.ParseForwardNote(b[1:])
			if !ok {
				continue
			}
			if !s.passToWorker(pid, from, msg) {
				s.sockets.conns.passed.WithLabelValues("no_holder").Inc()
			}
		case linkForward, linkBounce:
			sock, from, dgram, ok := parseLinked(b[1:])
			if !ok {
				continue
			}
			for _, u := range s.sockets.doors {
				if u.sock.Name() == sock {
					u.handleLinked(dgram, from, b[0] == linkForward)
					break
				}
			}
		case linkDone:
			if l.old {
				l.doneOnce.Do(func() { close(l.done) })
			} else if err := l.stopForwarding(); err != nil {
				return
			}
		case linkPS:
			var gs []ctl.Group
			if json.Unmarshal(b[1:], &gs) == nil {
				s.up.oldPS.Store(&gs)
			}
		}
	}
}

// handOffToNext passes a connection a draining worker of the old side gave
// back (wire.HandOffNote) to the new side, which hands it to one of its TCP
// workers as a scale-down hands it to another worker: the client's
// connection stays up across the upgrade. It reports whether it took the
// note; outside an overlap, or on the new side, the note is the usual
// hand-off's.
func (s *Supervisor) handOffToNext(from *pool.Worker, note []byte) bool {
	l := s.up.link.Load()
	if l == nil || !l.old || l.dead.Load() {
		return false
	}
	kind := byte(linkConn)
	remote, rest, ok := wire.ParseHandOffNote(note)
	if !ok {
		if remote, rest, ok = wire.ParseHandOffTLSNote(note); !ok {
			return false
		}
		kind = linkConnTLS
	}
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return false
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	c := s.sockets.conns
	c.mu.Lock()
	f, held := c.byWorker[from][ap]
	if !held || f == nil {
		c.mu.Unlock()
		return false
	}
	delete(c.byWorker[from], ap)
	c.dropLocked(ap)
	c.mu.Unlock()
	msg := append([]byte{kind, byte(len(remote))}, remote...)
	err = l.sendFile(append(msg, rest...), f)
	f.Close()
	if err != nil {
		c.closed.WithLabelValues("handoff_failed").Inc()
		s.log.Warn("upgrade: connection not passed to the new generation; it is closed", "remote", remote, "error", err)
		return true
	}
	c.handedOff.Inc()
	return true
}

// passToOtherGeneration passes a response that a worker read for another
// worker's branch (wire.ForwardNote), whose pid is none of this side's, to
// the other generation while both serve: a connection that moved at the
// upgrade carries responses for the branches of workers of both sides.
func (s *Supervisor) passToOtherGeneration(pid int, from string, msg []byte) bool {
	l := s.up.link.Load()
	if l == nil {
		return false
	}
	if err := l.send(append([]byte{linkPass}, wire.ForwardNote(pid, from, msg)...)); err != nil {
		return false
	}
	s.sockets.conns.passed.WithLabelValues("passed").Inc()
	return true
}

// takeConn is the new side's end of handOffToNext.
func (s *Supervisor) takeConn(tls bool, b []byte, f *connCopy) {
	fail := func(why string) {
		if f != nil {
			f.Close()
		}
		s.sockets.conns.closed.WithLabelValues("handoff_failed").Inc()
		s.log.Warn("upgrade: a connection of the previous generation is closed", "reason", why)
	}
	if f == nil || len(b) < 1 || len(b) < 1+int(b[0]) {
		fail("no descriptor, or a damaged message")
		return
	}
	remote, rest := string(b[1:1+int(b[0])]), b[1+int(b[0]):]
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		fail("remote " + remote)
		return
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	w := s.pickTCP()
	if w == nil {
		fail("no TCP worker")
		return
	}
	// Counted, never refused: it was admitted once already.
	s.sockets.conns.admit(ap, 0, 0)
	if tls {
		err = w.SendTLSConnFile(f, rest)
	} else {
		err = w.SendConnFile(f, rest)
	}
	if err != nil {
		s.sockets.conns.release(ap)
		fail(err.Error())
		return
	}
	s.sockets.conns.handed(w, ap, f)
	s.sockets.conns.handedOff.Inc()
}

// handleLinked passes a datagram from the other side through the door. A
// forwarded one (old side) was let in by the new side's door: it is
// placed on the worker with its Call-ID, or sent back. A bounced one (new
// side) is placed here as if just read.
func (u *udpDoor) handleLinked(dgram []byte, from netip.AddrPort, forwarded bool) {
	frame := make([]byte, wire.MsgHeaderLen+len(dgram))
	copy(frame[wire.MsgHeaderLen:], dgram)
	wire.PutMsgHeader(frame, u.door.Socket(), from, 0)
	rc, err := u.sock.UDP.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		u.mu.Lock()
		u.fd = int(fd)
		u.linked = true
		if forwarded {
			u.door.Handed(frame, from, time.Now().UnixNano())
		} else {
			u.door.Passed(frame, from, time.Now().UnixNano())
		}
		u.linked = false
		u.mu.Unlock()
	})
}

// upgradePick is the door's choice while two generations overlap, nil
// outside one: on the new side, a datagram the door holds no affinity for
// (and that has not come back already) goes to the old side first, until
// the old side says its workers are gone; on the old side, from the
// hand-over to its exit, one it holds no affinity for goes back, whatever
// it is and whether or not an old worker is left: the new side decides
// about it. The old side never places new work nor refuses it.
//
// A response whose branch a worker of the new side made stays there: its
// transaction is there and nowhere else. The door holds no affinity for
// the responses to what TCP workers relay over UDP (the request never went
// through it), and sent over the old side and back they waited on it: on
// an old side slow to read the link (its workers exiting, a busy machine)
// a callee's 180 and 200 took over a second to reach the TCP worker, which
// by then had sent the INVITE again, and a callee that takes that for a
// new request (SIPp's uas aborts the call) lost the call.
func (s *Supervisor) upgradePick(u *udpDoor, m *sipscan.Msg) frontdoor.Target {
	l := s.up.link.Load()
	if l == nil {
		return nil
	}
	if l.old {
		return &linkTarget{l: l, kind: linkBounce, sock: u.sock.Name(), lost: &s.up.lost}
	}
	if l.dead.Load() || l.noForward.Load() || u.linked {
		return nil
	}
	if !m.IsRequest && s.madeBranch(m.Branch) {
		return nil
	}
	return &linkTarget{l: l, kind: linkForward, sock: u.sock.Name()}
}

// madeBranch reports whether a routable worker of this supervisor made
// branch (wire.BranchOwner). The routable lists are read without a lock or
// a copy, as the door reads them for each datagram; a worker of this side
// that is draining is not in them, and its responses take the way over the
// old side, which sends them back.
func (s *Supervisor) madeBranch(branch []byte) bool {
	pid, ok := wire.BranchOwner(branch)
	if !ok {
		return false
	}
	for _, gr := range s.groups {
		for _, w := range gr.g.Routable() {
			if w.Pid == pid {
				return true
			}
		}
	}
	return false
}

// linkTarget is the other side as a door's target.
type linkTarget struct {
	l    *upLink
	kind byte
	sock string
	// lost, on the old side, counts what could not be sent back.
	lost *atomic.Uint64
}

func (t *linkTarget) SendSeq(frame []byte, now int64) (uint64, error) {
	_, from, _ := wire.ParseMsgHeader(frame)
	err := t.l.sendDatagram(t.kind, t.sock, from, frame[wire.MsgHeaderLen:])
	if err != nil && t.kind == linkBounce {
		// The new side is gone or stalls. A refusal from here would be
		// final for its sender (a 503 to a REGISTER); dropped, the
		// datagram comes again, and the new side, which reads the socket,
		// takes it then.
		t.lost.Add(1)
		return 0, nil
	}
	return 0, err
}

func (t *linkTarget) Waiting(uint64) bool { return false }
func (t *linkTarget) Passes() bool        { return true }

// upLink is the link between the two generations: one SOCK_SEQPACKET
// message per datagram or notice.
type upLink struct {
	c    *net.UnixConn
	wmu  sync.Mutex
	wbuf []byte
	rbuf []byte
	oob  []byte
	dead atomic.Bool
	// old says this end is the old side's; done is closed when the new
	// side answers linkDone: nothing it forwarded is still on its way.
	old      bool
	done     chan struct{}
	doneOnce sync.Once
	// noForward is set on the new side's end once the old side said
	// linkDone.
	noForward atomic.Bool
}

// errLinkDown is a send on a closed link: the door then places the
// datagram itself.
var errLinkDown = errors.New("upgrade link closed")

func (l *upLink) send(b []byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	return l.write(b)
}

func (l *upLink) write(b []byte) error {
	if l.dead.Load() {
		return errLinkDown
	}
	// A side that stalls must not stall the other's door: a datagram that
	// cannot be passed within this is dropped, as from a full queue, and
	// its sender retransmits.
	l.c.SetWriteDeadline(time.Now().Add(200 * time.Millisecond))
	if _, err := l.c.Write(b); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return wire.ErrQueueFull
		}
		l.close()
		return errLinkDown
	}
	return nil
}

func (l *upLink) sendDatagram(kind byte, sock string, from netip.AddrPort, dgram []byte) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if kind == linkForward && l.noForward.Load() {
		// A door that chose the old side just before it said linkDone:
		// the door places the datagram here (Door.handle picks again).
		return errLinkDown
	}
	fs := from.String()
	b := append(l.wbuf[:0], kind, byte(len(sock)))
	b = append(b, sock...)
	b = append(b, byte(len(fs)))
	b = append(b, fs...)
	b = append(b, dgram...)
	l.wbuf = b
	return l.write(b)
}

// recv reads one message; its bytes are good until the next recv. A
// descriptor that came with it is closed.
func (l *upLink) recv() ([]byte, error) {
	b, f, err := l.recvFile()
	if f != nil {
		f.Close()
	}
	return b, err
}

// recvFile reads one message and the descriptor that came with it, if any.
func (l *upLink) recvFile() ([]byte, *connCopy, error) {
	if l.rbuf == nil {
		l.rbuf = make([]byte, 1<<20)
		l.oob = make([]byte, unix.CmsgSpace(4*4))
	}
	n, oobn, _, _, err := l.c.ReadMsgUnix(l.rbuf, l.oob)
	if err != nil {
		return nil, nil, err
	}
	var f *connCopy
	if oobn > 0 {
		if cms, err := unix.ParseSocketControlMessage(l.oob[:oobn]); err == nil {
			for _, cm := range cms {
				fds, err := unix.ParseUnixRights(&cm)
				if err != nil {
					continue
				}
				for _, fd := range fds {
					unix.CloseOnExec(fd)
					if f == nil {
						f = &connCopy{fd: fd}
					} else {
						unix.Close(fd)
					}
				}
			}
		}
	}
	if n == 0 && f == nil {
		return nil, nil, io.EOF
	}
	return l.rbuf[:n], f, nil
}

// sendFile sends a message with a descriptor.
func (l *upLink) sendFile(b []byte, f syscall.Conn) error {
	rc, err := f.SyscallConn()
	if err != nil {
		return err
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	if l.dead.Load() {
		return errLinkDown
	}
	var werr error
	if err := rc.Control(func(fd uintptr) {
		l.c.SetWriteDeadline(time.Now().Add(time.Second))
		_, _, werr = l.c.WriteMsgUnix(b, unix.UnixRights(int(fd)), nil)
	}); err != nil {
		return err
	}
	return werr
}

// stopForwarding is the new side's answer to linkDone. Set and answered
// under the write lock, so that every forward is either written before the
// answer, and read by the old side before it, or not written at all.
func (l *upLink) stopForwarding() error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	l.noForward.Store(true)
	return l.write([]byte{linkDone})
}

// leave is the old side's end of an overlap, once its workers are gone: it
// asks the new side to forward no more and reads what it forwarded until
// then, sending each back, before it closes the link. Closed at once, the
// link would lose the datagrams still in it, and a door handling one as it
// closes would have nowhere to send it.
func (s *Supervisor) leaveOverlap() {
	l := s.up.link.Load()
	if l == nil || !l.old {
		return
	}
	if l.send([]byte{linkDone}) == nil {
		select {
		case <-l.done:
		case <-time.After(linkDoneWait):
			s.log.Warn("upgrade: the new generation did not confirm it forwards no more; closing the link", "waited", linkDoneWait)
		}
	}
	l.close()
	if n := s.up.lost.Load(); n > 0 {
		s.log.Warn("upgrade: datagrams the new generation forwarded could not be sent back and were dropped; their senders retransmit", "dropped", n)
	}
}

func (l *upLink) close() {
	l.dead.Store(true)
	l.c.Close()
}

// seqpacketPair is a connected pair of SOCK_SEQPACKET sockets.
func seqpacketPair() (a, b *net.UnixConn, err error) {
	fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, nil, err
	}
	if a, err = fileUnixConn(os.NewFile(uintptr(fds[0]), "link")); err != nil {
		unix.Close(fds[1])
		return nil, nil, err
	}
	if b, err = fileUnixConn(os.NewFile(uintptr(fds[1]), "link")); err != nil {
		a.Close()
		return nil, nil, err
	}
	return a, b, nil
}

// fileUnixConn makes a Unix socket's file a connection, and closes the file.
func fileUnixConn(f *os.File) (*net.UnixConn, error) {
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	uc, ok := c.(*net.UnixConn)
	if !ok {
		c.Close()
		return nil, errors.New("not a Unix socket")
	}
	return uc, nil
}

func parseLinked(b []byte) (sock string, from netip.AddrPort, dgram []byte, ok bool) {
	if len(b) < 1 || len(b) < 1+int(b[0])+1 {
		return "", from, nil, false
	}
	sock, b = string(b[1:1+int(b[0])]), b[1+int(b[0]):]
	if len(b) < 1+int(b[0]) {
		return "", from, nil, false
	}
	from, err := netip.ParseAddrPort(string(b[1 : 1+int(b[0])]))
	if err != nil {
		return "", from, nil, false
	}
	return sock, from, b[1+int(b[0]):], true
}

// usr2Loop upgrades on SIGUSR2, as nginx and tableflip do.
func (s *Supervisor) usr2Loop(ctx context.Context) error {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGUSR2)
	defer signal.Stop(c)
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-c:
			s.log.Info("upgrade asked by SIGUSR2")
			go func() {
				if res, err := s.Upgrade(ctx); err == nil {
					s.log.Info("upgrade done", "new_pid", res.Pid, "new_generation", res.Generation, "new_version", res.Version)
				} else if _, refused := err.(errUpgradeRefused); refused {
					s.log.Warn("upgrade refused", "reason", err)
				}
			}()
		}
	}
}

// upgradeHandler serves POST /mi/upgrade: it answers once the new
// generation serves, or with why it does not.
func (s *Supervisor) upgradeHandler(w http.ResponseWriter, r *http.Request) {
	res, err := s.Upgrade(r.Context())
	if err != nil {
		if _, refused := err.(errUpgradeRefused); refused {
			writeJSON(w, http.StatusConflict, map[string]any{"error": "upgrade: " + err.Error()})
			return
		}
		writeJSON(w, http.StatusBadGateway, map[string]any{"error": "upgrade: " + err.Error(), "lines": res.Lines})
		return
	}
	writeJSON(w, http.StatusOK, res)
}

// sdNotify sends state to systemd's notification socket, if there is one
// ($NOTIFY_SOCKET, as sd_notify(3) reads it).
func sdNotify(state string) error {
	name := os.Getenv("NOTIFY_SOCKET")
	if name == "" {
		return nil
	}
	if name[0] == '@' {
		name = "\x00" + name[1:]
	}
	c, err := net.DialUnix("unixgram", nil, &net.UnixAddr{Name: name, Net: "unixgram"})
	if err != nil {
		return err
	}
	defer c.Close()
	_, err = c.Write([]byte(state))
	return err
}

// notifyReady tells systemd, once every group has a ready worker, that the
// service is up and which process is its main one: after an upgrade, this
// one.
func (s *Supervisor) notifyReady(ctx context.Context) {
	for !s.allRoutable() {
		select {
		case <-ctx.Done():
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := sdNotify(fmt.Sprintf("MAINPID=%d\nREADY=1\nSTATUS=generation %d serving", os.Getpid(), s.up.gen)); err != nil {
		s.log.Warn("systemd notification failed", "error", err)
	}
}
