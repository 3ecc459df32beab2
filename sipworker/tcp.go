package sipworker

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/sipscan"
)

// maxTCPMessage bounds one framed message: a peer that sends more without a
// message boundary is cut off.
const maxTCPMessage = 64 << 10

// tcpConn is a TCP connection this worker reads: one the supervisor handed
// over (inbound) or one it opened to a next hop. Writes happen on the loop.
type tcpConn struct {
	c      net.Conn
	remote netip.AddrPort
	local  netip.AddrPort
	// inbound connections were accepted on our listener, so their local
	// address is the one to advertise.
	inbound bool
	closed  bool
}

func (c *tcpConn) write(b []byte) error {
	if c.closed {
		return errors.New("tcp connection closed")
	}
	c.c.SetWriteDeadline(time.Now().Add(2 * time.Second))
	_, err := c.c.Write(b)
	return err
}

func addrPortOf(a net.Addr) netip.AddrPort {
	if t, ok := a.(*net.TCPAddr); ok {
		ap := t.AddrPort()
		return netip.AddrPortFrom(ap.Addr().Unmap(), ap.Port())
	}
	ap, _ := netip.ParseAddrPort(a.String())
	return ap
}

// HandleConn takes a TCP connection accepted by the supervisor: its
// messages are read on a goroutine and handled on the loop, and replies go
// back on it.
func (w *Worker) HandleConn(c net.Conn) {
	w.adopt(c, true)
}

func (w *Worker) adopt(c net.Conn, inbound bool) *tcpConn {
	tc := &tcpConn{c: c, remote: addrPortOf(c.RemoteAddr()), local: addrPortOf(c.LocalAddr()), inbound: inbound}
	if inbound {
		w.self = appendUnique(w.self, tc.local)
	}
	w.conns[tc.remote] = tc
	go w.readConn(tc)
	return tc
}

func appendUnique(list []netip.AddrPort, a netip.AddrPort) []netip.AddrPort {
	for _, x := range list {
		if x == a {
			return list
		}
	}
	return append(list, a)
}

// readConn frames SIP messages on a stream (RFC 3261 18.3: Content-Length
// marks the end) and submits each to the loop.
func (w *Worker) readConn(tc *tcpConn) {
	r := bufio.NewReaderSize(tc.c, 8<<10)
	for {
		msg, err := readStreamMessage(r)
		if err != nil {
			if !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
				w.opt.Submit(func() {
					w.log.Debug("tcp connection dropped", "peer", tc.remote.String(), "error", err)
				})
			}
			w.opt.Submit(func() { w.closeConn(tc) })
			return
		}
		w.opt.Submit(func() {
			w.handle(msg, source{proto: "tcp", addr: tc.remote, sock: -1, conn: tc})
		})
	}
}

func (w *Worker) closeConn(tc *tcpConn) {
	if tc.closed {
		return
	}
	tc.closed = true
	tc.c.Close()
	if w.conns[tc.remote] == tc {
		delete(w.conns, tc.remote)
	}
}

// readStreamMessage reads one message: CRLF keep-alives are skipped, the
// header ends at an empty line, the body is Content-Length bytes.
func readStreamMessage(r *bufio.Reader) ([]byte, error) {
	var buf []byte
	length := -1
	for {
		line, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			return nil, errors.New("header line too long")
		}
		if err != nil {
			return nil, err
		}
		if len(buf) == 0 && len(bytes.TrimSpace(line)) == 0 {
			continue // keep-alive
		}
		buf = append(buf, line...)
		if len(buf) > maxTCPMessage {
			return nil, fmt.Errorf("message header over %d bytes", maxTCPMessage)
		}
		t := bytes.TrimSpace(line)
		if len(t) == 0 {
			break
		}
		if i := bytes.IndexByte(t, ':'); i > 0 {
			name := bytes.TrimSpace(t[:i])
			if bytes.EqualFold(name, []byte("Content-Length")) || bytes.EqualFold(name, []byte("l")) {
				n, err := strconv.Atoi(string(bytes.TrimSpace(t[i+1:])))
				if err != nil || n < 0 || n > maxTCPMessage {
					return nil, fmt.Errorf("bad Content-Length %q", t[i+1:])
				}
				length = n
			}
		}
	}
	if length < 0 {
		return nil, errors.New("message without Content-Length on a stream")
	}
	start := len(buf)
	buf = append(buf, make([]byte, length)...)
	if _, err := io.ReadFull(r, buf[start:]); err != nil {
		return nil, err
	}
	return buf, nil
}

// connTo returns a connection to addr: one already open (either way), or a
// new one. Dialing blocks the loop for at most DialTimeout.
func (w *Worker) connTo(addr netip.AddrPort) (*tcpConn, error) {
	if c, ok := w.conns[addr]; ok && !c.closed {
		return c, nil
	}
	c, err := net.DialTimeout("tcp", addr.String(), w.opt.DialTimeout)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	return w.adopt(c, false), nil
}

// tcpAdvertised is the address to put in Via and Record-Route for a TCP
// hop: the listening address, so that new connections come to it.
func (w *Worker) tcpAdvertised(c *tcpConn) netip.AddrPort {
	if c.inbound {
		return c.local
	}
	for _, l := range w.tcpListen {
		if l.Port() != 0 {
			return l
		}
	}
	return c.local
}

// admit applies the front door's admission control to a request that came
// over a connection, which no door saw: a new session (an INVITE, REGISTER
// or SUBSCRIBE outside a dialog) that the door would refuse gets the same
// 503 with Retry-After, sent statelessly, and is not handled further. It
// reports whether the request goes on.
func (w *Worker) admit(req *sip.Request, src source) bool {
	if w.opt.Admit == nil {
		return true
	}
	if _, ok := param(req.To().Params, "tag"); ok {
		return true
	}
	var m sipscan.Method
	switch req.Method {
	case sip.INVITE:
		m = sipscan.Invite
	case sip.REGISTER:
		m = sipscan.Register
	case sip.SUBSCRIBE:
		m = sipscan.Subscribe
	case sip.OPTIONS:
		// A probe of the server itself (no user part), answered 503
		// while the server refuses every new session, as the front door
		// answers one over UDP.
		if req.Recipient.User != "" {
			return true
		}
		m = sipscan.Options
	default:
		return true
	}
	refuse, retry := w.opt.Admit(m, []byte(*req.CallID()))
	if !refuse {
		return true
	}
	w.Stats.Refused++
	w.replyStateless(req, src, 503, "Service Unavailable", []string{"Retry-After: " + strconv.Itoa(retry)})
	return false
}
