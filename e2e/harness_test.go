package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
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

	"github.com/sipvisor/sipvisor/ctl"
)

var (
	binDir      string
	sipvisorBin string
	sipploadBin string
)

// TestMain builds the binaries once for every test here.
func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "sipvisor-e2e")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	sipvisorBin = filepath.Join(dir, "sipvisor")
	sipploadBin = filepath.Join(dir, "sipload")
	for bin, pkg := range map[string]string{sipvisorBin: "../cmd/sipvisor", sipploadBin: "../cmd/sipload"} {
		out, err := exec.Command("go", "build", "-o", bin, pkg).CombinedOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "build %s: %v\n%s", pkg, err, out)
			os.RemoveAll(dir)
			os.Exit(1)
		}
	}
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// freePort finds a free port on 127.0.0.1 for both UDP and TCP. SIPp and the
// config need numbers up front; the small window before use is acceptable
// on a test machine.
func freePort(t testing.TB) int {
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

// server is a running sipvisor process.
type server struct {
	t    testing.TB
	cmd  *exec.Cmd
	http string
	log  *syncBuffer
	done chan error
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startServer runs sipvisor on cfg (text with %[1]d for the HTTP port) and
// waits until every group has a ready worker.
func startServer(t testing.TB, cfg string) *server {
	t.Helper()
	return startServerIn(t, t.TempDir(), cfg)
}

// startServerIn is startServer with the config file in dir, where the
// default location store keeps its database: a server started again in the
// same dir finds the registrations of the one before.
func startServerIn(t testing.TB, dir, cfg string) *server {
	t.Helper()
	httpPort := freePort(t)
	path := filepath.Join(dir, "sipvisor.cfg")
	text := strings.ReplaceAll(cfg, "HTTP_PORT", strconv.Itoa(httpPort))
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	s := &server{t: t, http: "127.0.0.1:" + strconv.Itoa(httpPort), log: &syncBuffer{}, done: make(chan error, 1)}
	s.cmd = exec.Command(sipvisorBin, "-f", path)
	var w io.Writer = s.log
	if testing.Verbose() {
		w = io.MultiWriter(s.log, os.Stderr)
	}
	s.cmd.Stdout, s.cmd.Stderr = w, w
	if err := s.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { s.done <- s.cmd.Wait() }()
	t.Cleanup(func() { s.stop() })
	deadline := time.Now().Add(30 * time.Second)
	for {
		if s.ready() {
			return s
		}
		select {
		case err := <-s.done:
			s.done <- err
			t.Fatalf("sipvisor exited: %v\n%s", err, s.log.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("sipvisor not ready\n%s", s.log.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// stop sends SIGTERM and waits for a clean exit.
func (s *server) stop() {
	if s.cmd.ProcessState != nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-s.done:
		s.done <- err
		if err != nil {
			s.t.Errorf("sipvisor exit: %v\n%s", err, tail(s.log.String(), 40))
		}
	case <-time.After(60 * time.Second):
		s.cmd.Process.Kill()
		s.t.Errorf("sipvisor did not stop on SIGTERM")
	}
}

// stopDrained stops the server and fails the test if a worker had to be
// killed at the drain timeout rather than finishing its transactions.
func (s *server) stopDrained() {
	s.t.Helper()
	s.stop()
	if log := s.log.String(); strings.Contains(log, "did not drain in time") {
		s.t.Errorf("want every worker drained on SIGTERM, have one killed:\n%s", tail(log, 20))
	}
}

func (s *server) ready() bool {
	resp, err := http.Get("http://" + s.http + "/readyz")
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusOK
}

// ctl runs `sipvisor ctl` against the server and returns its output.
func (s *server) ctl(args ...string) (string, error) {
	full := append([]string{"ctl", "-addr", s.http}, args...)
	out, err := exec.Command(sipvisorBin, full...).CombinedOutput()
	return string(out), err
}

// ps is `ctl ps --json`.
func (s *server) ps() []ctl.Group {
	s.t.Helper()
	out, err := s.ctl("ps", "--json")
	if err != nil {
		s.t.Fatalf("ctl ps: %v: %s", err, out)
	}
	var gs []ctl.Group
	if err := json.Unmarshal([]byte(out), &gs); err != nil {
		s.t.Fatalf("ctl ps --json: %v: %s", err, out)
	}
	return gs
}

// metric reads the sum of a metric's samples whose labels contain all of
// the given name="value" pairs; 0 when there is none (see mustMetric).
func (s *server) metric(name string, labels ...string) float64 {
	s.t.Helper()
	v, _ := s.metricOK(name, labels...)
	return v
}

// metricOK is metric that also says whether any series matched.
func (s *server) metricOK(name string, labels ...string) (float64, bool) {
	s.t.Helper()
	resp, err := http.Get("http://" + s.http + "/metrics")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var sum float64
	var found bool
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest != "" && rest[0] != '{' && rest[0] != ' ' {
			continue
		}
		ok := true
		for _, l := range labels {
			if !strings.Contains(rest, l) {
				ok = false
			}
		}
		if !ok {
			continue
		}
		f := strings.Fields(rest)
		v, _ := strconv.ParseFloat(f[len(f)-1], 64)
		sum += v
		found = true
	}
	return sum, found
}

// sipp runs SIPp with args, bounded by timeout, and returns its screen.
type sippResult struct {
	Out        string
	Exit       int
	Successful int
	Failed     int
	Created    int
}

func runSIPp(t testing.TB, timeout time.Duration, args ...string) sippResult {
	t.Helper()
	if _, err := exec.LookPath("sipp"); err != nil {
		t.Skip("sipp not installed (apt-get install -y sip-tester)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, "sipp", append([]string{"-buff_size", "4194304", "-nostdin"}, args...)...)
	out, _ := cmd.CombinedOutput()
	r := sippResult{Out: string(out), Exit: cmd.ProcessState.ExitCode()}
	r.Successful = sippCounter(r.Out, "Successful call")
	r.Failed = sippCounter(r.Out, "Failed call")
	r.Created = sippCounter(r.Out, "Outgoing calls created")
	return r
}

// sippCounter reads the cumulative column of a SIPp statistics row.
func sippCounter(screen, name string) int {
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

// sippUAS starts a SIPp UAS in the background, ended with the test.
func sippUAS(t testing.TB, port int, extra ...string) {
	t.Helper()
	if _, err := exec.LookPath("sipp"); err != nil {
		t.Skip("sipp not installed (apt-get install -y sip-tester)")
	}
	args := append([]string{"-sn", "uas", "-i", "127.0.0.1", "-p", strconv.Itoa(port), "-nostdin", "-buff_size", "4194304"}, extra...)
	cmd := exec.Command("sipp", args...)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	time.Sleep(200 * time.Millisecond)
}

func tail(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
