package ctl

import (
	"errors"
	"fmt"
	"sync"
	"time"
)

// testBackend is a small server state behind the control API: real Params
// over plain fields, with the same refusals the supervisor makes (a low
// watermark must stay under its high one), so the tests see what an operator
// would.
type testBackend struct {
	mu        sync.Mutex
	params    *Params
	marks     map[string][2]float64 // monitor → high, low
	maxSess   float64
	admission float64
	throttle  float64
	rtt       float64
	manual    bool
	reloads   int
	reloadErr error
}

var testMonitors = []string{"event_queue_usage", "heap_usage", "number_of_sessions", "system_memory_usage"}

func newTestBackend() *testBackend {
	b := &testBackend{
		params: NewParams(),
		marks: map[string][2]float64{
			"event_queue_usage":   {80, 50},
			"heap_usage":          {85, 70},
			"number_of_sessions":  {100000, 80000},
			"system_memory_usage": {85, 70},
		},
		throttle: 1,
		rtt:      1,
	}
	for _, m := range testMonitors {
		kind := Percent
		if m == "number_of_sessions" {
			kind = Count
		}
		for i, side := range []string{"high", "low"} {
			b.params.Register("suspend_watermarks/"+m+"/"+side, func() float64 {
				b.mu.Lock()
				defer b.mu.Unlock()
				return b.marks[m][i]
			}, func(v float64) error {
				b.mu.Lock()
				defer b.mu.Unlock()
				p := b.marks[m]
				p[i] = v
				if p[1] >= p[0] {
					return fmt.Errorf("low watermark %v must be under high watermark %v", fmtNum(p[1]), fmtNum(p[0]))
				}
				b.marks[m] = p
				return nil
			}, kind)
		}
	}
	b.params.Register("limits/max_sessions", b.getter(&b.maxSess), b.setter(&b.maxSess), Count)
	b.params.Register("limits/queue_admission_threshold", b.getter(&b.admission), func(v float64) error {
		if v > 90 {
			return errors.New("queue admission threshold must be 0–90%")
		}
		return b.setter(&b.admission)(v)
	}, Percent)
	b.params.Register("throttle/enable", b.getter(&b.throttle), b.setter(&b.throttle), Bool)
	b.params.Register("throttle/rtt_threshold", b.getter(&b.rtt), b.setter(&b.rtt), Seconds)
	b.params.Register("sessions", func() float64 { return 42 }, nil, Count)
	return b
}

func (b *testBackend) getter(f *float64) func() float64 {
	return func() float64 {
		b.mu.Lock()
		defer b.mu.Unlock()
		return *f
	}
}

func (b *testBackend) setter(f *float64) func(float64) error {
	return func(v float64) error {
		b.mu.Lock()
		defer b.mu.Unlock()
		*f = v
		return nil
	}
}

func (b *testBackend) Params() *Params { return b.params }

func (b *testBackend) PS() []Group {
	return []Group{
		{Name: "udp:127.0.0.1:5060", Kind: "udp", Profile: "PROFILE_UDP", Load: Loads{62.5, 58.25, 40},
			Workers: []Worker{
				{ID: 1, Pid: 4101, State: "ready", Load: Loads{70, 60.5, 41}, Queue: 3, QueueWaitSeconds: 0.0125, Sessions: 120, HeapBytes: 50855936, GCCPUSeconds: 1.2345, CPUSeconds: 98.7, GCCPUPercent: ptr(1.25), Age: 2*time.Hour + 5*time.Minute, Handled: 90000, Dropped: 1},
				{ID: 2, Pid: 4102, State: "ready", Load: Loads{55, 56, 39}, Queue: 0, Sessions: 97, HeapBytes: 12582912, GCCPUSeconds: 0.25, CPUSeconds: 4.5, GCCPUPercent: ptr(0.5), Age: 42 * time.Second, Handled: 1200},
				{ID: 3, Pid: 4377, State: "draining", Load: Loads{12.25, 30, 35}, Queue: 1, QueueWaitSeconds: 1.5, Sessions: 4, HeapBytes: 3145728, GCCPUSeconds: 12.5, CPUSeconds: 800, GCCPUPercent: ptr(2.04), Age: 3*24*time.Hour + 7*time.Hour},
			}},
		{Name: "tcp", Kind: "tcp", Load: Loads{}, Workers: []Worker{
			{ID: 1, Pid: 4103, State: "spawning", Age: 0},
		}},
	}
}

func (b *testBackend) Sockets() []Socket {
	return []Socket{
		{Proto: "udp", Address: "127.0.0.1:5060"},
		{Proto: "tcp", Address: "127.0.0.1:40123"},
		{Proto: "http", Address: "127.0.0.1:8888"},
	}
}

func (b *testBackend) Stats() Stats {
	b.mu.Lock()
	defer b.mu.Unlock()
	s := Stats{
		UptimeSeconds: 3725,
		Healthy:       true,
		Throttle: []Throttle{
			{Group: "udp:127.0.0.1:5060", Enabled: b.throttle != 0, SharePercent: 20, RTTSeconds: 1.2345, ThresholdSeconds: b.rtt},
			{Group: "tcp", Enabled: b.throttle != 0, RTTSeconds: 0.003, ThresholdSeconds: b.rtt},
		},
		Flips:             map[string]int{"suspend": 2, "group/udp:127.0.0.1:5060": 1},
		FlipThreshold:     10,
		FlipWindowSeconds: 1800,
		Counters:          map[string]float64{"sessions": 42, "refused_suspended": 7, "calls": 30},
	}
	if b.manual {
		s.Suspended = true
		s.SuspendedManually = true
		s.SuspendedSeconds = 65
		s.SuspendReasons = []string{"suspended by the operator"}
		s.Warning = "server is suspended by the operator. It will resume when the operator resumes it."
	}
	return s
}

func (b *testBackend) Suspend() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.manual = true
	return nil
}

func (b *testBackend) Resume() error {
	b.mu.Lock()
	defer b.mu.Unlock()
	if !b.manual {
		return errors.New("not suspended by the operator")
	}
	b.manual = false
	return nil
}

func (b *testBackend) ResourceMonitor() []Resource {
	b.mu.Lock()
	defer b.mu.Unlock()
	mem := b.marks["system_memory_usage"]
	return []Resource{
		{Name: "event_queue_usage", Value: 12, High: b.marks["event_queue_usage"][0], Low: b.marks["event_queue_usage"][1], Unit: "%"},
		{Name: "heap_usage", Value: 33.333, High: b.marks["heap_usage"][0], Low: b.marks["heap_usage"][1], Unit: "%"},
		{Name: "number_of_sessions", Value: 42, High: b.marks["number_of_sessions"][0], Low: b.marks["number_of_sessions"][1]},
		{Name: "system_memory_usage", Value: 86.24, High: mem[0], Low: mem[1], Unit: "%", Over: 86.24 >= mem[0]},
		{Name: "max_sessions", Value: 42, High: b.maxSess},
		{Name: "throttle_rtt/udp:127.0.0.1:5060", Value: 1.2345, High: b.rtt, Unit: "s", Over: 1.2345 > b.rtt},
	}
}

func (b *testBackend) Reload() (ReloadResult, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.reloadErr != nil {
		return ReloadResult{}, b.reloadErr
	}
	b.reloads++
	return ReloadResult{Changed: []string{"max_calls", "throttle_rtt_threshold"},
		RestartNeeded: []string{"sipvisor.cfg:4: socket udp:127.0.0.1:5062 added: it is bound at the next restart"}}, nil
}

var testNow = time.Date(2026, 11, 30, 12, 0, 0, 0, time.UTC)

var testBindings = []Binding{
	{AOR: "sip:alice@example.com", Contact: "<sip:alice@127.0.0.1:5070>;expires=3600", Expires: testNow.Add(3599 * time.Second), Source: "127.0.0.1:5070"},
	{AOR: "sip:alice@example.com", Contact: "<sip:alice@127.0.0.1:5072>", Expires: testNow.Add(90 * time.Second), Source: "127.0.0.1:5072"},
	{AOR: "sip:bob@example.com", Contact: "<sip:bob@127.0.0.1:5080>", Expires: testNow.Add(-time.Second), Source: ""},
}

func (b *testBackend) Locations(aor string) ([]Binding, error) {
	if aor == "" {
		return testBindings, nil
	}
	var out []Binding
	for _, x := range testBindings {
		if x.AOR == aor {
			out = append(out, x)
		}
	}
	return out, nil
}

func (b *testBackend) RemoveLocation(aor, contact string) (int, error) {
	n := 0
	for _, x := range testBindings {
		if x.AOR == aor && (contact == "" || x.Contact == contact) {
			n++
		}
	}
	if n == 0 {
		return 0, ErrNoBinding
	}
	return n, nil
}

var _ Backend = (*testBackend)(nil)

func (b *testBackend) Users() ([]User, error) {
	return []User{{Name: "alice", Realm: "example.com"}, {Name: "bob", Realm: "example.com"}}, nil
}

func (b *testBackend) AddUser(u User) error {
	if len(u.HA1MD5) != 32 || len(u.HA1SHA256) != 64 {
		return errors.New("bad hashes")
	}
	return nil
}

func (b *testBackend) RemoveUser(name, realm string) error {
	if name != "alice" || realm != "example.com" {
		return ErrNoUser
	}
	return nil
}

func (b *testBackend) Bans() []Ban {
	return []Ban{{Source: "192.0.2.1", Reason: "auth", Since: testNow, Until: testNow.Add(5 * time.Minute), Count: 5, User: "alice"}}
}

func (b *testBackend) Unban(source string) error {
	switch source {
	case "192.0.2.1":
		return nil
	case "192.0.2.2":
		return ErrNoBan
	}
	return errors.New("not an address")
}

func ptr[T any](v T) *T { return &v }
