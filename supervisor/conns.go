package supervisor

import (
	"net/netip"
	"sync"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sipvisor/sipvisor/pool"
)

// connCounts keeps the TCP and TLS connections open from clients, by source
// IP and by the worker that reads each: the supervisor accepts them and
// hands them on, and the workers say when one ends (pool.ConnClosedNote),
// so tcp_max_connections and tcp_max_connections_per_ip hold at accept. A
// worker that exits takes its connections with it.
type connCounts struct {
	mu       sync.Mutex
	byIP     map[netip.Addr]int
	byWorker map[*pool.Worker]map[netip.AddrPort]struct{}
	total    int

	open   prometheus.Gauge
	closed *prometheus.CounterVec
}

func newConnCounts(reg prometheus.Registerer) *connCounts {
	c := &connCounts{byIP: map[netip.Addr]int{}, byWorker: map[*pool.Worker]map[netip.AddrPort]struct{}{},
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sipvisor", Subsystem: "frontdoor", Name: "connections",
			Help: "TCP and TLS connections open from clients.",
		}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sipvisor", Subsystem: "frontdoor", Name: "connections_closed_total",
			Help: "TCP and TLS connections from clients that ended, by reason: peer, idle, message_timeout, handshake, malformed, worker_exit.",
		}, []string{"reason"}),
	}
	reg.MustRegister(c.open, c.closed)
	return c
}

// admit takes a new connection from ap into the counts, or says which
// limit it would break ("" admits). 0 is no limit.
func (c *connCounts) admit(ap netip.AddrPort, max, perIP int) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	ip := ap.Addr().Unmap()
	switch {
	case max > 0 && c.total >= max:
		return "max_connections"
	case perIP > 0 && c.byIP[ip] >= perIP:
		return "max_connections_per_ip"
	}
	c.byIP[ip]++
	c.total++
	c.open.Set(float64(c.total))
	return ""
}

// handed records which worker reads the connection admitted from ap.
func (c *connCounts) handed(w *pool.Worker, ap netip.AddrPort) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.byWorker[w]
	if m == nil {
		m = map[netip.AddrPort]struct{}{}
		c.byWorker[w] = m
	}
	m[ap] = struct{}{}
}

// release drops a connection that was admitted and never handed on.
func (c *connCounts) release(ap netip.AddrPort) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dropLocked(ap)
}

// closedNote takes a worker's note that a connection ended; it reports
// whether the note was one.
func (c *connCounts) closedNote(w *pool.Worker, note []byte) bool {
	reason, remote, ok := pool.ParseConnClosedNote(note)
	if !ok {
		return false
	}
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return true
	}
	c.ended(w, netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port()), reason)
	return true
}

// ended drops the connection from ap that w read.
func (c *connCounts) ended(w *pool.Worker, ap netip.AddrPort, reason string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.byWorker[w]; m != nil {
		if _, ok := m[ap]; ok {
			delete(m, ap)
			c.dropLocked(ap)
			c.closed.WithLabelValues(reason).Inc()
		}
	}
}

// workerGone drops the connections of a worker that exited: they closed
// with it.
func (c *connCounts) workerGone(w *pool.Worker) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for ap := range c.byWorker[w] {
		c.dropLocked(ap)
		c.closed.WithLabelValues("worker_exit").Inc()
	}
	delete(c.byWorker, w)
}

func (c *connCounts) dropLocked(ap netip.AddrPort) {
	ip := ap.Addr().Unmap()
	if c.byIP[ip] <= 1 {
		delete(c.byIP, ip)
	} else {
		c.byIP[ip]--
	}
	c.total--
	c.open.Set(float64(c.total))
}
