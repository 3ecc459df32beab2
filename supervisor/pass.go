package supervisor

import (
	"net/netip"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/pool"
)

// passCounts counts the requests workers asked to have passed to the
// worker reading a connection (wire.PassRequest), by outcome.
type passCounts struct {
	passed, noHolder, refused prometheus.Counter
	// Messages workers asked to have written on a connection another
	// worker reads (wire.WriteRequest), by outcome.
	written, writeNoHolder, writeRefused prometheus.Counter
}

func newPassCounts(reg prometheus.Registerer) *passCounts {
	v := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sipvisor", Subsystem: "frontdoor", Name: "requests_passed_total",
		Help: "Requests for a TCP or TLS peer that reached a worker without its connection, by outcome: passed to the worker that reads it, no_holder (no worker does; the asker connects), refused (that worker's queue was full).",
	}, []string{"outcome"})
	w := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: "sipvisor", Subsystem: "frontdoor", Name: "flow_writes_total",
		Help: "Messages for a phone's connection (its flow) made by a worker that does not read it, by outcome: written (given to the worker that reads it), no_holder (no worker does: the flow is gone, the request answered 480 or 430), refused (that worker's queue was full).",
	}, []string{"outcome"})
	reg.MustRegister(v, w)
	return &passCounts{passed: v.WithLabelValues("passed"), noHolder: v.WithLabelValues("no_holder"), refused: v.WithLabelValues("refused"),
		written: w.WithLabelValues("written"), writeNoHolder: w.WithLabelValues("no_holder"), writeRefused: w.WithLabelValues("refused")}
}

// holder is the worker that reads the connection from ap, or nil.
func (c *connCounts) holder(ap netip.AddrPort) *pool.Worker {
	c.mu.Lock()
	defer c.mu.Unlock()
	for w, m := range c.byWorker {
		if _, ok := m[ap]; ok {
			return w
		}
	}
	return nil
}

// answerPass hands a request a worker could not send, for want of the
// connection to its destination, to the worker that reads that connection,
// as if that worker had read the request on the UDP socket it came to. A
// worker never gets back what it asked about: it then connects as before.
func (s *Supervisor) answerPass(asker *pool.Worker, sock int, to, from netip.AddrPort, msg []byte) []byte {
	h := s.sockets.conns.holder(to)
	if h == nil || h == asker {
		s.sockets.passCounts.noHolder.Inc()
		return []byte{0}
	}
	if err := h.Send(wire.MessageFrame(sock, from, time.Now().UnixNano(), msg)); err != nil {
		s.sockets.passCounts.refused.Inc()
		return []byte{0}
	}
	s.sockets.passCounts.passed.Inc()
	return []byte{1}
}

// answerWrite gives a message a worker made to the worker that reads the
// connection from to, which writes it there (wire.WriteRequest): a phone
// reached over the connection it registered on, whichever worker handles
// the call. The answer 0 says no worker reads that connection: the flow is
// gone, and the asker answers for it (480 or 430) rather than connect to a
// phone that accepts none.
func (s *Supervisor) answerWrite(asker *pool.Worker, flags byte, to netip.AddrPort, msg []byte) []byte {
	h := s.sockets.conns.holder(to)
	if h == nil || h == asker {
		s.sockets.passCounts.writeNoHolder.Inc()
		return []byte{0}
	}
	if err := h.Send(wire.WriteFrame(flags, to, msg)); err != nil {
		s.sockets.passCounts.writeRefused.Inc()
		return []byte{0}
	}
	s.sockets.passCounts.written.Inc()
	return []byte{1}
}
