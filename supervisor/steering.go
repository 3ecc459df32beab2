package supervisor

import (
	"context"
	"time"

	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/listeners"
	"github.com/sipvisor/sipvisor/pool"
	"github.com/sipvisor/sipvisor/supervisor/steering"
)

// newSteering makes a UDP group's direct reads (udp_direct_reads) over
// its socket, the udpIndex-th UDP socket: package steering decides and
// applies, the supervisor lends it the group's and admission's parts.
func (s *Supervisor) newSteering(gr *groupRun, name string, sock *listeners.Socket, udpIndex int) *steering.Port {
	return steering.New(steering.Options{Group: name, Socket: sock, UDPIndex: udpIndex,
		// The group is made after its steering, which gives it its
		// workers' sockets.
		Workers:   func() []*pool.Worker { return gr.g.Workers() },
		Routable:  func() []*pool.Worker { return gr.g.Routable() },
		Admission: s.ov, Gate: gr.gate, Ramps: gr.ramps, RetryAfter: s.retryAfter, RetryAfterDrawn: s.retryAfterDrawn,
		MaxCallDuration: func() time.Duration {
			if gr.door == nil {
				return 0
			}
			return time.Duration(gr.door.Sessions.MaxCallDuration.Load())
		},
		Drain: func(fd int) {
			if u := s.udpDoorOf(gr); u != nil {
				u.drainFD(fd)
			}
		},
		HandedOver: s.up.old.Load,
		Log:        s.log})
}

// refresher is a group's direct reads (steering.Port) or the gate of its
// workers that read connections (steering.Stream).
type refresher interface {
	Refresh(time.Time)
	Poked() <-chan struct{}
	Pace() time.Duration
}

// steerLoop refreshes a group's direct reads or stream gate on every change
// of the group and at the pace the last refresh set.
func steerLoop(ctx context.Context, st refresher) error {
	t := newTicks(steering.Every)
	defer t.Stop()
	for {
		fired := false
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			fired = true
		case <-st.Poked():
		}
		st.Refresh(time.Now())
		t.arm(st.Pace(), fired)
	}
}

// steerNow refreshes every group's direct reads at once: admission began
// or stopped refusing, or a setting changed.
func (s *Supervisor) steerNow() {
	for _, gr := range s.udp {
		if gr.steer != nil {
			gr.steer.Refresh(time.Now())
		}
	}
	if s.tcp != nil && s.tcp.stream != nil {
		s.tcp.stream.Refresh(time.Now())
	}
}

// udpDoorOf is the door of a UDP group's socket.
func (s *Supervisor) udpDoorOf(gr *groupRun) *udpDoor {
	for _, u := range s.sockets.doors {
		if u.gr == gr {
			return u
		}
	}
	return nil
}

// toDoor passes a datagram a worker of a group with direct reads gave back
// (wire.DoorNote) through its group's door. It reports whether the note
// was one.
func (s *Supervisor) toDoor(w *pool.Worker, note []byte) bool {
	frame, ok := wire.ParseDoorNote(note)
	if !ok {
		return false
	}
	if gr := s.groupOf(w); gr != nil && gr.steer != nil {
		if u := s.udpDoorOf(gr); u != nil {
			u.handleFrame(frame)
		}
	}
	return true
}
