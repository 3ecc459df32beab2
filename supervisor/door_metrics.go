package supervisor

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/pool"
)

// doorCollector exports the front doors' counters. The doors count with
// atomics on their hot path; the collector reads them only when scraped.
type doorCollector struct {
	s *Supervisor
	doorDatagramDescs
	doorSessionDescs
}

// doorDatagramDescs describe what became of the datagrams a group read.
type doorDatagramDescs struct {
	received, forwarded, keepalives, replied, ownAcks *prometheus.Desc
	malformed, dropped, absorbed, stale, banned       *prometheus.Desc
	direct, directWorkers, passed, refresh            *prometheus.Desc
}

// doorSessionDescs describe the sessions a group admitted, refused and holds.
type doorSessionDescs struct {
	refused, admitted, aff, sessions, staleRefused, probesRefused *prometheus.Desc
}

func newDoorCollector(s *Supervisor) *doorCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName("sipvisor", "frontdoor", name), help, append([]string{"group"}, labels...), nil)
	}
	return &doorCollector{s: s,
		doorDatagramDescs: doorDatagramDescs{
			received:   d("datagrams_received_total", "Datagrams read from the socket."),
			forwarded:  d("datagrams_forwarded_total", "Datagrams handed to a worker."),
			keepalives: d("keepalives_total", "Keepalive datagrams (bare CRLF)."),
			replied:    d("stateless_replies_total", "Replies sent by the front door itself (400, 503)."),
			ownAcks:    d("own_acks_total", "ACKs of the front door's own replies, absorbed there."),
			malformed:  d("malformed_total", "Datagrams that could not be scanned, by reason.", "reason"),
			dropped:    d("datagrams_dropped_total", "Datagrams no worker could take, and stateless replies the socket would not send, by reason.", "reason"),
			absorbed:   d("retransmissions_absorbed_total", "Retransmitted requests dropped because the original still waited in a worker's queue."),
			stale: prometheus.NewDesc("sipvisor_pool_stale_requests_dropped_total",
				"Requests a worker dropped unhandled for having waited longer than max_queue_wait.", []string{"group"}, nil),
			passed:        d("datagrams_passed_total", "Datagrams the group's workers read from their own sockets (udp_direct_reads) and passed to this door to decide: calls whose worker may be another."),
			refresh:       d("direct_refresh_seconds", "How often the supervisor writes admission into the workers' pages when nothing asks sooner (udp_direct_reads): 0.1 while a limit is set, admission is closed or something just changed, 1 while nothing can change but by an event that refreshes at once."),
			directWorkers: d("direct_workers", "Workers the kernel program places the socket's datagrams on (udp_direct_reads); 0 while every datagram comes through this door."),
			direct:        d("direct_datagrams_total", "Datagrams the group's workers read from their own sockets of the port (udp_direct_reads), past this door."),
			banned:        d("banned_datagrams_total", "Datagrams from banned sources, dropped or answered 403 (ban_action) as they were read, by this door or a worker reading its socket (udp_direct_reads)."),
		},
		doorSessionDescs: doorSessionDescs{
			refused:  d("refused_sessions_total", "New sessions refused with 503, by reason.", "reason"),
			admitted: d("admitted_sessions_total", "New sessions admitted, by kind.", "kind"),
			aff:      d("affinity_callids", "Call-IDs currently bound to a worker."),
			sessions: d("sessions", "Calls and subscriptions in progress that came in through this socket (for the TCP group, over connections), by kind.", "kind"),
			staleRefused: prometheus.NewDesc("sipvisor_pool_stale_requests_refused_total",
				"Requests read from a connection that a worker refused with 503 for having waited longer than max_queue_wait.", []string{"group"}, nil),
			probesRefused: d("probes_refused_total", "OPTIONS probes of the server itself answered 503 while it refused every new session (suspended or stopping)."),
		},
	}
}

func (c *doorCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.received, c.forwarded, c.keepalives, c.replied, c.ownAcks, c.malformed, c.refused, c.admitted, c.dropped, c.aff, c.sessions, c.absorbed, c.stale, c.staleRefused, c.probesRefused, c.direct, c.directWorkers, c.passed, c.refresh, c.banned} {
		ch <- d
	}
}

func (c *doorCollector) Collect(ch chan<- prometheus.Metric) {
	for _, gr := range c.s.groupRuns() {
		switch dropped, refused := gr.g.Stale(); gr.g.Kind() {
		case pool.KindUDP:
			ch <- prometheus.MustNewConstMetric(c.stale, prometheus.CounterValue, float64(dropped), gr.g.Name())
		case pool.KindTCP:
			ch <- prometheus.MustNewConstMetric(c.staleRefused, prometheus.CounterValue, float64(refused), gr.g.Name())
		}
		if gr.stream != nil {
			gr.stream.Collect()
		}
		if gr.door == nil {
			if gr.g.Kind() == pool.KindTCP {
				for r := overload.RefuseSuspended; r < overload.NumRefusals; r++ {
					ch <- prometheus.MustNewConstMetric(c.refused, prometheus.CounterValue,
						float64(gr.refusedConn[r].Load()), gr.g.Name(), r.String())
				}
				ch <- prometheus.MustNewConstMetric(c.probesRefused, prometheus.CounterValue, float64(gr.probesRefusedConn.Load()), gr.g.Name())
				for _, k := range []sipscan.Kind{sipscan.KindCall, sipscan.KindSubscription} {
					ch <- prometheus.MustNewConstMetric(c.sessions, prometheus.GaugeValue, float64(c.s.connSess.count(k)), gr.g.Name(), k.String())
				}
			}
			continue
		}
		st, g := &gr.door.Stats, gr.g.Name()
		counter := func(d *prometheus.Desc, v uint64, labels ...string) {
			ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), append([]string{g}, labels...)...)
		}
		// With direct reads the workers' doors count too.
		var admitted [4]uint64
		var refused [overload.NumRefusals]uint64
		w := func(i int) uint64 { return 0 }
		if gr.steer != nil {
			counter(c.direct, gr.steer.Counter(wire.OffDirectRead))
			counter(c.passed, st.Passed.Load())
			ch <- prometheus.MustNewConstMetric(c.directWorkers, prometheus.GaugeValue, float64(gr.steer.Members()), g)
			ch <- prometheus.MustNewConstMetric(c.refresh, prometheus.GaugeValue, gr.steer.Pace().Seconds(), g)
			for k := range admitted {
				admitted[k] = gr.steer.Counter(wire.OffDoorAdmitted + 8*k)
			}
			for r := range refused {
				refused[r] = gr.steer.Counter(wire.OffDoorRefused + 8*r)
			}
			w = func(i int) uint64 { return gr.steer.Counter(wire.OffDoorCounters + 8*i) }
		}
		counter(c.received, st.Received.Load())
		counter(c.forwarded, st.Forwarded.Load())
		counter(c.keepalives, st.Keepalives.Load()+w(wire.DoorKeepalives))
		counter(c.replied, st.Replied.Load()+w(wire.DoorReplied))
		counter(c.ownAcks, st.OwnAcks.Load()+w(wire.DoorOwnAcks))
		counter(c.absorbed, st.Absorbed.Load()+w(wire.DoorAbsorbed))
		counter(c.probesRefused, st.ProbesRefused.Load()+w(wire.DoorProbesRefused))
		counter(c.banned, st.Banned.Load()+w(wire.DoorBanned))
		for i := 1; i < int(sipscan.NumErrors); i++ {
			counter(c.malformed, st.Malformed[i].Load()+w(wire.DoorMalformed+i), sipscan.Error(i).String())
		}
		for r := overload.RefuseSuspended; r < overload.NumRefusals; r++ {
			counter(c.refused, st.Refused[r].Load()+refused[r], r.String())
		}
		for k := range st.Admitted {
			counter(c.admitted, st.Admitted[k].Load()+admitted[k], sipscan.Kind(k).String())
		}
		counter(c.dropped, st.DroppedNoWorker.Load()+w(wire.DoorDroppedNoWorker), "no_worker")
		counter(c.dropped, st.DroppedQueueFull.Load(), "queue_full")
		counter(c.dropped, st.ReplyFailed.Load()+w(wire.DoorReplyFailed), "reply_failed")
		ch <- prometheus.MustNewConstMetric(c.aff, prometheus.GaugeValue, float64(st.Affinity.Load()), g)
		for _, k := range []sipscan.Kind{sipscan.KindCall, sipscan.KindSubscription} {
			ch <- prometheus.MustNewConstMetric(c.sessions, prometheus.GaugeValue, float64(gr.sessions(k)), g, k.String())
		}
	}
}
