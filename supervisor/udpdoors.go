package supervisor

import (
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/sipvisor/sipvisor/frontdoor"
	"github.com/sipvisor/sipvisor/internal/rawio"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/listeners"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/overload/pike"
)

// udpDoor reads one UDP socket and passes each datagram through its door.
type udpDoor struct {
	s    *Supervisor
	sock *listeners.Socket
	gr   *groupRun
	door *frontdoor.Door
	buf  []byte
	fd   int // the socket's descriptor while the door handles a datagram
	// pike counts the requests the door reads per source; set under mu.
	pike pike.Counter
	v6   bool // an AF_INET6 socket
	// linked is set while the door handles a datagram the other
	// generation passed at an upgrade (upgrade.go); set under mu.
	linked bool
	// mu serialises the door: with direct reads it also handles what
	// workers pass it and what an exited worker left in its socket.
	mu sync.Mutex
}

func (s *Supervisor) newUDPDoor(udpIndex int, sk *listeners.Socket) *udpDoor {
	gr := s.udp[udpIndex]
	u := &udpDoor{s: s, sock: sk, gr: gr, buf: make([]byte, wire.MsgHeaderLen+65535), fd: -1}
	if a, ok := sk.UDP.LocalAddr().(*net.UDPAddr); ok && a.IP.To4() == nil {
		u.v6 = true
	}
	door := frontdoor.New(udpIndex,
		func(m *sipscan.Msg, newSession bool, now int64) frontdoor.Target {
			if t := s.upgradePick(u, m); t != nil {
				return t
			}
			if gr.steer != nil {
				if w := gr.steer.Pick(m, newSession, now); w != nil {
					return w
				}
			}
			if w := s.pick(gr, newSession, now); w != nil {
				return w
			}
			return nil
		},
		func(m *sipscan.Msg, now int64) (overload.Refusal, int) {
			if s.up.old.Load() {
				// Handed over: what an old worker passes back, or left
				// in its socket, goes to the new side (upgradePick), whose
				// door admits it. Admission here is stopping and would
				// refuse it.
				return overload.RefuseNone, 0
			}
			return s.ov.Decide(gr.gate, m)
		},
		u.reply)
	door.Sessions.MaxCallDuration.Store(int64(s.config().Limits.MaxCallDuration))
	door.OnUnknownEnd = s.connSess.end
	door.Probe = func(int64) (bool, int) {
		if s.up.old.Load() {
			return false, 0 // the new side answers it, as admission above
		}
		return s.ov.ProbeRefused()
	}
	door.RetryAfter = s.retryAfter
	where := "door " + sk.UDP.LocalAddr().String()
	door.OnRefused = func(r overload.Refusal, c overload.Class, k sipscan.Kind) { s.ov.Refused(where, r, c, k) }
	door.Feedback = s.oc.feedback
	u.pike.Set(s.bans.policy())
	door.Bans, door.Pike, door.OnHeavy = &s.bans.list, &u.pike, s.bans.requests
	u.door = door
	gr.door = door
	if gr.steer != nil {
		// The workers' own doors follow every session of the group,
		// those this door hands them included.
		door.NoTrack = true
	}
	return u
}

// doorBatch bounds the datagrams handled in one raw read, so that a door
// under a flood still sees its deadline (how it is stopped).
const doorBatch = 64

// run reads until the socket is closed or its deadline is set in the past.
// The door handles each datagram inside the raw read, which keeps the
// descriptor open under it, and reads until the socket is empty (or a batch
// is done) before it waits again: one wake-up takes a whole burst.
func (u *udpDoor) run() error {
	rc, err := u.sock.UDP.SyscallConn()
	if err != nil {
		return err
	}
	var rerr error
	read := func(fd uintptr) bool {
		for i := 0; i < doorBatch; i++ {
			n, from, e := rawio.Recvfrom(int(fd), u.buf[wire.MsgHeaderLen:])
			switch e {
			case 0:
				u.mu.Lock()
				u.fd = int(fd)
				u.door.Handle(u.buf[:wire.MsgHeaderLen+n], from, time.Now().UnixNano())
				u.mu.Unlock()
			case rawio.EINTR:
			case rawio.EAGAIN:
				return false
			default:
				rerr = &net.OpError{Op: "read", Net: "udp", Addr: u.sock.UDP.LocalAddr(), Err: e}
				return true
			}
		}
		return true
	}
	for rerr == nil {
		err := rc.Read(read)
		if errors.Is(err, os.ErrDeadlineExceeded) || errors.Is(err, net.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
	}
	return rerr
}

// handleFrame passes a message frame a worker gave back (wire.DoorNote)
// through the door, as if the socket had just read it (Door.Passed).
func (u *udpDoor) handleFrame(frame []byte) { u.handleFrameAs(frame, true) }

// handleFrameAs is handleFrame, for a datagram a worker passed or, when
// passed is false, one this door read from another socket of the group.
func (u *udpDoor) handleFrameAs(frame []byte, passed bool) {
	_, from, _ := wire.ParseMsgHeader(frame)
	rc, err := u.sock.UDP.SyscallConn()
	if err != nil {
		return
	}
	rc.Control(func(fd uintptr) {
		u.mu.Lock()
		u.fd = int(fd)
		if passed {
			u.door.Passed(frame, from, time.Now().UnixNano())
		} else {
			u.door.Handle(frame, from, time.Now().UnixNano())
		}
		u.mu.Unlock()
	})
}

// drainFD passes what waits in another socket of the port's group (a
// worker's that exited) through the door, until it is empty.
func (u *udpDoor) drainFD(fd int) {
	if fd < 0 || unix.SetNonblock(fd, true) != nil {
		return
	}
	buf := make([]byte, wire.MsgHeaderLen+65535)
	for {
		n, from, e := rawio.Recvfrom(fd, buf[wire.MsgHeaderLen:])
		switch e {
		case 0:
			frame := buf[:wire.MsgHeaderLen+n]
			wire.PutMsgHeader(frame, u.door.Socket(), from, 0)
			u.handleFrameAs(frame, false)
		case rawio.EINTR:
		default:
			return
		}
	}
}

// reply sends a stateless reply from the door's socket. It runs inside run's
// read, so the descriptor is open. A full send buffer is waited out briefly
// and then the reply dropped: the client retransmits its request, and the
// door must not stall on one peer.
func (u *udpDoor) reply(b []byte, to netip.AddrPort) {
	sa := rawio.MakeSockaddr(to, u.v6)
	for tries := 0; ; tries++ {
		_, e := rawio.Sendto(u.fd, b, &sa)
		switch {
		case e == rawio.EINTR:
			continue
		case e == rawio.EAGAIN && tries < 3:
			unix.Poll([]unix.PollFd{{Fd: int32(u.fd), Events: unix.POLLOUT}}, 1)
			continue
		case e != 0:
			u.door.Stats.ReplyFailed.Add(1)
		}
		return
	}
}
