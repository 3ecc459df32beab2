// Package redistest runs a real redis-server for tests: on 127.0.0.1, a free
// port, a temporary directory with its append-only file (so a restarted
// server has its data back), stopped by its pid when the test ends.
package redistest

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// Server is one redis-server process.
type Server struct {
	t    testing.TB
	Port int
	dir  string
	cmd  *exec.Cmd
	done chan struct{}
}

// URL is the server's redis:// URL, database 0.
func (s *Server) URL() string { return fmt.Sprintf("redis://127.0.0.1:%d/0", s.Port) }

// Start runs a redis-server. Without the binary the test is skipped, unless
// CI is set: CI installs it (.ci/run), and its absence there is a failure.
func Start(t testing.TB) *Server {
	t.Helper()
	if _, err := exec.LookPath("redis-server"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("redis-server not installed (CI installs the Debian package redis-server): %v", err)
		}
		t.Skip("redis-server not installed (apt-get install redis-server)")
	}
	s := &Server{t: t, Port: freePort(t), dir: t.TempDir()}
	s.Start()
	t.Cleanup(s.Stop)
	return s
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}

// Start (re)starts the server on its port; it returns once the server
// answers PING.
func (s *Server) Start() {
	s.t.Helper()
	if s.cmd != nil {
		s.t.Fatal("redistest: server already running")
	}
	s.cmd = exec.Command("redis-server", "--port", strconv.Itoa(s.Port), "--bind", "127.0.0.1",
		"--dir", s.dir, "--save", "", "--appendonly", "yes", "--appendfsync", "always", "--daemonize", "no",
		"--logfile", filepath.Join(s.dir, "redis.log"))
	if err := s.cmd.Start(); err != nil {
		s.t.Fatalf("start redis-server: %v", err)
	}
	s.done = make(chan struct{})
	go func(c *exec.Cmd, done chan struct{}) { c.Wait(); close(done) }(s.cmd, s.done)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if s.ping() {
			return
		}
		select {
		case <-s.done:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			s.cmd = nil
			s.t.Fatalf("redis-server exited at start:\n%s", log)
		default:
		}
		if time.Now().After(deadline) {
			s.Stop()
			s.t.Fatal("redis-server did not answer PING within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func (s *Server) ping() bool {
	c, err := net.DialTimeout("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.Port)), time.Second)
	if err != nil {
		return false
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	if _, err := c.Write([]byte("PING\r\n")); err != nil {
		return false
	}
	line, err := bufio.NewReader(c).ReadString('\n')
	return err == nil && line == "+PONG\r\n"
}

// Stop ends the server by its pid (SIGTERM, then SIGKILL after 5 s) and
// waits for it to exit.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(5 * time.Second):
		s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.done
	}
	s.cmd = nil
}
