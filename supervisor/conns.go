package supervisor

import (
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/listeners"
	"github.com/sipvisor/sipvisor/pool"
)

// connCounts keeps the TCP and TLS connections open from clients, by source
// IP and by the worker that reads each: the supervisor accepts them and
// hands them on, and the workers say when one ends (wire.ConnClosedNote),
// so tcp_max_connections and tcp_max_connections_per_ip hold at accept. A
// worker that exits takes its connections with it.
//
// The supervisor keeps a copy of each connection's descriptor, so that a
// draining worker can give one back at a message boundary
// (wire.HandOffNote) and another worker go on reading it: scaling the TCP
// group down closes no client's connection.
type connCounts struct {
	mu       sync.Mutex
	byIP     map[netip.Addr]int
	byWorker map[*pool.Worker]map[netip.AddrPort]*connCopy
	total    int

	open      prometheus.Gauge
	closed    *prometheus.CounterVec
	handedOff prometheus.Counter
	passed    *prometheus.CounterVec
}

func newConnCounts(reg prometheus.Registerer) *connCounts {
	c := &connCounts{byIP: map[netip.Addr]int{}, byWorker: map[*pool.Worker]map[netip.AddrPort]*connCopy{},
		open: prometheus.NewGauge(prometheus.GaugeOpts{
			Namespace: "sipvisor", Subsystem: "frontdoor", Name: "connections",
			Help: "TCP, TLS, WS and WSS connections open from clients.",
		}),
		closed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "sipvisor", Subsystem: "frontdoor", Name: "connections_closed_total",
			Help: "TCP, TLS, WS and WSS connections from clients that ended, by reason: peer, idle, message_timeout, handshake, origin, malformed, banned, worker_exit, handoff_failed.",
		}, []string{"reason"}),
		handedOff: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: "sipvisor", Subsystem: "frontdoor", Name: "connections_handed_off_total",
			Help: "Connections a draining TCP worker gave back and another worker took on.",
		}),
	}
	c.passed = prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sipvisor", Subsystem: "pool", Name: "responses_passed_total",
		Help: "Responses a worker read for a transaction another worker holds, passed on to it (passed), or not: that worker is gone (no_holder) or its queue full.",
	}, []string{"outcome"})
	reg.MustRegister(c.open, c.closed, c.handedOff, c.passed)
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

// handed records which worker reads the connection admitted from ap, and
// keeps f, the supervisor's copy of it (nil: none).
func (c *connCounts) handed(w *pool.Worker, ap netip.AddrPort, f *connCopy) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.handedLocked(w, ap, f)
}

func (c *connCounts) handedLocked(w *pool.Worker, ap netip.AddrPort, f *connCopy) {
	m := c.byWorker[w]
	if m == nil {
		m = map[netip.AddrPort]*connCopy{}
		c.byWorker[w] = m
	}
	m[ap] = f
}

// handOff moves a connection a draining worker gave back to the worker
// pick returns, with the bytes read past its last message. It reports
// whether the note was a hand-off.
func (c *connCounts) handOff(from *pool.Worker, note []byte, pick func() *pool.Worker) (bool, error) {
	remote, prefix, ok := wire.ParseHandOffNote(note)
	var tlsPayload []byte
	if !ok {
		if remote, tlsPayload, ok = wire.ParseHandOffTLSNote(note); !ok {
			return false, nil
		}
	}
	ap, err := netip.ParseAddrPort(remote)
	if err != nil {
		return true, err
	}
	ap = netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	c.mu.Lock()
	defer c.mu.Unlock()
	f, held := c.byWorker[from][ap]
	if !held {
		return true, fmt.Errorf("hand-off of %s, which the worker was not given", ap)
	}
	delete(c.byWorker[from], ap)
	to := pick()
	switch {
	case f == nil:
		err = fmt.Errorf("no copy of %s to hand on", ap)
	case to == nil || to == from:
		err = fmt.Errorf("no worker to hand %s to", ap)
	case tlsPayload != nil:
		err = to.SendTLSConnFile(f, tlsPayload)
	default:
		err = to.SendConnFile(f, prefix)
	}
	if err != nil {
		if f != nil {
			f.Close()
		}
		c.dropLocked(ap)
		c.closed.WithLabelValues("handoff_failed").Inc()
		return true, err
	}
	c.handedLocked(to, ap, f)
	c.handedOff.Inc()
	return true, nil
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
	reason, remote, ok := wire.ParseConnClosedNote(note)
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
		if f, ok := m[ap]; ok {
			if f != nil {
				f.Close()
			}
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
	for ap, f := range c.byWorker[w] {
		if f != nil {
			f.Close()
		}
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

// passResponse hands a response a worker passed on (wire.ForwardNote) to
// the worker whose pid its branch names, in any group. It reports whether
// the note was one.
func (s *Supervisor) passResponse(note []byte) bool {
	pid, from, msg, ok := wire.ParseForwardNote(note)
	if !ok {
		return false
	}
	if !s.passToWorker(pid, from, msg) && !s.passToOtherGeneration(pid, from, msg) {
		s.sockets.conns.passed.WithLabelValues("no_holder").Inc()
	}
	return true
}

// passToWorker hands a passed response to the worker of pid, if it is one
// of this supervisor's; it reports whether it was.
func (s *Supervisor) passToWorker(pid int, from string, msg []byte) bool {
	ap, _ := netip.ParseAddrPort(from)
	for _, gr := range s.groupRuns() {
		for _, w := range gr.g.Workers() {
			if w.Pid != pid {
				continue
			}
			frame := make([]byte, wire.MsgHeaderLen+len(msg))
			wire.PutMsgHeader(frame, 0, ap, time.Now().UnixNano())
			copy(frame[wire.MsgHeaderLen:], msg)
			if err := w.Send(frame); err != nil {
				s.sockets.conns.passed.WithLabelValues("queue_full").Inc()
			} else {
				s.sockets.conns.passed.WithLabelValues("passed").Inc()
			}
			return true
		}
	}
	return false
}

// acceptLoop hands each accepted TCP connection to the least loaded worker of
// the TCP group. It accepts by the system call (listeners.Socket.Accept),
// not net's Accept: the supervisor never reads a connection, and a
// net.TCPConn cost a registration in its poller, an address lookup and
// five socket options a connection, which the listener's options give
// every connection it accepts instead.
func (s *Supervisor) acceptLoop(sk *listeners.Socket) error {
	if err := sk.SetAcceptOptions(); err != nil {
		s.log.Warn("stream listener options not set; connections keep the system's", "socket", sk.Name(), "error", err)
	}
	for {
		fd, ap, err := sk.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			s.log.Warn("accept", "error", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		c := &connCopy{fd: fd}
		// A banned source costs no worker: its connection is closed as it
		// is accepted.
		if s.bans.list.Banned(ap.Addr(), time.Now().UnixNano()) {
			s.m.dropped.WithLabelValues("tcp", "banned").Inc()
			c.Close()
			continue
		}
		lim := s.config().Conn
		if reason := s.sockets.conns.admit(ap, lim.Max, lim.MaxPerIP); reason != "" {
			s.m.dropped.WithLabelValues("tcp", reason).Inc()
			c.Close()
			continue
		}
		w := s.tcp.g.Pick()
		if w == nil {
			s.sockets.conns.release(ap)
			s.m.dropped.WithLabelValues("tcp", "no_worker").Inc()
			c.Close()
			continue
		}
		// The accepted descriptor stays the supervisor's copy: a draining
		// worker can give the connection back and another go on reading
		// it. ended closes it.
		s.sockets.conns.handed(w, ap, c)
		if err := w.SendConn(c); err != nil {
			s.sockets.conns.ended(w, ap, "not_handed")
			s.m.dropped.WithLabelValues("tcp", "queue_full").Inc()
		}
	}
}
