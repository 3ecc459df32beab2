package supervisor

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"time"

	"github.com/sipvisor/sipvisor/frontdoor"
	"github.com/sipvisor/sipvisor/listeners"
	"github.com/sipvisor/sipvisor/pool"
	"github.com/sipvisor/sipvisor/sipscan"
)

// udpDoor reads one UDP socket and passes each datagram through its door.
type udpDoor struct {
	s    *Supervisor
	sock *listeners.Socket
	gr   *groupRun
	door *frontdoor.Door
	buf  []byte
}

func (s *Supervisor) newUDPDoor(udpIndex int, sk *listeners.Socket) *udpDoor {
	gr := s.udp[udpIndex]
	u := &udpDoor{s: s, sock: sk, gr: gr, buf: make([]byte, pool.MsgHeaderLen+65535)}
	door := frontdoor.New(udpIndex,
		func(m *sipscan.Msg, newSession bool) *pool.Worker { return s.pick(gr, newSession) },
		s.admission(gr),
		func(b []byte, to netip.AddrPort) { sk.UDP.WriteToUDPAddrPort(b, to) })
	u.door = door
	gr.door = door
	return u
}

// run reads until the socket is closed or its deadline is set in the past.
func (u *udpDoor) run() error {
	c := u.sock.UDP
	for {
		n, from, err := c.ReadFromUDPAddrPort(u.buf[pool.MsgHeaderLen:])
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		u.door.Handle(u.buf[:pool.MsgHeaderLen+n], from, time.Now().UnixNano())
	}
}

// acceptLoop hands each accepted TCP connection to the least loaded worker of
// the TCP group.
func (s *Supervisor) acceptLoop(sk *listeners.Socket) error {
	for {
		c, err := sk.TCP.AcceptTCP()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			s.log.Warn("accept", "error", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		w := s.tcp.g.Pick()
		if w == nil {
			s.m.dropped.WithLabelValues("tcp", "no_worker").Inc()
			c.Close()
			continue
		}
		if err := w.SendConn(c); err != nil {
			s.m.dropped.WithLabelValues("tcp", "queue_full").Inc()
			c.Close()
		}
	}
}

// admission is the admission decision for new sessions on a group.
func (s *Supervisor) admission(gr *groupRun) frontdoor.Admission {
	return func(m *sipscan.Msg, now int64) (frontdoor.Refusal, int) {
		if r := s.ov.admit(gr, m); r != frontdoor.RefuseNone {
			return r, s.retryAfter()
		}
		return frontdoor.RefuseNone, 0
	}
}
