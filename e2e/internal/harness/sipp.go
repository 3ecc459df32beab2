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
)

// SIPpResult is what a SIPp run printed and its counters.
type SIPpResult struct {
	Out        string
	Exit       int
	Successful int
	Failed     int
	Created    int
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
}

// StartSIPp starts SIPp with args, bounded by timeout (it is killed then).
func StartSIPp(t testing.TB, timeout time.Duration, args ...string) *SIPpRun {
	t.Helper()
	NeedSIPp(t)
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
	res := SIPpResult{Out: r.out.String(), Exit: r.cmd.ProcessState.ExitCode()}
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

// AwaitBound waits until the process has bound port on 127.0.0.1 (udp:
// a socket; tcp: a listening one), failing the test if it exits first or
// takes over 10 s.
func (p *Proc) AwaitBound(t testing.TB, proto string, port int) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !Bound(proto, port) {
		select {
		case <-p.done:
			t.Fatalf("%s exited before binding %s port %d: %v\n%s", p.Cmd.Path, proto, port, p.Cmd.ProcessState, Tail(p.Out.String(), 20))
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s port %d not bound within 10s\n%s", p.Cmd.Path, proto, port, Tail(p.Out.String(), 20))
		}
		time.Sleep(10 * time.Millisecond) // polling /proc/net, bounded by the deadline
	}
}

// Bound says whether a socket is bound to port on 127.0.0.1 or on every
// address: for tcp, a listening one. It reads /proc/net rather than trying
// to bind the port, which would race with the process that is about to.
func Bound(proto string, port int) bool {
	want := fmt.Sprintf(":%04X", port)
	for _, f := range []string{"/proc/net/" + proto, "/proc/net/" + proto + "6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fields := strings.Fields(line)
			if len(fields) < 4 || !strings.HasSuffix(fields[1], want) {
				continue
			}
			if proto == "tcp" && fields[3] != "0A" { // LISTEN
				continue
			}
			return true
		}
	}
	return false
}

// SIPpUAS starts SIPp's built-in UAS on port (extra: e.g. -t t1), ended
// with the test, and returns once it has bound its socket.
func SIPpUAS(t testing.TB, port int, extra ...string) *Proc {
	t.Helper()
	NeedSIPp(t)
	args := append([]string{"-sn", "uas", "-i", "127.0.0.1", "-p", strconv.Itoa(port), "-nostdin", "-buff_size", "4194304"}, extra...)
	p := StartProc(t, "sipp", args...)
	proto := "udp"
	for i, a := range extra {
		if a == "-t" && i+1 < len(extra) && strings.HasPrefix(extra[i+1], "t") {
			proto = "tcp"
		}
	}
	p.AwaitBound(t, proto, port)
	return p
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
