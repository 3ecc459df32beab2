package supervisor

import (
	"bytes"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/pool"
)

// buildSipvisor builds the real binary once per test process.
func buildSipvisor(tb testing.TB) string {
	tb.Helper()
	bin := filepath.Join(tb.TempDir(), "sipvisor")
	cmd := exec.Command("go", "build", "-o", bin, "github.com/sipvisor/sipvisor/cmd/sipvisor")
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("build sipvisor: %v\n%s", err, out)
	}
	return bin
}

// BenchmarkWorkerSpawnReady measures, with the real sipvisor binary running
// the built-in registrar and proxy script, the time from fork to a worker's
// ready byte, and the resident memory of an idle worker.
func BenchmarkWorkerSpawnReady(b *testing.B) {
	bin := buildSipvisor(b)
	sock, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		b.Fatal(err)
	}
	defer sock.Close()
	f, err := sock.File()
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	cfgPath := filepath.Join(b.TempDir(), "default.cfg")
	os.WriteFile(cfgPath, []byte(config.DefaultText), 0o644)
	ready := make(chan *pool.Worker, b.N+1)
	g := pool.NewGroup(pool.GroupOptions{Name: "bench", Kind: pool.KindUDP, Ceiling: b.N + 1,
		Command: pool.Command{Path: bin, Args: []string{"worker"}}, ConfigPath: cfgPath,
		Sockets: []*os.File{f}, SocketNames: []string{"udp:" + sock.LocalAddr().String()},
		OnReady: func(w *pool.Worker) { ready <- w }})
	defer g.Stop(time.Now().Add(10 * time.Second))

	var total time.Duration
	var last *pool.Worker
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		t0 := time.Now()
		w, err := g.Grow()
		if err != nil {
			b.Fatal(err)
		}
		select {
		case r := <-ready:
			if r != w {
				b.Fatalf("worker %d ready while worker %d was awaited", r.ID, w.ID)
			}
		case <-w.Done():
			b.Fatalf("worker exited: %s", w.ExitReason())
		case <-time.After(time.Minute):
			b.Fatal("worker not ready within a minute")
		}
		total += time.Since(t0)
		last = w
	}
	b.StopTimer()
	b.ReportMetric(float64(total.Microseconds())/1000/float64(b.N), "ms/ready")
	time.Sleep(500 * time.Millisecond) // idle for a moment, so that the RSS is the steady state and not start-up's
	// RSS counts the binary's text pages, which every worker shares with the
	// supervisor and the others; PSS and the anonymous pages are what one
	// more worker costs.
	mem := smapsRollup(last.Pid)
	b.ReportMetric(float64(mem["Rss"])/(1<<20), "idle-rss-MB")
	b.ReportMetric(float64(mem["Pss"])/(1<<20), "idle-pss-MB")
	b.ReportMetric(float64(mem["Anonymous"])/(1<<20), "idle-anon-MB")
}

// smapsRollup reads /proc/PID/smaps_rollup into bytes by field name.
func smapsRollup(pid int) map[string]int64 {
	out := map[string]int64{}
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/smaps_rollup")
	if err != nil {
		return out
	}
	for _, l := range bytes.Split(b, []byte("\n")) {
		name, v, ok := strings.Cut(string(l), ":")
		if !ok {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
		if err == nil {
			out[name] = kb << 10
		}
	}
	return out
}
