// Package harness runs the real sipvisor binary for the end-to-end tests
// under e2e/: it builds sipvisor and sipload once per test binary, starts
// servers on 127.0.0.1, reads their control address and metrics, and runs
// SIPp and sipload against them. Every wait here is on an observed event
// or a poll bounded by a deadline, never a fixed sleep.
package harness

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
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

// FreePort finds a free port on 127.0.0.1 for both UDP and TCP. SIPp and the
// config need numbers up front; the small window before use is acceptable
// on a test machine.
func FreePort(t testing.TB) int {
	t.Helper()
	for i := 0; i < 50; i++ {
		u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
		if err != nil {
			t.Fatal(err)
		}
		port := u.LocalAddr().(*net.UDPAddr).Port
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		u.Close()
		if err != nil {
			continue
		}
		l.Close()
		return port
	}
	t.Fatal("no free port")
	return 0
}

// Server is a running sipvisor process.
type Server struct {
	T    testing.TB
	Cmd  *exec.Cmd
	HTTP string // the control address, host:port
	Log  *SyncBuffer
	done chan error
}

// SyncBuffer is a buffer that a process writes while a test reads it.
type SyncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Start runs sipvisor on cfg (text with HTTP_PORT for the control port)
// and waits until every group has a ready worker.
func Start(t testing.TB, cfg string) *Server {
	t.Helper()
	return StartIn(t, t.TempDir(), cfg)
}

// StartIn is Start with the config file in dir, where the default location
// store keeps its database: a server started again in the same dir finds
// the registrations of the one before.
func StartIn(t testing.TB, dir, cfg string) *Server {
	t.Helper()
	httpPort := FreePort(t)
	path := filepath.Join(dir, "sipvisor.cfg")
	text := strings.ReplaceAll(cfg, "HTTP_PORT", strconv.Itoa(httpPort))
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &Server{T: t, HTTP: "127.0.0.1:" + strconv.Itoa(httpPort), Log: &SyncBuffer{}, done: make(chan error, 1)}
	s.Cmd = exec.Command(SipvisorBin, "-f", path)
	var w io.Writer = s.Log
	if testing.Verbose() {
		w = io.MultiWriter(s.Log, os.Stderr)
	}
	s.Cmd.Stdout, s.Cmd.Stderr = w, w
	if err := s.Cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.Cmd.Wait() }()
	t.Cleanup(func() { s.Stop() })
	deadline := time.Now().Add(30 * time.Second)
	for !s.Ready() {
		if err, exited := s.Exited(); exited {
			t.Fatalf("sipvisor exited: %v\n%s", err, s.Log.String())
		}
		if time.Now().After(deadline) {
			t.Fatalf("sipvisor not ready within 30s\n%s", s.Log.String())
		}
		time.Sleep(50 * time.Millisecond) // polling /readyz
	}
	return s
}

// ConfigPath is the config file the server was started with.
func (s *Server) ConfigPath() string { return s.Cmd.Args[len(s.Cmd.Args)-1] }

// Rewrite replaces the server's config file with cfg (HTTP_PORT for its
// control port, as given to Start); a reload or SIGHUP then reads it.
func (s *Server) Rewrite(cfg string) {
	s.T.Helper()
	port := s.HTTP[strings.LastIndexByte(s.HTTP, ':')+1:]
	if err := os.WriteFile(s.ConfigPath(), []byte(strings.ReplaceAll(cfg, "HTTP_PORT", port)), 0o644); err != nil {
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
	if s.Cmd.ProcessState != nil {
		return
	}
	if _, exited := s.Exited(); !exited {
		s.Cmd.Process.Signal(syscall.SIGTERM)
	}
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
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("want %s within %v", what, within)
		}
		time.Sleep(20 * time.Millisecond) // polling cond, bounded by the deadline
	}
}

// Tail is the last n lines of s.
func Tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
