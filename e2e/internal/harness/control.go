package harness

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/sipvisor/sipvisor/ctl"
)

// PS is `ctl ps --json`.
func (s *Server) PS() []ctl.Group {
	s.T.Helper()
	out, err := s.Ctl("ps", "--json")
	if err != nil {
		s.T.Fatalf("ctl ps: %v: %s", err, out)
	}
	var gs []ctl.Group
	if err := json.Unmarshal([]byte(out), &gs); err != nil {
		s.T.Fatalf("ctl ps --json: %v: %s", err, out)
	}
	return gs
}

// Metric reads the sum of a metric's samples whose labels contain all of
// the given name="value" pairs. A series that does not exist fails the
// test: a renamed metric must not read as 0.
func (s *Server) Metric(name string, labels ...string) float64 {
	s.T.Helper()
	v, ok := s.MetricOK(name, labels...)
	if !ok {
		s.T.Fatalf("metric %s%v: no such series", name, labels)
	}
	return v
}

// MetricAbsentAs0 is Metric for a labelled series that the server only
// creates at its first event (a refusal or an exit by reason): absent, it
// reads as 0. Prefer Metric: only a check of "none happened" on such a
// series needs this.
func (s *Server) MetricAbsentAs0(name string, labels ...string) float64 {
	s.T.Helper()
	v, _ := s.MetricOK(name, labels...)
	return v
}

// MetricOK is the sum of the matching samples and whether any matched.
func (s *Server) MetricOK(name string, labels ...string) (float64, bool) {
	s.T.Helper()
	resp, err := http.Get("http://" + s.HTTP + "/metrics")
	if err != nil {
		s.T.Fatal(err)
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

// AwaitMetric waits until a metric's series reads want. A series that is
// absent reads as nothing, not as 0: waiting for 0 needs it to exist.
func (s *Server) AwaitMetric(want float64, name string, labels ...string) {
	s.T.Helper()
	s.awaitMetric(20*time.Second, fmt.Sprintf("%v", want), func(v float64) bool { return v == want }, name, labels...)
}

// AwaitMetricAtLeast waits until a metric's series reads min or more, and
// returns what it read. A labelled series the server creates at its first
// event may be absent until then.
func (s *Server) AwaitMetricAtLeast(min float64, within time.Duration, name string, labels ...string) float64 {
	s.T.Helper()
	return s.awaitMetric(within, fmt.Sprintf("%v or more", min), func(v float64) bool { return v >= min }, name, labels...)
}

func (s *Server) awaitMetric(within time.Duration, want string, ok func(float64) bool, name string, labels ...string) float64 {
	s.T.Helper()
	deadline := time.Now().Add(within)
	for {
		v, found := s.MetricOK(name, labels...)
		if found && ok(v) {
			return v
		}
		if time.Now().After(deadline) {
			have := fmt.Sprint(v)
			if !found {
				have = "no such series"
			}
			s.T.Fatalf("%s%v: want %s within %v, have %s\n%s", name, labels, want, within, have, Tail(s.Log.String(), 20))
		}
		time.Sleep(20 * time.Millisecond) // polling the metric, bounded by the deadline
	}
}

// Cycles is how many monitoring cycles the server has completed.
func (s *Server) Cycles() float64 {
	s.T.Helper()
	return s.Metric("sipvisor_supervisor_cycle_duration_seconds_count")
}

// AwaitCycles waits until the server has completed n more cycles: what
// it measured from then on has been seen by its monitors.
func (s *Server) AwaitCycles(n float64) {
	s.T.Helper()
	s.AwaitMetricAtLeast(s.Cycles()+n, 30*time.Second, "sipvisor_supervisor_cycle_duration_seconds_count")
}

// Stats is `ctl stats --json`.
func (s *Server) Stats() ctl.Stats {
	s.T.Helper()
	out, err := s.Ctl("stats", "--json")
	if err != nil {
		s.T.Fatalf("ctl stats: %v: %s", err, out)
	}
	var st ctl.Stats
	if err := json.Unmarshal([]byte(out), &st); err != nil {
		s.T.Fatalf("ctl stats --json: %v: %s", err, out)
	}
	return st
}

// Resource reads one row of `ctl resource-monitor --json`.
func (s *Server) Resource(name string) ctl.Resource {
	s.T.Helper()
	out, err := s.Ctl("resource-monitor", "--json")
	if err != nil {
		s.T.Fatalf("ctl resource-monitor: %v: %s", err, out)
	}
	var rs []ctl.Resource
	if err := json.Unmarshal([]byte(out), &rs); err != nil {
		s.T.Fatalf("ctl resource-monitor --json: %v: %s", err, out)
	}
	for _, r := range rs {
		if r.Name == name {
			return r
		}
	}
	s.T.Fatalf("resource-monitor has no %s: %s", name, out)
	return ctl.Resource{}
}

// Set runs `ctl set` and fails the test if it is refused.
func (s *Server) Set(path, value string) {
	s.T.Helper()
	if out, err := s.Ctl("set", path, value); err != nil {
		s.T.Fatalf("ctl set %s %s: %v: %s", path, value, err, out)
	}
}

// Status is the HTTP status of a GET on the control address.
func (s *Server) Status(path string) int {
	s.T.Helper()
	resp, err := http.Get("http://" + s.HTTP + path)
	if err != nil {
		s.T.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// AwaitSuspended waits until the server's suspended state is want, and
// returns how many cycles that took.
func (s *Server) AwaitSuspended(want bool) float64 {
	s.T.Helper()
	c0 := s.Cycles()
	deadline := time.Now().Add(20 * time.Second)
	for s.Stats().Suspended != want {
		if time.Now().After(deadline) {
			s.T.Fatalf("want suspended=%v within 20s, have %v\n%s", want, !want, Tail(s.Log.String(), 20))
		}
		time.Sleep(20 * time.Millisecond) // polling ctl stats, bounded by the deadline
	}
	return s.Cycles() - c0
}

// HoldsFor checks that the suspended state stays want for n whole cycles:
// the hysteresis band changes nothing in either direction.
func (s *Server) HoldsFor(want bool, n float64) {
	s.T.Helper()
	c0 := s.Cycles()
	deadline := time.Now().Add(30 * time.Second)
	for s.Cycles() < c0+n+1 {
		if st := s.Stats(); st.Suspended != want {
			s.T.Fatalf("want suspended=%v to hold, have %v (%v)", want, st.Suspended, st.SuspendReasons)
		}
		if time.Now().After(deadline) {
			s.T.Fatalf("fewer than %v cycles in 30s", n)
		}
		time.Sleep(20 * time.Millisecond) // polling ctl stats until n cycles have passed
	}
}

// AwaitResource waits until a resource-monitor row reads want.
func (s *Server) AwaitResource(name string, want float64) {
	s.T.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		r := s.Resource(name)
		if r.Value == want {
			return
		}
		if time.Now().After(deadline) {
			s.T.Fatalf("%s: want %v, have %v", name, want, r.Value)
		}
		time.Sleep(20 * time.Millisecond) // polling ctl resource-monitor, bounded by the deadline
	}
}

// Bindings is `ctl ul show [AOR] --json`.
func (s *Server) Bindings(aor ...string) []ctl.Binding {
	s.T.Helper()
	out, err := s.Ctl(append(append([]string{"ul", "show"}, aor...), "--json")...)
	if err != nil {
		s.T.Fatalf("ctl ul show: %v: %s", err, out)
	}
	var bs []ctl.Binding
	if err := json.Unmarshal([]byte(out), &bs); err != nil {
		s.T.Fatalf("ctl ul show --json: %v: %.200s", err, out)
	}
	return bs
}

// Live counts a group's workers that are spawning or ready: those that
// take new work.
func Live(gs []ctl.Group, group string) (n int, all []string) {
	for _, g := range gs {
		if g.Name != group {
			continue
		}
		for _, w := range g.Workers {
			all = append(all, fmt.Sprintf("%d/%d:%s", w.ID, w.Pid, w.State))
			if w.State == "ready" || w.State == "spawning" {
				n++
			}
		}
	}
	return n, all
}

// WaitWorkers polls `ctl ps` until the group has exactly want workers, all
// of them live (the drained ones have exited).
func (s *Server) WaitWorkers(group string, want int, within time.Duration) {
	s.T.Helper()
	deadline := time.Now().Add(within)
	for {
		n, all := Live(s.PS(), group)
		if n == want && len(all) == want {
			return
		}
		if time.Now().After(deadline) {
			s.T.Fatalf("want %d live workers in %s within %v, have %v\n%s", want, group, within, all, Tail(s.Log.String(), 30))
		}
		time.Sleep(20 * time.Millisecond) // polling ctl ps, bounded by the deadline
	}
}

// WorkerPids lists every worker's pid from `ctl ps --json`, with its group.
func (s *Server) WorkerPids() map[int]string {
	s.T.Helper()
	pids := map[int]string{}
	for _, g := range s.PS() {
		for _, w := range g.Workers {
			if w.Pid > 0 {
				pids[w.Pid] = g.Name
			}
		}
	}
	return pids
}

// GroupPids is the pids of the group's workers now.
func (s *Server) GroupPids(group string) map[int]bool {
	s.T.Helper()
	pids := map[int]bool{}
	for pid, g := range s.WorkerPids() {
		if g == group {
			pids[pid] = true
		}
	}
	return pids
}

// WaitRenewed waits until none of the old workers is left in the group and
// the group has a ready worker.
func (s *Server) WaitRenewed(group string, old map[int]bool, within time.Duration) {
	s.T.Helper()
	deadline := time.Now().Add(within)
	for {
		left, ready := 0, 0
		for _, g := range s.PS() {
			for _, w := range g.Workers {
				if g.Name != group {
					continue
				}
				if old[w.Pid] {
					left++
				} else if w.State == "ready" {
					ready++
				}
			}
		}
		if left == 0 && ready > 0 {
			return
		}
		if time.Now().After(deadline) {
			s.T.Fatalf("want the workers of %s renewed within %v, have %d old left and %d new ready\n%s", group, within, left, ready, Tail(s.Log.String(), 20))
		}
		time.Sleep(20 * time.Millisecond) // polling ctl ps, bounded by the deadline
	}
}

// ReplaceWorkers kills every worker of the group and waits for as many
// replacements, which run the script of the config in force.
func (s *Server) ReplaceWorkers(group string, want int) {
	s.T.Helper()
	old := map[int]bool{}
	for pid, g := range s.WorkerPids() {
		if g == group {
			old[pid] = true
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		fresh := 0
		stale := false
		for _, g := range s.PS() {
			for _, w := range g.Workers {
				if g.Name != group {
					continue
				}
				if old[w.Pid] {
					stale = true
				} else if w.State == "ready" {
					fresh++
				}
			}
		}
		if !stale && fresh == want {
			return
		}
		if time.Now().After(deadline) {
			s.T.Fatalf("want %d new ready workers in %s, have %d (old ones listed: %v)\n%s", want, group, fresh, stale, Tail(s.Log.String(), 20))
		}
		time.Sleep(20 * time.Millisecond) // polling ctl ps, bounded by the deadline
	}
}

// PortDatagrams is how many datagrams the server's UDP SIP ports read: its
// doors', and with direct reads those its workers read themselves.
func (s *Server) PortDatagrams() float64 {
	s.T.Helper()
	return s.Metric("sipvisor_frontdoor_datagrams_received_total") +
		s.MetricAbsentAs0("sipvisor_frontdoor_direct_datagrams_total")
}

// AwaitPortDatagrams waits until the UDP SIP ports have read at least n
// datagrams (PortDatagrams).
func (s *Server) AwaitPortDatagrams(n float64, within time.Duration) {
	s.T.Helper()
	WaitFor(s.T, fmt.Sprintf("%v datagrams read from the SIP ports", n), within, func() bool { return s.PortDatagrams() >= n })
}

// AwaitDoorDecides waits, with direct reads, until every datagram goes
// through the doors again (a protection closed the workers' gate): the
// workers' view of the gate follows within a refresh. Without direct reads
// it returns at once.
func (s *Server) AwaitDoorDecides() {
	s.T.Helper()
	WaitFor(s.T, "datagrams through the doors", 5*time.Second, func() bool {
		return s.MetricAbsentAs0("sipvisor_frontdoor_direct_workers") == 0
	})
}
