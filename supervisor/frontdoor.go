package supervisor

import (
	"errors"
	"net"
	"os"
	"time"

	"github.com/sipvisor/sipvisor/listeners"
	"github.com/sipvisor/sipvisor/pool"
)

// frontDoor reads one UDP socket and hands each datagram to a worker of the
// socket's group.
type frontDoor struct {
	s     *Supervisor
	index int // index among the UDP sockets: what workers call the socket
	sock  *listeners.Socket
	gr    *groupRun
	buf   []byte
}

func newFrontDoor(s *Supervisor, socketIndex int, sk *listeners.Socket) *frontDoor {
	udpIndex := 0
	for i := 0; i < socketIndex; i++ {
		if s.sockets[i].UDP != nil {
			udpIndex++
		}
	}
	return &frontDoor{s: s, index: udpIndex, sock: sk, gr: s.udp[udpIndex], buf: make([]byte, pool.MsgHeaderLen+65535)}
}

// run reads until the socket is closed or its deadline is set in the past.
func (fd *frontDoor) run() error {
	c := fd.sock.UDP
	name := fd.gr.g.Name()
	for {
		n, from, err := c.ReadFromUDPAddrPort(fd.buf[pool.MsgHeaderLen:])
		if err != nil {
			if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		frame := fd.buf[:pool.MsgHeaderLen+n]
		pool.PutMsgHeader(frame, fd.index, from)
		w := fd.gr.g.Pick()
		if w == nil {
			fd.s.m.dropped.WithLabelValues(name, "no_worker").Inc()
			continue
		}
		if err := w.Send(frame); err != nil {
			fd.s.m.dropped.WithLabelValues(name, "queue_full").Inc()
		}
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
			var ne net.Error
			if errors.As(err, &ne) && ne.Timeout() {
				continue
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
