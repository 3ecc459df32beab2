package harness

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/testkit"
)

// SIPpResult is what a SIPp run printed and its counters.
type SIPpResult struct {
	Out        string
	Exit       int
	Successful int
	Failed     int
	Created    int
	// Port is SIPp's local port, as SIPpRun.Port.
	Port int
}

// NeedSIPp skips the test when SIPp is not installed, and fails it in CI.
func NeedSIPp(t testing.TB) {
	t.Helper()
	if _, err := exec.LookPath("sipp"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("sipp not installed")
		}
		t.Skip("sipp not installed (apt-get install -y sip-tester)")
	}
}

// RunSIPp runs SIPp with args, bounded by timeout, and returns its screen.
func RunSIPp(t testing.TB, timeout time.Duration, args ...string) SIPpResult {
	t.Helper()
	return StartSIPp(t, timeout, args...).Wait()
}

// SIPpRun is a SIPp process that runs while the test goes on.
type SIPpRun struct {
	t       testing.TB
	cmd     *exec.Cmd
	out     *SyncBuffer
	done    chan struct{}
	timeout time.Duration
	quit    sync.Once
	// Port is SIPp's local port (-p): the one args gave, or the one
	// StartSIPp picked.
	Port int
}

// StartSIPp starts SIPp with args, bounded by timeout (it is killed then).
// Without -p in args it picks SIPp's local port (see FreePort) and returns
// once SIPp has bound it, picking another if it was taken meanwhile.
func StartSIPp(t testing.TB, timeout time.Duration, args ...string) *SIPpRun {
	t.Helper()
	NeedSIPp(t)
	if p := flagValue(args, "-p"); p != "" {
		r := startSIPp(t, timeout, args)
		r.Port, _ = strconv.Atoi(p)
		return r
	}
	proto := sippProto(args)
	for range bindTries {
		port := FreePort(t)
		r := startSIPp(t, timeout, append(append([]string{}, args...), "-p", strconv.Itoa(port)))
		r.Port = port
		if awaitOwnBound(t, r.cmd, r.done, r.out, proto, port) || !bindFailed(r.out.String()) {
			return r
		}
	}
	t.Fatalf("sipp: no free local port in %d tries", bindTries)
	return nil
}

func startSIPp(t testing.TB, timeout time.Duration, args []string) *SIPpRun {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	r := &SIPpRun{t: t, out: &SyncBuffer{}, done: make(chan struct{}), timeout: timeout}
	r.cmd = exec.CommandContext(ctx, "sipp", append([]string{"-buff_size", "4194304", "-nostdin"}, args...)...)
	r.cmd.Stdout, r.cmd.Stderr = r.out, r.out
	if err := r.cmd.Start(); err != nil {
		cancel()
		t.Fatal(err)
	}
	go func() {
		r.cmd.Wait()
		cancel()
		close(r.done)
	}()
	t.Cleanup(func() {
		r.cmd.Process.Kill()
		<-r.done
	})
	return r
}

// FreePort finds a port on 127.0.0.1 free for both UDP and TCP, for SIPp
// only: SIPp takes -p 0 for "5060, or the first free port of the 60 above
// it", a range the README's quick start uses, and does not say which it
// took until it exits. Everything else binds port 0 and reads the port
// the kernel gave. Another process may take the port before SIPp binds
// it: StartSIPp and SIPpServe see SIPp fail to bind and try another.
func FreePort(t testing.TB) int { return testkit.FreePort(t) }

// bindTries is how many ports a SIPp peer is given before the test fails:
// each is lost only if another process binds it in the moment between
// FreePort and SIPp's bind.
const bindTries = 5

// bindFailed says whether SIPp's output says it could not bind its port.
func bindFailed(out string) bool { return strings.Contains(out, "Unable to bind main socket") }

// flagValue is the value after flag in args, "" when absent.
func flagValue(args []string, flag string) string {
	for i, a := range args {
		if a == flag && i+1 < len(args) {
			return args[i+1]
		}
	}
	return ""
}

// sippProto is the protocol of SIPp's main socket for its -t: a listening
// TCP socket for t1 and tn, else UDP.
func sippProto(args []string) string {
	if strings.HasPrefix(flagValue(args, "-t"), "t") {
		return "tcp"
	}
	return "udp"
}

// awaitOwnBound waits until cmd's process has bound port (udp: a socket;
// tcp: a listening one) and says so, or until it exits first and says
// not, failing the test if neither happens within 10 s.
func awaitOwnBound(t testing.TB, cmd *exec.Cmd, done <-chan struct{}, out *SyncBuffer, proto string, port int) bool {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !BoundBy(cmd.Process.Pid, proto, port) {
		select {
		case <-done:
			return false
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s port %d not bound within 10s\n%s", cmd.Path, proto, port, Tail(out.String(), 20))
		}
		time.Sleep(10 * time.Millisecond) // polling /proc, bounded by the deadline
	}
	return true
}

// Quit asks SIPp to place no new call and to exit once the calls in
// progress have ended (SIGUSR1, as its 'q' key). Only for a run whose -m
// is not reached: SIPp aborts the calls in progress when it is asked to
// quit a second time, which reaching -m counts as.
func (r *SIPpRun) Quit() {
	r.quit.Do(func() { r.cmd.Process.Signal(syscall.SIGUSR1) })
}

// Wait waits for SIPp to exit and returns its screen and counters.
func (r *SIPpRun) Wait() SIPpResult {
	r.t.Helper()
	select {
	case <-r.done:
	case <-time.After(r.timeout + 10*time.Second):
		r.t.Fatalf("sipp did not end within %v\n%s", r.timeout, Tail(r.out.String(), 30))
	}
	res := SIPpResult{Out: r.out.String(), Exit: r.cmd.ProcessState.ExitCode(), Port: r.Port}
	res.Successful = SIPpCounter(res.Out, "Successful call")
	res.Failed = SIPpCounter(res.Out, "Failed call")
	res.Created = SIPpCounter(res.Out, "Outgoing calls created")
	return res
}

// SIPpCounter reads the cumulative column of a SIPp statistics row.
func SIPpCounter(screen, name string) int {
	v := -1
	for _, line := range strings.Split(screen, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), name) {
			parts := strings.Split(line, "|")
			if len(parts) >= 3 {
				if n, err := strconv.Atoi(strings.TrimSpace(parts[2])); err == nil {
					v = n
				}
			}
		}
	}
	return v
}

// SIPpRow reads the counters of a message row of SIPp's scenario screen
// (Messages, Retrans, Timeout, ...), the last one printed; nil when there is
// none. row is the row's start as printed, e.g. "REGISTER ---" or "503 <---".
func SIPpRow(screen, row string) []int {
	var v []int
	for _, line := range strings.Split(screen, "\n") {
		l := strings.TrimSpace(line)
		if !strings.HasPrefix(l, row) {
			continue
		}
		fields := strings.Fields(l)
		if len(fields) < 3 {
			continue
		}
		v = v[:0]
		for _, f := range fields[2:] {
			n, err := strconv.Atoi(f)
			if err != nil {
				break
			}
			v = append(v, n)
		}
	}
	return v
}

// Proc is a SIPp or sipload process serving for the whole test, ended
// with it.
type Proc struct {
	Cmd  *exec.Cmd
	Out  *SyncBuffer
	done chan struct{}
	// Port is the port it serves on, for the processes SIPpServe and
	// SiploadServe start.
	Port int
}

// StartProc starts bin with args, killed at the end of the test.
func StartProc(t testing.TB, bin string, args ...string) *Proc {
	t.Helper()
	p := &Proc{Cmd: exec.Command(bin, args...), Out: &SyncBuffer{}, done: make(chan struct{})}
	p.Cmd.Stdout, p.Cmd.Stderr = p.Out, p.Out
	if err := p.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.Cmd.Wait(); close(p.done) }()
	t.Cleanup(func() {
		p.Cmd.Process.Kill()
		<-p.done
	})
	return p
}

// Wait waits up to within for the process to exit and returns its exit
// code and output; it fails the test if it does not.
func (p *Proc) Wait(t testing.TB, within time.Duration) (int, string) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(within):
		t.Fatalf("%s did not end within %v\n%s", p.Cmd.Path, within, Tail(p.Out.String(), 20))
	}
	return p.Cmd.ProcessState.ExitCode(), p.Out.String()
}

// Bound says whether any process holds a socket bound to port, as BoundBy.
func Bound(proto string, port int) bool { return BoundBy(0, proto, port) }

// BoundBy says whether process pid (0: any) holds a socket bound to port on
// 127.0.0.1 or on every address: for tcp, a listening one. It reads /proc
// rather than trying to bind the port, which would race with the process
// that is about to; and it asks whose socket it is, since another process
// may hold the port instead.
func BoundBy(pid int, proto string, port int) bool {
	want := fmt.Sprintf(":%04X", port)
	inodes := map[string]bool{}
	for _, f := range []string{"/proc/net/" + proto, "/proc/net/" + proto + "6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 10 || !strings.HasSuffix(fields[1], want) {
				continue
			}
			if proto == "tcp" && fields[3] != "0A" { // LISTEN
				continue
			}
			inodes["socket:["+fields[9]+"]"] = true
		}
	}
	if len(inodes) == 0 || pid == 0 {
		return len(inodes) > 0
	}
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return false
	}
	for _, fd := range fds {
		if l, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name())); err == nil && inodes[l] {
			return true
		}
	}
	return false
}

// SIPpUAS starts SIPp's built-in UAS (extra: e.g. -t t1), ended with the
// test, and returns once it has bound its port, Proc.Port.
func SIPpUAS(t testing.TB, extra ...string) *Proc {
	t.Helper()
	return SIPpServe(t, append([]string{"-sn", "uas", "-i", "127.0.0.1"}, extra...)...)
}

// SIPpServe starts SIPp with args (a callee's: no -p) on a port it picks,
// ended with the test, and returns once SIPp has bound it, Proc.Port; a
// port taken meanwhile by someone else is replaced by another.
func SIPpServe(t testing.TB, args ...string) *Proc {
	t.Helper()
	NeedSIPp(t)
	proto := sippProto(args)
	for range bindTries {
		port := FreePort(t)
		p := StartProc(t, "sipp", append(append([]string{}, args...), "-p", strconv.Itoa(port), "-nostdin", "-buff_size", "4194304")...)
		p.Port = port
		if awaitOwnBound(t, p.Cmd, p.done, p.Out, proto, port) {
			return p
		}
		if !bindFailed(p.Out.String()) {
			t.Fatalf("sipp exited before binding %s port %d: %v\n%s", proto, port, p.Cmd.ProcessState, Tail(p.Out.String(), 20))
		}
	}
	t.Fatalf("sipp: no free port in %d tries", bindTries)
	return nil
}

var siploadOn = regexp.MustCompile(`(?m)^sipload: .* on \S+:(\d+)/\w+`)

// SiploadServe starts the sipload binary with args (a callee's: no -p) on
// port 0, ended with the test, and returns once it has said which port it
// bound, Proc.Port.
func SiploadServe(t testing.TB, args ...string) *Proc {
	t.Helper()
	p := StartProc(t, SiploadBin, append(append([]string{}, args...), "-p", "0")...)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if m := siploadOn.FindStringSubmatch(p.Out.String()); m != nil {
			p.Port, _ = strconv.Atoi(m[1])
			return p
		}
		select {
		case <-p.done:
			t.Fatalf("sipload exited before binding its port: %v\n%s", p.Cmd.ProcessState, Tail(p.Out.String(), 20))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sipload did not say its port within 10s\n%s", Tail(p.Out.String(), 20))
		}
		time.Sleep(10 * time.Millisecond) // polling its output, bounded by the deadline
	}
}

var siploadCalls = regexp.MustCompile(`offered (\d+)  succeeded (\d+)  failed (\d+)`)

// RunSipload runs the sipload binary with args and returns its succeeded
// and failed calls.
func RunSipload(t testing.TB, timeout time.Duration, args ...string) (ok, failed int, out string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	b, _ := exec.CommandContext(ctx, SiploadBin, append(args, "-q")...).CombinedOutput()
	m := siploadCalls.FindSubmatch(b)
	if m == nil {
		t.Fatalf("sipload %v: no summary\n%s", args, b)
	}
	ok, _ = strconv.Atoi(string(m[2]))
	failed, _ = strconv.Atoi(string(m[3]))
	return ok, failed, string(b)
}
