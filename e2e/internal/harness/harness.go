// Package harness runs the real sipvisor binary for the end-to-end tests
// under e2e/: it builds sipvisor and sipload once per test binary, starts
// servers on 127.0.0.1 with their sockets on port 0 and learns the ports
// they bound, reads their control address and metrics, and runs SIPp and
// sipload against them. Every wait here is on an observed event
// or a poll bounded by a deadline, never a fixed sleep.
package harness

import (
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/ctl"
	"github.com/sipvisor/sipvisor/internal/testkit"
)

var (
	// Root is the module's directory, for files of the repository that a
	// test reads (README.md, scenario files).
	Root string
	// SipvisorBin and SiploadBin are the binaries built by Main.
	SipvisorBin string
	SiploadBin  string
)

// Main builds the binaries once for every test of the package, sets the
// package's parallelism when the command line does not, and runs the
// tests. parallel is how many tests marked Parallel run at once: these
// tests wait on sockets and processes far more than they compute, so more
// of them than the machine has cores fit.
func Main(m *testing.M, parallel int) {
	flag.Parse()
	set := false
	flag.Visit(func(f *flag.Flag) { set = set || f.Name == "test.parallel" })
	if !set && parallel > 0 {
		flag.Set("test.parallel", strconv.Itoa(parallel))
	}
	os.Exit(run(m))
}

func run(m *testing.M) int {
	out, err := exec.Command("go", "env", "GOMOD").Output()
	if err != nil || strings.TrimSpace(string(out)) == "" {
		fmt.Fprintf(os.Stderr, "go env GOMOD: %v %s\n", err, out)
		return 1
	}
	Root = filepath.Dir(strings.TrimSpace(string(out)))
	dir, err := os.MkdirTemp("", "sipvisor-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(dir)
	SipvisorBin = filepath.Join(dir, "sipvisor")
	SiploadBin = filepath.Join(dir, "sipload")
	// Both at once: linking is most of a build once the cache is warm.
	var wg sync.WaitGroup
	errs := make(chan string, 2)
	for bin, pkg := range map[string]string{SipvisorBin: "./cmd/sipvisor", SiploadBin: "./cmd/sipload"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cmd := exec.Command("go", "build", "-o", bin, pkg)
			cmd.Dir = Root
			if out, err := cmd.CombinedOutput(); err != nil {
				errs <- fmt.Sprintf("build %s: %v\n%s", pkg, err, out)
			}
		}()
	}
	wg.Wait()
	close(errs)
	failed := false
	for e := range errs {
		fmt.Fprintln(os.Stderr, e)
		failed = true
	}
	if failed {
		return 1
	}
	return m.Run()
}

// Path is a file of the repository, by its path from the module's root.
func Path(rel string) string { return filepath.Join(Root, filepath.FromSlash(rel)) }

// Testdata is a file of e2e/testdata, shared by the e2e packages.
func Testdata(name string) string { return Path("e2e/testdata/" + name) }

// Server is a running sipvisor process.
type Server struct {
	T    testing.TB
	Cmd  *exec.Cmd
	HTTP string // the control address, host:port, as bound
	// Sockets are the addresses it serves, as bound and as its start-up
	// lines name them: the SIP sockets in config order, then http.
	Sockets []ctl.Socket
	Log     *SyncBuffer
	path    string
	done    chan error
}

// SyncBuffer is a buffer that a process writes while a test reads it.
type SyncBuffer = testkit.SyncBuffer

// Start runs sipvisor on cfg with the command-line flags given (e.g.
// -log-format json), waits until every group has a ready worker, and
// learns the addresses it bound from its start-up lines. The configs of
// the tests give port 0 to the SIP sockets and http_listen: the kernel
// picks free ports, so nothing guesses one that another test may take
// first. SIPPort, SIPAddr and HTTP are what was bound.
func Start(t testing.TB, cfg string, flags ...string) *Server {
	t.Helper()
	return StartIn(t, t.TempDir(), cfg, flags...)
}

// DirectReads, when set, is the udp_direct_reads every server the tests
// start runs with (unless its config says), so that the suite shows the
// guarantees hold both ways: SIPVISOR_E2E_DIRECT_READS=no (make test-door)
// passes every datagram through the supervisor's door.
var DirectReads = os.Getenv("SIPVISOR_E2E_DIRECT_READS")

// StartIn is Start with the config file in dir, where the default location
// store keeps its database: a server started again in the same dir finds
// the registrations of the one before.
func StartIn(t testing.TB, dir, cfg string, flags ...string) *Server {
	t.Helper()
	return startIn(t, dir, cfg, true, flags...)
}

// StartServing is Start without the wait for ready workers: it returns as
// soon as the start-up lines name the addresses bound, when the SIP
// sockets take datagrams and the workers may still be starting. Tests of
// what a node does with a message in its first moments use it.
func StartServing(t testing.TB, cfg string, flags ...string) *Server {
	t.Helper()
	return startIn(t, t.TempDir(), cfg, false, flags...)
}

// StartBin is Start with another sipvisor binary than the one built for
// the suite: a copy that a test replaces on disk, as an upgrade does.
func StartBin(t testing.TB, bin, cfg string, flags ...string) *Server {
	t.Helper()
	return startBin(t, bin, t.TempDir(), cfg, true, flags...)
}

func startIn(t testing.TB, dir, cfg string, waitReady bool, flags ...string) *Server {
	t.Helper()
	return startBin(t, SipvisorBin, dir, cfg, waitReady, flags...)
}

func startBin(t testing.TB, bin, dir, cfg string, waitReady bool, flags ...string) *Server {
	t.Helper()
	path := filepath.Join(dir, "sipvisor.cfg")
	if DirectReads != "" && !strings.Contains(cfg, "udp_direct_reads") {
		cfg += "\nudp_direct_reads = " + DirectReads + "\n"
	}
	if err := os.WriteFile(path, []byte(cfg), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Server{T: t, Log: &SyncBuffer{}, path: path, done: make(chan error, 1)}
	s.Cmd = exec.Command(bin, append(append([]string{}, flags...), "-f", path)...)
	var w io.Writer = s.Log
	if testing.Verbose() {
		w = io.MultiWriter(s.Log, os.Stderr)
	}
	s.Cmd.Stdout, s.Cmd.Stderr = w, w
	if err := s.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.Cmd.Wait() }()
	// Registered first so that it runs last, with the log of the stop too:
	// a failure in a run nobody watched keeps what the server said.
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("sipvisor's log (its last %d lines):\n%s", logTail, Tail(s.Log.String(), logTail))
		}
	})
	t.Cleanup(func() { s.Stop() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if s.HTTP == "" {
			if socks, ok := ServedSockets(s.Log.String()); ok {
				s.Sockets = socks
				s.HTTP = socks[len(socks)-1].Address
			}
		}
		if s.HTTP != "" && (!waitReady || s.Ready()) {
			return s
		}
		if err, exited := s.Exited(); exited {
			t.Fatalf("sipvisor exited: %v\n%s", err, s.Log.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("sipvisor not ready within 30s, or no start-up line for its control address\n%s", s.Log.String())
		}
		time.Sleep(20 * time.Millisecond) // polling the log, then /readyz, bounded by the deadline
	}
}

// logTail is how much of a server's log a failed test shows.
const logTail = 200

// SIPAddr is the address bound for the config's first SIP socket of proto
// (udp, tcp, tls), IP:PORT; a server without one fails the test.
func (s *Server) SIPAddr(proto string) string {
	s.T.Helper()
	for _, so := range s.Sockets {
		if so.Proto == proto {
			return so.Address
		}
	}
	s.T.Fatalf("sipvisor serves no %s socket: %v", proto, s.Sockets)
	return ""
}

// SIPPort is the port of SIPAddr.
func (s *Server) SIPPort(proto string) int {
	s.T.Helper()
	return PortOf(s.T, s.SIPAddr(proto))
}

// PortOf is the port of an IP:PORT address.
func PortOf(t testing.TB, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	n, err2 := strconv.Atoi(p)
	if err != nil || err2 != nil {
		t.Fatalf("not an IP:PORT address: %q", addr)
	}
	return n
}

// Pinned is cfg with each of its port-0 SIP sockets on the port this
// server bound for it (in config order): for a server started again that
// peers must find where they found this one, and under whose address its
// registrations were filed.
func (s *Server) Pinned(cfg string) string {
	s.T.Helper()
	for _, so := range s.Sockets {
		if so.Proto == "http" {
			continue
		}
		zero := "socket = " + so.Proto + ":127.0.0.1:0\n"
		if !strings.Contains(cfg, zero) {
			s.T.Fatalf("Pinned: the config has no line %q", zero)
		}
		cfg = strings.Replace(cfg, zero, "socket = "+so.Proto+":"+so.Address+"\n", 1)
	}
	return cfg
}

// servingText is a start-up line of the text log: msg=serving proto=udp
// address=127.0.0.1:40123.
var servingText = regexp.MustCompile(`\bmsg=serving\b.*?\bproto=(\S+) address=(\S+)`)

// ServedSockets reads the start-up lines of a log, text or JSON, one for
// each address served: the SIP sockets in config order, then http. ok
// says whether the http line, the last of them, has been written.
func ServedSockets(log string) (socks []ctl.Socket, ok bool) {
	for _, line := range strings.Split(log, "\n") {
		var so ctl.Socket
		if strings.HasPrefix(line, "{") {
			var l struct{ Msg, Proto, Address string }
			if json.Unmarshal([]byte(line), &l) != nil || l.Msg != "serving" {
				continue
			}
			so = ctl.Socket{Proto: l.Proto, Address: l.Address}
		} else if m := servingText.FindStringSubmatch(line); m != nil {
			so = ctl.Socket{Proto: m[1], Address: m[2]}
		} else {
			continue
		}
		socks = append(socks, so)
		if so.Proto == "http" {
			return socks, true
		}
	}
	return socks, false
}

// ConfigPath is the config file the server was started with.
func (s *Server) ConfigPath() string { return s.path }

// Rewrite replaces the server's config file with cfg; a reload or SIGHUP
// then reads it. Its sockets at port 0 are the ones bound: a reload keeps
// the sockets of the start.
func (s *Server) Rewrite(cfg string) {
	s.T.Helper()
	if err := os.WriteFile(s.path, []byte(cfg), 0o644); err != nil {
		s.T.Fatal(err)
	}
}

// Exited says whether the process has exited, and how.
func (s *Server) Exited() (error, bool) {
	select {
	case err := <-s.done:
		s.done <- err
		return err, true
	default:
		return nil, false
	}
}

// Wait waits up to within for the process to exit and returns its error;
// it fails the test if it does not.
func (s *Server) Wait(within time.Duration) error {
	s.T.Helper()
	select {
	case err := <-s.done:
		s.done <- err
		return err
	case <-time.After(within):
		s.T.Fatalf("sipvisor did not exit within %v\n%s", within, Tail(s.Log.String(), 20))
		return nil
	}
}

// Stop sends SIGTERM and waits for a clean exit.
func (s *Server) Stop() {
	// Asked of done, not of Cmd.ProcessState, which Wait writes in its own
	// goroutine: a process that exited on its own (an upgrade's old
	// generation) is not stopped again.
	if _, exited := s.Exited(); exited {
		return
	}
	s.Cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
		if err != nil {
			s.T.Errorf("sipvisor exit: %v\n%s", err, Tail(s.Log.String(), 40))
		}
	case <-time.After(60 * time.Second):
		s.Cmd.Process.Kill()
		s.T.Errorf("sipvisor did not stop on SIGTERM")
	}
}

// StopDrained stops the server and fails the test if a worker had to be
// killed at the drain timeout rather than finishing its transactions.
func (s *Server) StopDrained() {
	s.T.Helper()
	s.Stop()
	if log := s.Log.String(); strings.Contains(log, "did not drain in time") {
		s.T.Errorf("want every worker drained on SIGTERM, have one killed:\n%s", Tail(log, 20))
	}
}

// Ready says whether /readyz answers 200.
func (s *Server) Ready() bool {
	resp, err := http.Get("http://" + s.HTTP + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// Ctl runs `sipvisor ctl` against the server and returns its output. It
// passes the tests' own tokens only (-token), never one from the
// environment of whoever runs the tests.
func (s *Server) Ctl(args ...string) (string, error) {
	full := append([]string{"ctl", "-addr", s.HTTP}, args...)
	cmd := exec.Command(SipvisorBin, full...)
	cmd.Env = append(os.Environ(), "SIPVISOR_CTL_TOKEN=")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// WaitLog waits until the log holds text.
func (s *Server) WaitLog(text string, within time.Duration) {
	s.T.Helper()
	WaitFor(s.T, fmt.Sprintf("%q in the log", text), within, func() bool { return strings.Contains(s.Log.String(), text) })
}

// WaitFor polls cond until it holds, failing the test at the deadline.
func WaitFor(t testing.TB, what string, within time.Duration, cond func() bool) {
	t.Helper()
	testkit.WaitFor(t, within, what, cond)
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// StressRounds is how many times a transition test repeats its
// transition: a few by default, cheap enough for every run of the suite,
// SIPVISOR_STRESS_ROUNDS more to hunt a loss that shows once in many.
func StressRounds(t *testing.T, def int) int {
	t.Helper()
	if testing.Short() {
		t.Skip("a transition stress test: not under -short")
	}
	if v := os.Getenv("SIPVISOR_STRESS_ROUNDS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("SIPVISOR_STRESS_ROUNDS=%q: want a count of at least 1", v)
		}
		return n
	}
	return def
}

// MetricLines is the samples of the server's /metrics whose lines hold any
// of words, sorted, one an indented line: what a failing test prints to
// say where messages went.
func (s *Server) MetricLines(words ...string) string {
	resp, err := http.Get("http://" + s.HTTP + "/metrics")
	if err != nil {
		return err.Error()
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	var keep []string
	for _, l := range strings.Split(string(body), "\n") {
		if strings.HasPrefix(l, "#") {
			continue
		}
		for _, w := range words {
			if strings.Contains(l, w) {
				keep = append(keep, "  "+l)
				break
			}
		}
	}
	sort.Strings(keep)
	return strings.Join(keep, "\n")
}
