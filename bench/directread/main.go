// Command directread measures how SIP datagrams from one peer can reach N
// worker processes, to choose how workers should receive their traffic
// once they read the SIP socket themselves instead of through the
// supervisor.
//
// Each run starts N receiver processes (this binary again, as the pool
// starts workers), sends them a fixed rate of SIP-like datagrams (INVITE,
// ACK and BYE of calls with distinct Call-IDs, 330 to 600 bytes) from one
// UDP socket on 127.0.0.1 (one source address and port, as one SIPp or one
// trunk is) for a bounded time, and counts, over the measured window, each
// receiver's CPU and context switches (getrusage of the whole process, all
// its threads) and what it received. The designs:
//
//	A        today's: a reader process reads the socket and writes each
//	         datagram, by the hash of its Call-ID, to one of N children
//	         over SOCK_SEQPACKET socket pairs; reader and children wait in
//	         Go's network poller and read with raw non-blocking calls, as
//	         the front door and the workers do.
//	B-epoll  one UDP socket shared by the N children, each waiting on it in
//	         Go's network poller (an epoll set per process): every datagram
//	         wakes every child, and all but one find nothing.
//	B-excl   the shared socket, each child blocked in epoll_wait on a set
//	         of its own holding it with EPOLLEXCLUSIVE: one child woken per
//	         datagram (or a few).
//	B-block  the shared socket, each child blocked in recvfrom, Kamailio's
//	         receivers' way; the kernel wakes one blocked reader per
//	         datagram.
//	C-rand   SO_REUSEPORT, a socket per child, with a classic BPF program
//	         (SO_ATTACH_REUSEPORT_CBPF) that picks the socket at random
//	         (the skb's ancillary random value, mod N), so that one peer's
//	         datagrams spread over all children. A call's ACK and BYE then
//	         reach a child other than its INVITE's (N-1)/N of the time.
//	C-hash   SO_REUSEPORT without a program: the kernel's hash of the
//	         4-tuple, the same for every datagram of one peer. Run at the
//	         lowest rate only, to show where one peer's traffic goes.
//	D        C-rand reading with recvmmsg, up to 64 datagrams per call.
//
// After each run the children mark, in a shared memory map, which of them
// got each message of each call; from it come the datagrams lost, and the
// share of ACKs and BYEs that reached a child other than the one that has
// their INVITE (which a design without affinity would have to pass on).
//
// Every design's children do the same work per datagram (find its Call-ID
// and method with the front door's scanner), far less than a real worker
// does: the figures are the cost of getting datagrams into processes,
// which is what differs between the designs. Runs alternate the designs
// within each repetition, so that the machine's noise falls on all of
// them. The output is a markdown table of medians over the repetitions.
//
// Only 127.0.0.1 is used, every run is bounded, and the program kills
// nothing but the processes it started. With the defaults it runs for
// under five minutes. README.md has results and what they say.
package main

import (
	"bufio"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

// The designs, as -designs names them.
const (
	designA      = "A"
	designBPoll  = "B-epoll"
	designBExcl  = "B-excl"
	designBBlock = "B-block"
	designCRand  = "C-rand"
	designCHash  = "C-hash"
	designD      = "D"
)

// The environment a receiver process finds.
const (
	envRole   = "DIRECTREAD_ROLE"
	envDesign = "DIRECTREAD_DESIGN"
	envID     = "DIRECTREAD_ID"
	envN      = "DIRECTREAD_N"

	roleChild  = "child"
	roleReader = "reader"
)

func main() {
	if role := os.Getenv(envRole); role != "" {
		if err := runReceiver(role); err != nil {
			fmt.Fprintf(os.Stderr, "directread %s %s: %v\n", role, os.Getenv(envID), err)
			os.Exit(1)
		}
		return
	}
	var (
		ns      = flag.String("n", "2,4", "numbers of receiver processes")
		rates   = flag.String("rates", "2000,10000,40000", "datagrams per second")
		designs = flag.String("designs", "A,B-epoll,B-excl,B-block,C-rand,C-hash,D", "designs to run, in the order each repetition runs them (C-hash runs at the lowest rate only, D at the highest only)")
		secs    = flag.Float64("secs", 2.2, "seconds measured per run")
		warmup  = flag.Float64("warmup", 0.3, "seconds sent before the measured window")
		reps    = flag.Int("reps", 3, "repetitions")
		raw     = flag.String("csv", "", "also write every run's figures to this CSV file")
	)
	flag.Parse()
	cfg := config{secs: *secs, warmup: *warmup}
	var err error
	if cfg.ns, err = ints(*ns); err != nil {
		fatal(err)
	}
	if cfg.rates, err = ints(*rates); err != nil {
		fatal(err)
	}
	cfg.designs = strings.Split(*designs, ",")
	plan := cfg.plan(*reps)
	est := time.Duration(float64(len(plan)) * (cfg.secs + cfg.warmup + 0.35) * float64(time.Second))
	fmt.Fprintf(os.Stderr, "%d runs, about %v\n", len(plan), est.Round(time.Second))
	load0 := loadavg()
	var all []runResult
	for i, p := range plan {
		res, err := cfg.run(p)
		if err != nil {
			fatal(fmt.Errorf("%s N=%d %d/s: %w", p.design, p.n, p.rate, err))
		}
		fmt.Fprintf(os.Stderr, "[%d/%d] %s\n", i+1, len(plan), res.line())
		all = append(all, res)
	}
	if *raw != "" {
		if err := writeCSV(*raw, all); err != nil {
			fatal(err)
		}
	}
	fmt.Printf("directread: %g s measured per run (after %g s), %d repetitions, designs alternating; %d CPUs, %s, load average %s at the start, %s at the end\n\n",
		cfg.secs, cfg.warmup, *reps, runtime.NumCPU(), kernel(), load0, loadavg())
	table(os.Stdout, all)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "directread:", err)
	os.Exit(1)
}

func ints(s string) ([]int, error) {
	var out []int
	for f := range strings.SplitSeq(s, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || v <= 0 {
			return nil, fmt.Errorf("not a positive number: %q", f)
		}
		out = append(out, v)
	}
	return out, nil
}

type config struct {
	ns, rates    []int
	designs      []string
	secs, warmup float64
}

type point struct {
	design       string
	n, rate, rep int
}

// plan lists the runs: for each repetition, N and rate, every design in
// turn, so that a disturbance of the machine lasting a few seconds falls
// on neighbouring runs of different designs rather than on one design.
func (c config) plan(reps int) []point {
	lo, hi := slicesMin(c.rates), slicesMax(c.rates)
	var out []point
	for rep := 1; rep <= reps; rep++ {
		for _, n := range c.ns {
			for _, rate := range c.rates {
				for _, d := range c.designs {
					if d == designCHash && (rate != lo || rep != 1) {
						continue
					}
					if d == designD && rate != hi {
						continue
					}
					out = append(out, point{d, n, rate, rep})
				}
			}
		}
	}
	return out
}

func slicesMin(v []int) int {
	m := v[0]
	for _, x := range v {
		m = min(m, x)
	}
	return m
}

func slicesMax(v []int) int {
	m := v[0]
	for _, x := range v {
		m = max(m, x)
	}
	return m
}

// runResult is one run's figures.
type runResult struct {
	point
	children []result
	reader   *result
	snd      senderStats
	lost     int    // messages sent and marked by no child, over the whole run
	dups     uint64 // messages received twice
	bad      uint64 // messages a receiver could not read
	drops    uint64 // frames the reader of design A could not write
	passed   int    // ACKs and BYEs received by a child other than the one with their INVITE
	inDialog int    // ACKs and BYEs received whose INVITE was received
}

func (r runResult) recv() uint64 {
	var n uint64
	for _, c := range r.children {
		n += c.Recv
	}
	return n
}

// per is a sum over every receiver process (reader included) per datagram
// the children received in the window.
func (r runResult) per(f func(result) float64) float64 {
	s := 0.0
	for _, c := range r.children {
		s += f(c)
	}
	if r.reader != nil {
		s += f(*r.reader)
	}
	if n := r.recv(); n > 0 {
		return s / float64(n)
	}
	return math.NaN()
}

func (r runResult) cpuUS() float64 {
	return r.per(func(c result) float64 { return c.UserUS + c.SysUS })
}
func (r runResult) readerUS() float64 {
	if r.reader == nil || r.recv() == 0 {
		return 0
	}
	return (r.reader.UserUS + r.reader.SysUS) / float64(r.recv())
}
func (r runResult) vcs() float64   { return r.per(func(c result) float64 { return float64(c.NVCSW) }) }
func (r runResult) ivcs() float64  { return r.per(func(c result) float64 { return float64(c.NIVCSW) }) }
func (r runResult) wakes() float64 { return r.per(func(c result) float64 { return float64(c.Wakes) }) }
func (r runResult) empty() float64 { return r.per(func(c result) float64 { return float64(c.Empty) }) }

// fairness is the largest child's share over the smallest's; +Inf when a
// child got nothing.
func (r runResult) fairness() float64 {
	lo, hi := uint64(math.MaxUint64), uint64(0)
	for _, c := range r.children {
		lo, hi = min(lo, c.Recv), max(hi, c.Recv)
	}
	if lo == 0 {
		return math.Inf(1)
	}
	return float64(hi) / float64(lo)
}

func (r runResult) passedPct() float64 {
	if r.inDialog == 0 {
		return 0
	}
	return 100 * float64(r.passed) / float64(r.inDialog)
}

func (r runResult) line() string {
	shares := make([]string, len(r.children))
	for i, c := range r.children {
		shares[i] = strconv.FormatUint(c.Recv, 10)
	}
	return fmt.Sprintf("%-7s N=%d %5d/s rep %d: %.1f µs/dgram (reader %.1f), %.2f vcs, %.2f wakes, %.2f empty, shares %s, lost %d, passed on %.0f%%, sent %d at %.0f/s, %.1f per sender wake-up, sender %.1f µs/dgram",
		r.design, r.n, r.rate, r.rep, r.cpuUS(), r.readerUS(), r.vcs(), r.wakes(), r.empty(), strings.Join(shares, "/"),
		r.lost, r.passedPct(), r.snd.sent, float64(r.snd.sent)/r.snd.elapsed.Seconds(), float64(r.snd.sent)/float64(max(r.snd.wakes, 1)),
		r.snd.cpuUS/float64(max(r.snd.sent, 1)))
}

// proc is a receiver process and its pipes.
type proc struct {
	cmd *exec.Cmd
	ctl io.WriteCloser
	out *bufio.Reader
}

// run does one run: sockets, processes, the sending, and the count.
func (c config) run(p point) (res runResult, err error) {
	res.point = p
	total := int(float64(p.rate) * (c.warmup + c.secs))
	calls := total/3 + 1
	shm, err := unix.MemfdCreate("directread", unix.MFD_CLOEXEC)
	if err != nil {
		return res, err
	}
	shmFile := os.NewFile(uintptr(shm), "shared")
	defer shmFile.Close()
	size := sharedHeader + 3*calls
	if err := unix.Ftruncate(shm, int64(size)); err != nil {
		return res, err
	}
	shared, err := unix.Mmap(shm, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return res, err
	}
	defer unix.Munmap(shared)

	socks, port, err := sockets(p.design, p.n)
	if err != nil {
		return res, err
	}
	var procs []*proc
	defer func() {
		for _, f := range socks {
			f.Close()
		}
		// On the way out after an error, the processes this run started
		// are killed, each by its own pid.
		for _, pr := range procs {
			if pr.cmd.ProcessState == nil {
				_ = pr.cmd.Process.Kill()
				_ = pr.cmd.Wait()
			}
		}
	}()
	start := func(role string, id int, files []*os.File) error {
		cmd := exec.Command("/proc/self/exe")
		cmd.Env = append(os.Environ(), envRole+"="+role, envDesign+"="+p.design,
			envID+"="+strconv.Itoa(id), envN+"="+strconv.Itoa(p.n))
		cmd.ExtraFiles = files
		cmd.Stderr = os.Stderr
		// A receiver must not outlive this program, even killed.
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		ctl, err := cmd.StdinPipe()
		if err != nil {
			return err
		}
		out, err := cmd.StdoutPipe()
		if err != nil {
			return err
		}
		if err := cmd.Start(); err != nil {
			return err
		}
		procs = append(procs, &proc{cmd: cmd, ctl: ctl, out: bufio.NewReader(out)})
		return nil
	}
	switch p.design {
	case designA:
		// socks: the UDP socket, then the reader's end and the child's end
		// of each data channel.
		files := []*os.File{socks[0], shmFile}
		for i := 0; i < p.n; i++ {
			files = append(files, socks[1+2*i])
		}
		if err := start(roleReader, p.n, files); err != nil {
			return res, err
		}
		for i := 0; i < p.n; i++ {
			if err := start(roleChild, i, []*os.File{socks[2+2*i], shmFile}); err != nil {
				return res, err
			}
		}
	case designBPoll, designBExcl, designBBlock:
		for i := 0; i < p.n; i++ {
			if err := start(roleChild, i, []*os.File{socks[0], shmFile}); err != nil {
				return res, err
			}
		}
	default:
		for i := 0; i < p.n; i++ {
			if err := start(roleChild, i, []*os.File{socks[i], shmFile}); err != nil {
				return res, err
			}
		}
	}
	// The children hold the sockets now; this process keeps none, so that
	// nothing here can read or wait on them.
	for _, f := range socks {
		f.Close()
	}
	socks = nil
	for _, pr := range procs {
		if err := expectLine(pr, "ready", 10*time.Second); err != nil {
			return res, err
		}
	}

	sfd, err := sender(port)
	if err != nil {
		return res, err
	}
	defer unix.Close(sfd)
	started := make(chan time.Time, 1)
	done := make(chan senderStats, 1)
	go func() { done <- send(sfd, p.rate, time.Duration((c.warmup+c.secs)*float64(time.Second)), started) }()
	t0 := <-started
	time.Sleep(time.Until(t0.Add(time.Duration(c.warmup * float64(time.Second))))) // the warm-up: the sender is pacing meanwhile
	for _, pr := range procs {
		if _, err := io.WriteString(pr.ctl, "start\n"); err != nil {
			return res, err
		}
	}
	res.snd = <-done
	// The last datagrams may still be queued: wait until every one sent
	// is counted, or a second has passed (then the rest are lost).
	deadline := time.Now().Add(time.Second)
	for time.Now().Before(deadline) {
		var got uint64
		for i := 0; i < p.n; i++ {
			got += atomic.LoadUint64((*uint64)(unsafe.Pointer(&shared[8*i])))
		}
		if got >= uint64(res.snd.sent) {
			break
		}
		time.Sleep(5 * time.Millisecond) // polling the children's counts; they are separate processes
	}
	for _, pr := range procs {
		if _, err := io.WriteString(pr.ctl, "stop\n"); err != nil {
			return res, err
		}
	}
	for _, pr := range procs {
		line, err := readLine(pr, 10*time.Second)
		if err != nil {
			return res, err
		}
		var r result
		if err := json.Unmarshal([]byte(line), &r); err != nil {
			return res, fmt.Errorf("report %q: %w", line, err)
		}
		if err := pr.cmd.Wait(); err != nil {
			return res, err
		}
		if r.ID < 0 {
			res.reader = &r
			res.drops = r.Drops
			res.bad += r.Bad
			continue
		}
		res.children = append(res.children, r)
		res.dups += r.Dups
		res.bad += r.Bad
	}
	sort.Slice(res.children, func(i, j int) bool { return res.children[i].ID < res.children[j].ID })
	marks := shared[sharedHeader:]
	for call := 0; call < calls; call++ {
		for kind := kindInvite; kind <= kindBye; kind++ {
			if !sent(call, kind, res.snd.slots) {
				continue
			}
			who := marks[3*call+kind]
			if who == 0 {
				res.lost++
				continue
			}
			if kind != kindInvite && marks[3*call] != 0 {
				res.inDialog++
				if who != marks[3*call] {
					res.passed++
				}
			}
		}
	}
	return res, nil
}

// expectLine waits for a receiver's line.
func expectLine(pr *proc, want string, d time.Duration) error {
	line, err := readLine(pr, d)
	if err != nil {
		return err
	}
	if line != want {
		return fmt.Errorf("receiver said %q, not %q", line, want)
	}
	return nil
}

func readLine(pr *proc, d time.Duration) (string, error) {
	type got struct {
		s   string
		err error
	}
	ch := make(chan got, 1)
	go func() {
		s, err := pr.out.ReadString('\n')
		ch <- got{strings.TrimSuffix(s, "\n"), err}
	}()
	select {
	case g := <-ch:
		return g.s, g.err
	case <-time.After(d):
		return "", errors.New("a receiver did not answer")
	}
}

// udpSocket is a UDP socket on 127.0.0.1:port, with the receive buffer
// sipvisor asks for (listeners.ReadBuffer; the kernel caps it at rmem_max).
func udpSocket(port int, reuse bool) (int, int, error) {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, 0, err
	}
	_ = unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_RCVBUF, 8<<20)
	if reuse {
		if err := unix.SetsockoptInt(fd, unix.SOL_SOCKET, unix.SO_REUSEPORT, 1); err != nil {
			unix.Close(fd)
			return -1, 0, err
		}
	}
	if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		return -1, 0, err
	}
	sa, err := unix.Getsockname(fd)
	if err != nil {
		unix.Close(fd)
		return -1, 0, err
	}
	return fd, sa.(*unix.SockaddrInet4).Port, nil
}

// sockets makes a design's sockets: for A, the UDP socket and a SEQPACKET
// pair per child; for B one shared socket; for C and D a SO_REUSEPORT
// group, in the order children get them (the order the BPF program's
// index means).
func sockets(design string, n int) ([]*os.File, int, error) {
	var files []*os.File
	fail := func(err error) ([]*os.File, int, error) {
		for _, f := range files {
			f.Close()
		}
		return nil, 0, err
	}
	switch design {
	case designA, designBPoll, designBExcl, designBBlock:
		fd, port, err := udpSocket(0, false)
		if err != nil {
			return nil, 0, err
		}
		files = append(files, os.NewFile(uintptr(fd), "udp"))
		// The B designs' children share one open file, and with it its
		// O_NONBLOCK: blocking for the one that blocks in recvfrom.
		if err := unix.SetNonblock(fd, design != designBBlock); err != nil {
			return fail(err)
		}
		if design == designA {
			for i := 0; i < n; i++ {
				fds, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
				if err != nil {
					return fail(err)
				}
				files = append(files, os.NewFile(uintptr(fds[0]), "ours"), os.NewFile(uintptr(fds[1]), "theirs"))
			}
		}
		return files, port, nil
	case designCRand, designCHash, designD:
		port := 0
		for i := 0; i < n; i++ {
			fd, p, err := udpSocket(port, true)
			if err != nil {
				return fail(err)
			}
			port = p
			files = append(files, os.NewFile(uintptr(fd), "udp"))
		}
		if design != designCHash {
			if err := attachRandom(int(files[0].Fd()), n); err != nil {
				return fail(fmt.Errorf("SO_ATTACH_REUSEPORT_CBPF: %w", err))
			}
		}
		return files, port, nil
	}
	return nil, 0, fmt.Errorf("unknown design %q", design)
}

// The classic BPF ancillary load of a random number (linux/filter.h);
// x/sys/unix does not declare them.
const (
	skfAdOff    int32 = -0x1000
	skfAdRandom int32 = 56
)

// attachRandom gives the reuseport group of fd a classic BPF program that
// returns a random socket index below n. Its only input is the random
// value: a cBPF program reads the payload at fixed offsets only, and the
// Call-ID has none.
func attachRandom(fd, n int) error {
	random := skfAdOff + skfAdRandom // an offset the kernel reads as signed
	prog := []unix.SockFilter{
		{Code: unix.BPF_LD | unix.BPF_W | unix.BPF_ABS, K: uint32(random)},
		{Code: unix.BPF_ALU | unix.BPF_MOD | unix.BPF_K, K: uint32(n)},
		{Code: unix.BPF_RET | unix.BPF_A},
	}
	return unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF,
		&unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]})
}

// sender is the sending socket: bound to one port and connected, so that
// every datagram has the same source and 4-tuple.
func sender(port int) (int, error) {
	fd, _, err := udpSocket(0, false)
	if err != nil {
		return -1, err
	}
	if err := unix.Connect(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
		unix.Close(fd)
		return -1, err
	}
	return fd, nil
}

func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "?"
	}
	return strings.Join(f[:3], " ")
}

func kernel() string {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return "?"
	}
	return "Linux " + unix.ByteSliceToString(u.Release[:])
}
