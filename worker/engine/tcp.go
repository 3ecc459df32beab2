package engine

import (
	"bufio"
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/internal/rawio"
	"github.com/sipvisor/sipvisor/internal/sipmsg"
	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/sipstream"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/worker"
	"github.com/sipvisor/sipvisor/worker/engine/txn"
)

// maxTCPMessage bounds one framed message: a peer that sends more without a
// message boundary is cut off.
const maxTCPMessage = 64 << 10

// tcpConn is a TCP, TLS, WS or WSS connection this worker reads: one the
// supervisor handed over (inbound) or one it opened to a next hop. Writes
// happen on the loop.
type tcpConn struct {
	c      net.Conn
	remote netip.AddrPort
	local  netip.AddrPort
	// inbound connections were accepted on our listener, so their local
	// address is the one to advertise.
	inbound bool
	closed  bool
	secure  bool // TLS
	// ws: SIP over WebSocket (RFC 7118), each message in a frame; wss
	// when secure too. handed: another worker read it before, so its
	// Upgrade is done. origins are the ws_allowed_origins in force when
	// it came.
	ws      bool
	handed  bool
	origins []string
	// flowTok is the flow token of the connection's caller side (inFlow),
	// made at its first use.
	flowTok string
	// lastWrite is when the loop last wrote (unix ns): a connection we only
	// write to is not idle.
	lastWrite atomic.Int64
	// The bounds in force when the connection came (config.ConnLimits).
	limits config.ConnLimits

	// Hand-off of a draining worker's connection: handoff asks the reader
	// to stop at the next message boundary; rmu and waiting let Drain
	// interrupt a reader that waits between messages, and only then.
	handoff atomic.Bool
	rmu     sync.Mutex
	waiting bool
	// parked: the reader stopped for the hand-off, leaving prefix read
	// past its last message; the loop hands it over once no request read
	// from it waits for its final answer here.
	parked bool
	prefix []byte

	// A TLS connection that can move to another worker (tlsmove.go): rec
	// under crypto/tls for one accepted here, moved for one taken over;
	// expectW is the records this worker's writes made since the
	// handshake; lastFull says the reader's last read may have left
	// plaintext in crypto/tls; moveRead is the reading half of the state,
	// taken when the reader parked.
	rec      *recordConn
	moved    *movedTLS
	expectW  uint64
	lastFull bool
	moveRead *tlsMoveState
}

// movable reports whether a draining worker may try to hand the
// connection over: TCP, or TLS whose record layer can move.
func (c *tcpConn) movable() bool {
	return !c.secure || c.rec != nil || c.moved != nil
}

// fullTracker notes whether a read filled its buffer, after which the
// TLS layer may hold more plaintext than the reader took.
type fullTracker struct {
	r  io.Reader
	tc *tcpConn
}

func (f *fullTracker) Read(p []byte) (int, error) {
	n, err := f.r.Read(p)
	f.tc.lastFull = n == len(p) && n > 0
	return n, err
}

// stream reports whether messages of proto travel over a connection.
func stream(proto string) bool {
	return proto == "tcp" || proto == "tls" || proto == "ws" || proto == "wss"
}

// proto is the connection's transport as dest names it.
func (c *tcpConn) proto() string {
	switch {
	case c.ws && c.secure:
		return "wss"
	case c.ws:
		return "ws"
	case c.secure:
		return "tls"
	}
	return "tcp"
}

// transport is the connection's transport as a Via names it.
func (c *tcpConn) transport() string { return viaTransport(c.proto()) }

// viaTransport is a stream's proto as a Via names it, without making a
// string each time.
func viaTransport(proto string) string {
	switch proto {
	case "tcp":
		return "TCP"
	case "tls":
		return "TLS"
	case "ws":
		return "WS"
	case "wss":
		return "WSS"
	}
	return strings.ToUpper(proto)
}

// write sends one SIP message; over WebSocket, in a frame of its own.
func (c *tcpConn) write(b []byte) error {
	if c.ws {
		b = wsMessageFrame(b)
	}
	return c.writeRaw(b)
}

// writeRaw sends b as it is.
func (c *tcpConn) writeRaw(b []byte) error {
	if c.closed {
		return errors.New("tcp connection closed")
	}
	now := time.Now()
	c.lastWrite.Store(now.UnixNano())
	c.c.SetWriteDeadline(now.Add(2 * time.Second))
	if c.rec != nil {
		c.expectW += uint64((len(b) + maxPlaintext - 1) / maxPlaintext)
	}
	_, err := c.c.Write(b)
	return err
}

func addrPortOf(a net.Addr) netip.AddrPort {
	// A connection whose peer left between the supervisor's accept and
	// this worker taking its descriptor has no remote address (getpeername
	// fails): it is taken with none, and its reader, finding it closed,
	// closes it, rather than the worker failing on it.
	if a == nil {
		return netip.AddrPort{}
	}
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
	// A connection to a tls: or wss: socket starts with the TLS
	// handshake, one to a ws: or wss: socket with the WebSocket Upgrade,
	// which its reader does; a connection another worker handed over had
	// them, and keeps its TLS session there (a TLS one is never handed).
	local := addrPortOf(c.LocalAddr())
	handed := worker.HandedOver(c)
	has := func(list []netip.AddrPort) bool {
		for _, l := range list {
			if l == local {
				return true
			}
		}
		return false
	}
	switch {
	case has(w.tlsListen) && w.tlsServer != nil:
		// Under crypto/tls as under plain TCP, the socket is read and
		// written with rawio's calls: through net.Conn's, each record read
		// or written woke the runtime's monitor thread.
		rec := &recordConn{Conn: rawStream(c)}
		w.adoptWith(tls.Server(rec, serverTLSConfig(w.serverTLS(), rec)), true, true, false, false, func(tc *tcpConn) { tc.rec = rec })
	case has(w.wssListen) && w.tlsServer != nil:
		w.adopt(tls.Server(rawStream(c), w.serverTLS()), true, true, true, false)
	case has(w.wsListen):
		w.adopt(rawStream(c), true, false, true, handed)
	default:
		w.adopt(rawStream(c), true, false, false, false)
	}
}

// rawStream is c read and written with rawio's calls (rawio.Stream), when
// it is a TCP connection as dialed or accepted here (under crypto/tls too):
// net.Conn's bracket each call with the scheduler's system-call hooks,
// which woke the runtime's monitor thread at each message. One the
// supervisor handed over is one already (package worker); any other (one
// with bytes read before by another worker) stays as it is.
func rawStream(c net.Conn) net.Conn {
	t, ok := c.(*net.TCPConn)
	if !ok {
		return c
	}
	rc, err := t.SyscallConn()
	if err != nil {
		return c
	}
	return rawio.NewStream(t, rc)
}

// TakeTLS takes a TLS connection another worker handed back, with its
// record layer's state (worker.TLSTaker).
func (w *Worker) TakeTLS(c net.Conn, payload []byte) {
	prefix, state, ok := wire.ParseConnTLSPayload(payload)
	var st *tlsMoveState
	var err error
	if ok {
		st, err = parseTLSMoveState(state)
	} else {
		err = errors.New("bad payload")
	}
	var m *movedTLS
	if err == nil {
		m, err = newMovedTLS(rawStream(c), st)
	}
	if err != nil {
		// The connection cannot go on without its state: closed, which
		// the supervisor is told, and the phone connects again.
		w.log.Warn("tls connection handed over without a usable state; closed", "peer", c.RemoteAddr().String(), "error", err)
		tc := &tcpConn{c: c, remote: addrPortOf(c.RemoteAddr()), inbound: true, secure: true}
		w.closeConn(tc, closedHandOff)
		return
	}
	var conn net.Conn = m
	if len(prefix) > 0 {
		conn = &prefixed{Conn: m, pre: bytes.NewReader(bytes.Clone(prefix))}
	}
	w.adoptWith(conn, true, true, false, false, func(tc *tcpConn) { tc.moved = m })
	w.Stats.TLSTaken++
}

// prefixed reads bytes read before from another worker, then the
// connection.
type prefixed struct {
	net.Conn
	pre *bytes.Reader
}

func (p *prefixed) Read(b []byte) (int, error) {
	if p.pre.Len() > 0 {
		return p.pre.Read(b)
	}
	return p.Conn.Read(b)
}

func (w *Worker) adopt(c net.Conn, inbound, secure, ws, handed bool) *tcpConn {
	return w.adoptWith(c, inbound, secure, ws, handed, nil)
}

// adoptWith is adopt with set run on the connection before its reader
// starts.
func (w *Worker) adoptWith(c net.Conn, inbound, secure, ws, handed bool, set func(*tcpConn)) *tcpConn {
	tc := &tcpConn{c: c, remote: addrPortOf(c.RemoteAddr()), local: addrPortOf(c.LocalAddr()), inbound: inbound, secure: secure,
		ws: ws, handed: handed, origins: w.opt.WSAllowedOrigins, limits: w.opt.Conn}
	if set != nil {
		set(tc)
	}
	if inbound {
		w.self = appendUnique(w.self, selfAddr{tc.local, tc.proto()})
	}
	// One the supervisor gave this worker as it began to drain (picked
	// just before, or handed on by another draining worker) moves on as
	// those Drain found do. Not a TCP or WS one handed over with bytes
	// another worker read: they wait in c until the reader's first read,
	// and a hand-off before it would lose them.
	if w.draining && inbound && w.opt.HandOff != nil && tc.movable() && (secure || !worker.HandedOver(c)) {
		tc.handoff.Store(true)
	}
	w.conns[tc.remote] = tc
	go w.readConn(tc)
	return tc
}

func appendUnique(list []selfAddr, a selfAddr) []selfAddr {
	for _, x := range list {
		if x == a {
			return list
		}
	}
	return append(list, a)
}

// Why a connection ended, as the supervisor counts it.
const (
	closedByPeer      = "peer"            // the peer closed it, or it broke
	closedIdle        = "idle"            // tcp_connection_lifetime passed without a byte
	closedSlowMessage = "message_timeout" // a message took longer than tcp_message_timeout
	closedHandshake   = "handshake"       // the TLS handshake or the WebSocket Upgrade failed or timed out
	closedOrigin      = "origin"          // a WebSocket Upgrade from an origin not allowed
	closedBadMessage  = "malformed"       // not SIP (or WebSocket) framing, or over the size bound
	closedBanned      = "banned"          // its source was banned (package overload/pike)
	closedHandOff     = "handoff_failed"  // a TLS connection whose state could not go on
)

// readConn frames SIP messages on a stream (RFC 3261 18.3: Content-Length
// marks the end) and submits each to the loop. What a peer may cost is
// bounded in time: the TLS handshake, the wait between messages (idle), and
// each message from its first byte to its last, so that one trickling
// bytes (slowloris) or never finishing a handshake is closed.
func (w *Worker) readConn(tc *tcpConn) {
	lim := tc.limits
	if t, ok := tc.c.(*tls.Conn); ok && tc.inbound {
		ctx, cancel := context.WithTimeout(context.Background(), orDefault(lim.HandshakeTimeout, 10*time.Second))
		err := t.HandshakeContext(ctx)
		cancel()
		if err != nil {
			w.opt.Submit(func() {
				w.Stats.TLSHandshakeFailures++
				w.log.Info("tls handshake failed", "peer", tc.remote.String(), "error", err)
				w.closeConn(tc, closedHandshake)
			})
			return
		}
		if tc.rec != nil {
			tc.rec.handshakeDone()
		}
	}
	lifetime, msgTimeout := orDefault(lim.Lifetime, 120*time.Second), orDefault(lim.MessageTimeout, 20*time.Second)
	var src io.Reader = tc.c
	if tc.secure {
		src = &fullTracker{r: tc.c, tc: tc}
	}
	r := bufio.NewReaderSize(src, 8<<10)
	if tc.ws {
		if !tc.handed && !w.upgradeWS(tc, r) {
			return
		}
		w.readWS(tc, r, lifetime, msgTimeout)
		return
	}
	crlf := 0
	for {
		if !w.awaitMessage(tc, r, lifetime) {
			return
		}
		b, _ := r.Peek(1)
		// RFC 5626 keep-alives between messages: a double CRLF ping gets a
		// CRLF pong, and keeps the connection from being idle.
		if b[0] == '\r' || b[0] == '\n' {
			r.ReadByte()
			if b[0] == '\n' {
				if crlf++; crlf == 2 {
					crlf = 0
					w.opt.Submit(func() {
						if !tc.closed {
							tc.write([]byte("\r\n"))
						}
					})
				}
			}
			continue
		}
		crlf = 0
		// Set under rmu: a Drain that interrupted the wait after Peek
		// returned loses to this deadline, so no message is cut.
		tc.rmu.Lock()
		tc.c.SetReadDeadline(time.Now().Add(msgTimeout))
		tc.rmu.Unlock()
		msg, err := readStreamMessage(r)
		if err != nil {
			w.readFailed(tc, err)
			return
		}
		at := time.Now().UnixNano()
		w.opt.Submit(func() {
			w.handle(msg, source{proto: tc.proto(), addr: tc.remote, sock: -1, conn: tc, readAt: at})
		})
	}
}

// awaitMessage waits between messages until a byte comes: idle, unless
// the loop writes on the connection meanwhile. It reports false when the
// reader is to stop: the connection was closed (for being idle, or by the
// peer), or parked for a hand-off, with what was read past the last
// message.
func (w *Worker) awaitMessage(tc *tcpConn, r *bufio.Reader, lifetime time.Duration) bool {
	// later: the hand-off asked for cannot happen at this boundary, only
	// at the next one (errMoveLater); meanwhile a timeout is the idle
	// one, not Drain's wake-up.
	later := false
	for {
		tc.rmu.Lock()
		tc.c.SetReadDeadline(time.Now().Add(lifetime))
		if tc.handoff.Load() && !later {
			tc.rmu.Unlock()
			prefix, _ := r.Peek(r.Buffered())
			prefix = append([]byte(nil), prefix...)
			if tc.secure {
				st, plain, err := tc.readMoveState()
				if errors.Is(err, errMoveLater) {
					later = true
					continue
				}
				if err != nil {
					// It cannot move at all: it stays here, until idle.
					tc.handoff.Store(false)
					continue
				}
				tc.moveRead, prefix = st, append(prefix, plain...)
			}
			w.opt.Submit(func() { w.park(tc, prefix) })
			return false
		}
		tc.waiting = true
		tc.rmu.Unlock()
		_, err := r.Peek(1)
		tc.rmu.Lock()
		tc.waiting = false
		tc.rmu.Unlock()
		if err == nil {
			return true
		}
		if isTimeout(err) && tc.handoff.Load() && !later {
			continue
		}
		if isTimeout(err) {
			if last := tc.lastWrite.Load(); time.Since(time.Unix(0, last)) < lifetime {
				// The read timed out, so crypto/tls held no plaintext:
				// a move put off may happen now.
				later = false
				continue
			}
			w.opt.Submit(func() {
				if tc.ws && !tc.closed {
					tc.writeRaw(wsCloseFrame(wsStatusGoingAway))
				}
				w.closeConn(tc, closedIdle)
			})
			return false
		}
		w.opt.Submit(func() { w.closeConn(tc, closedByPeer) })
		return false
	}
}

// readFailed closes a connection whose message could not be read, with
// the reason the supervisor counts.
func (w *Worker) readFailed(tc *tcpConn, err error) {
	reason := closedBadMessage
	var wsErr *wsError
	switch {
	case isTimeout(err):
		reason = closedSlowMessage
	case errors.Is(err, errWSClosed), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, net.ErrClosed):
		reason = closedByPeer
	}
	errors.As(err, &wsErr)
	w.opt.Submit(func() {
		if reason != closedByPeer {
			w.log.Info(tc.proto()+" connection closed", "peer", tc.remote.String(), "reason", reason, "error", err)
		}
		// A WebSocket peer is told why, or has its close answered
		// (RFC 6455 5.5.1).
		switch {
		case tc.closed:
		case wsErr != nil:
			tc.writeRaw(wsCloseFrame(wsErr.status))
		case errors.Is(err, errWSClosed):
			tc.writeRaw(wsCloseFrame(wsStatusNormal))
		}
		w.closeConn(tc, reason)
	})
}

// upgradeWS reads a new WebSocket connection's HTTP Upgrade, within the
// handshake timeout, and answers it: 101 with the sip subprotocol, or the
// refusal (403 for an origin not allowed). It reports whether the
// connection goes on. The answer is written here, not on the loop: no
// message has come over the connection, so nothing else writes on it yet.
func (w *Worker) upgradeWS(tc *tcpConn, r *bufio.Reader) bool {
	tc.c.SetReadDeadline(time.Now().Add(orDefault(tc.limits.HandshakeTimeout, 10*time.Second)))
	resp, err := wsUpgrade(r, tc.origins)
	reason := closedHandshake
	var ref *wsRefusal
	if errors.As(err, &ref) {
		resp = ref.response()
		if ref.code == 403 {
			reason = closedOrigin
		}
	}
	if resp != nil {
		tc.c.SetWriteDeadline(time.Now().Add(2 * time.Second))
		if _, werr := tc.c.Write(resp); werr != nil && err == nil {
			err = werr
		}
	}
	if err == nil {
		return true
	}
	w.opt.Submit(func() {
		w.Stats.WSRefused++
		w.log.Info("websocket upgrade failed", "peer", tc.remote.String(), "reason", reason, "error", err)
		w.closeConn(tc, reason)
	})
	return false
}

// readWS reads the frames of an upgraded WebSocket connection (RFC 6455,
// RFC 7118): each data message is one SIP message, handled on the loop as
// one read from a stream is; pings are answered there. The bounds of the
// TCP path hold: idle between messages, message_timeout from a message's
// first byte to its last, the size of a message, and the hand-off at a
// message boundary.
func (w *Worker) readWS(tc *tcpConn, r *bufio.Reader, lifetime, msgTimeout time.Duration) {
	wr := &wsReader{r: r, max: maxTCPMessage}
	for {
		// A control frame may come between the fragments of a message,
		// which is then still under way: no idle wait, no hand-off, and
		// the message's deadline stands (pings do not stretch it).
		if !wr.midMessage() {
			if !w.awaitMessage(tc, r, lifetime) {
				return
			}
			tc.rmu.Lock()
			tc.c.SetReadDeadline(time.Now().Add(msgTimeout))
			tc.rmu.Unlock()
		}
		f, err := wr.read()
		if err != nil {
			w.readFailed(tc, err)
			return
		}
		switch {
		case f.isPing:
			pong := appendWSFrame(nil, wsPong, f.ping)
			w.opt.Submit(func() {
				if !tc.closed {
					tc.writeRaw(pong)
				}
			})
		case f.data != nil && !blank(f.data):
			at := time.Now().UnixNano()
			msg := f.data
			w.opt.Submit(func() {
				w.handle(msg, source{proto: tc.proto(), addr: tc.remote, sock: -1, conn: tc, readAt: at})
			})
		}
	}
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// closeConn closes a connection and, for one the supervisor handed over,
// tells it why, so that its connection limits count only those open.
func (w *Worker) closeConn(tc *tcpConn, reason string) {
	if tc.closed {
		return
	}
	tc.closed = true
	tc.c.Close()
	if w.conns[tc.remote] == tc {
		delete(w.conns, tc.remote)
	}
	if tc.inbound && w.opt.ConnClosed != nil {
		w.opt.ConnClosed(reason, tc.remote.String())
	}
}

// readStreamMessage reads one message, framed by sipstream: the header
// ends at an empty line, the body is Content-Length bytes. The message is
// framed where the reader buffers it and copied out once, whole; one that
// outgrows the buffer is gathered beside it.
func readStreamMessage(r *bufio.Reader) ([]byte, error) {
	f := sipstream.Framer{MaxHeader: maxTCPMessage, MaxBody: maxTCPMessage}
	// big holds the message's first bytes once it outgrows r's buffer.
	var big []byte
	for {
		b, _ := r.Peek(r.Buffered())
		m := b
		if big != nil {
			m = append(big, b...)
		}
		skip, n, err := f.Next(m)
		if err != nil {
			return nil, err
		}
		if skip > 0 && big == nil {
			// Keep-alives before the message: not part of it.
			r.Discard(skip)
			f.Reset()
			continue
		}
		if n > 0 {
			if big != nil {
				r.Discard(n - len(big))
				return m[:n], nil
			}
			msg := append([]byte(nil), b[:n]...)
			r.Discard(n)
			return msg, nil
		}
		if big == nil && len(b) < r.Size() {
			// More of it, in the buffer.
			if _, err := r.Peek(len(b) + 1); err != nil && !errors.Is(err, bufio.ErrBufferFull) {
				return nil, err
			}
			continue
		}
		// The buffer is full and the message goes on: gather it beside,
		// out of the buffer, which the next read overwrites.
		if big == nil {
			m = append(make([]byte, 0, max(f.Need(), 2*len(b))), b...)
		} else if need := f.Need(); need > cap(m) {
			m = append(make([]byte, 0, need), m...)
		}
		big = m
		r.Discard(len(b))
		if _, err := r.Peek(1); err != nil {
			return nil, err
		}
	}
}

// connTo returns a connection of proto ("tcp", "tls", "ws" or "wss") to
// addr: one already open (either way), or a new one over TCP or TLS.
// Dialing, and the TLS handshake, block the loop for at most DialTimeout.
// A WebSocket peer is a client (a browser) reached only over the
// connection it opened: none is opened to it.
func (w *Worker) connTo(addr netip.AddrPort, proto string) (*tcpConn, error) {
	if c, ok := w.conns[addr]; ok && !c.closed && c.proto() == proto {
		return c, nil
	}
	if proto == "ws" || proto == "wss" {
		return nil, fmt.Errorf("no %s connection from %s: a WebSocket client is reached only over the connection it opened", proto, addr)
	}
	secure := proto == "tls"
	c, err := net.DialTimeout("tcp", addr.String(), w.opt.DialTimeout)
	if err != nil {
		return nil, fmt.Errorf("connect to %s: %w", addr, err)
	}
	if !secure {
		return w.adopt(rawStream(c), false, false, false, false), nil
	}
	if w.tlsClient == nil {
		if w.tlsClient, err = w.opt.TLS.ClientConfig(); err != nil {
			c.Close()
			return nil, err
		}
	}
	conf := w.tlsClient.Clone()
	conf.ServerName = addr.Addr().String()
	t := tls.Client(c, conf)
	ctx, cancel := context.WithTimeout(context.Background(), min(w.opt.DialTimeout, orDefault(w.opt.Conn.HandshakeTimeout, 10*time.Second)))
	defer cancel()
	if err := t.HandshakeContext(ctx); err != nil {
		c.Close()
		w.Stats.TLSHandshakeFailures++
		return nil, fmt.Errorf("tls to %s: %w", addr, err)
	}
	return w.adopt(t, false, true, false, false), nil
}

// tcpAdvertised is the address to put in Via and Record-Route for a TCP
// hop: the listening address, so that new connections come to it.
func (w *Worker) tcpAdvertised(c *tcpConn) netip.AddrPort {
	if c.inbound {
		return c.local
	}
	listen := w.tcpListen
	switch c.proto() {
	case "tls":
		listen = w.tlsListen
	case "ws":
		listen = w.wsListen
	case "wss":
		listen = w.wssListen
	}
	for _, l := range listen {
		if l.Port() != 0 {
			return l
		}
	}
	return c.local
}

// admit applies the one admission decision to a request that came over a
// connection, which no door saw: what admission may refuse (overload.Classify:
// a new session, a REGISTER that may add a binding, a probe of the server)
// is asked of the supervisor, which holds the state; a refusal gets the
// door's 503 with Retry-After, sent statelessly, and is not handled
// further. It reports whether the request goes on.
func (w *Worker) admit(req *sip.Request, src source) bool {
	if w.opt.Admit == nil {
		return true
	}
	r := admissionRequest(req)
	c, k := overload.Classify(r)
	switch c {
	case overload.ClassNew, overload.ClassRegister, overload.ClassProbe:
	default:
		return true
	}
	refuse, retry := w.opt.Admit(c, k, r.Method, []byte(*req.CallID()), waited(src.readAt))
	if !refuse {
		return true
	}
	w.Stats.Refused++
	w.replyStateless(req, src, 503, "Service Unavailable", []string{"Retry-After: " + strconv.Itoa(retry)})
	return false
}

// waited is how long ago a message read at readAt (unix ns, 0 for
// unknown) was read.
func waited(readAt int64) int64 {
	if readAt == 0 {
		return 0
	}
	return max(time.Now().UnixNano()-readAt, 0)
}

// admissionRequest is what admission reads of a parsed request, as the
// front door reads it of a scanned one (overload.RequestOf).
func admissionRequest(req *sip.Request) overload.Request {
	_, inDialog := param(req.To().Params, "tag")
	expires := -1
	if h := headerValue(req, "Expires"); h != "" {
		if n, err := strconv.Atoi(strings.TrimSpace(h)); err == nil && n >= 0 {
			expires = n
		}
	}
	sipURI := strings.EqualFold(req.Recipient.Scheme, "sip") || strings.EqualFold(req.Recipient.Scheme, "sips")
	return overload.Request{IsRequest: true, Method: sipscan.ParseMethod([]byte(req.Method)), InDialog: inDialog,
		Expires: expires, NoUser: sipURI && req.Recipient.User == ""}
}

// refuseBanned refuses a request read from a connection whose source is
// banned, and closes the connection: the supervisor refuses the source's
// new connections at accept, and this one was open when the ban came. It
// counts the requests of sources that are not banned, as the front doors
// count those over UDP. It reports whether the request was refused.
func (w *Worker) refuseBanned(req *sip.Request, src source) bool {
	if w.opt.Banned != nil {
		if banned, reply := w.opt.Banned(src.addr.Addr()); banned {
			w.Stats.Banned++
			if reply && req.Method != sip.ACK {
				w.replyStateless(req, src, 403, "Forbidden", nil)
			}
			w.closeConn(src.conn, closedBanned)
			return true
		}
	}
	if w.opt.CountRequest != nil {
		w.opt.CountRequest(src.addr.Addr())
	}
	return false
}

// late applies the bound on waiting to a request read from a connection:
// one that waited longer than max_queue_wait (behind a slow script, or in
// the loop's queue under overload) is refused with 503 and Retry-After,
// as UDP drops it, so that the time goes to requests a client still waits
// for. A stream's client does not retransmit, so nothing is dropped in
// silence: what may not be refused — an ACK, a CANCEL, a request inside a
// dialog, whose calls are up and must complete — is handled late. It
// reports whether the request was refused.
func (w *Worker) late(req *sip.Request, src source) bool {
	if w.opt.Late == nil || !w.opt.Late(src.readAt) || req.Method == sip.ACK || req.Method == sip.CANCEL {
		return false
	}
	if _, ok := param(req.To().Params, "tag"); ok {
		return false
	}
	w.Stats.Late++
	if w.opt.RefusedLate != nil {
		w.opt.RefusedLate()
	}
	w.replyStateless(req, src, 503, "Service Unavailable (waited too long)",
		[]string{"Retry-After: " + strconv.Itoa(w.opt.RetryAfter.Draw())})
	return true
}

// noteSession tells the supervisor of a request read from a connection
// that starts, moves on or ends a session, so that it counts sessions over
// TCP as the front door counts those over UDP (overload/sessions).
func (w *Worker) noteSession(req *sip.Request) {
	if w.opt.NoteSession == nil {
		return
	}
	m := sipscan.ParseMethod([]byte(req.Method))
	switch m {
	case sipscan.Invite, sipscan.Ack, sipscan.Bye, sipscan.Subscribe:
	default:
		return
	}
	_, toTag := param(req.To().Params, "tag")
	expires := int32(-1)
	if h := headerValue(req, "Expires"); h != "" {
		if n, err := strconv.ParseInt(h, 10, 32); err == nil && n >= 0 {
			expires = int32(n)
		}
	}
	branch, _ := req.Via().Params.Get("branch")
	w.opt.NoteSession(m, toTag, expires, []byte(branch), []byte(*req.CallID()))
}

// errMoveLater says a TLS connection cannot move at this message
// boundary but may at a later one: crypto/tls may hold part of a record,
// or plaintext past what the reader took (its last read filled the
// reader's buffer from a larger record, as a client's batch of messages
// makes).
var errMoveLater = errors.New("tls: not between records")

// refusedOnConn applies to a request on the bytes read from a
// connection what onRequest applies to a decoded one, in its order:
// refuseBanned, late and admit, each deciding on the scanned message. A
// refusal's reply is built from the request decoded, as onRequest builds
// it. It reports whether the request was refused.
func (w *Worker) refusedOnConn(m *sipmsg.Msg, src source) bool {
	if w.opt.Banned != nil {
		if banned, reply := w.opt.Banned(src.addr.Addr()); banned {
			w.Stats.Banned++
			if reply && m.Method != sipscan.Ack {
				if req := w.decodeRefused(m, src); req != nil {
					w.replyStateless(req, src, 403, "Forbidden", nil)
				}
			}
			w.closeConn(src.conn, closedBanned)
			return true
		}
	}
	if w.opt.CountRequest != nil {
		w.opt.CountRequest(src.addr.Addr())
	}
	if w.opt.Late != nil && m.Method != sipscan.Ack && m.Method != sipscan.Cancel && !m.HasToTag && w.opt.Late(src.readAt) {
		w.Stats.Late++
		if w.opt.RefusedLate != nil {
			w.opt.RefusedLate()
		}
		if req := w.decodeRefused(m, src); req != nil {
			w.replyStateless(req, src, 503, "Service Unavailable (waited too long)",
				[]string{"Retry-After: " + strconv.Itoa(w.opt.RetryAfter.Draw())})
		}
		return true
	}
	if w.opt.Admit == nil {
		return false
	}
	c, k := overload.Classify(overload.RequestOf(&m.Msg))
	switch c {
	case overload.ClassNew, overload.ClassRegister, overload.ClassProbe:
	default:
		return false
	}
	refuse, retry := w.opt.Admit(c, k, m.Method, m.CallID, waited(src.readAt))
	if !refuse {
		return false
	}
	w.Stats.Refused++
	if req := w.decodeRefused(m, src); req != nil {
		w.replyStateless(req, src, 503, "Service Unavailable", []string{"Retry-After: " + strconv.Itoa(retry)})
	}
	return true
}

// decodeRefused is the request on the bytes decoded, with its top Via
// noting where it came from, for a refusal's reply; nil, counted
// malformed, when sipgo refuses what the scanner took.
func (w *Worker) decodeRefused(m *sipmsg.Msg, src source) *sip.Request {
	msg, err := w.parser.ParseSIP(m.Raw)
	req, ok := msg.(*sip.Request)
	if err != nil || !ok || req.Via() == nil || req.CallID() == nil || req.CSeq() == nil || req.From() == nil || req.To() == nil {
		w.Stats.Malformed++
		return nil
	}
	repairVias(req)
	w.noteReceived(req, src)
	return req
}

// noteSessionBytes is noteSession of a request on the bytes.
func (w *Worker) noteSessionBytes(m *sipmsg.Msg) {
	if w.opt.NoteSession == nil {
		return
	}
	switch m.Method {
	case sipscan.Invite, sipscan.Ack, sipscan.Bye, sipscan.Subscribe:
	default:
		return
	}
	expires := int32(-1)
	if m.Expires >= 0 && m.Expires <= math.MaxInt32 {
		expires = int32(m.Expires)
	}
	w.opt.NoteSession(m.Method, m.HasToTag, expires, m.Branch, m.CallID)
}

// readMoveState is the reading half of a TLS connection's state, on the
// reader's goroutine once it stopped between messages, with the plaintext
// the record layer read past them; errMoveLater when it cannot move now,
// another error when it cannot move at all.
func (tc *tcpConn) readMoveState() (*tlsMoveState, []byte, error) {
	if tc.moved != nil {
		st, plain, err := tc.moved.moveState()
		// Bytes handed over before and not read yet come first.
		if p, is := tc.c.(*prefixed); is && err == nil && p.pre.Len() > 0 {
			rest := make([]byte, p.pre.Len())
			p.pre.Read(rest)
			plain = append(rest, plain...)
		}
		return st, plain, err
	}
	rec := tc.rec
	t, ok := tc.c.(*tls.Conn)
	if rec == nil || !ok {
		return nil, nil, errors.New("tls: not a connection accepted on a tls: socket")
	}
	cs := t.ConnectionState()
	if cs.Version != tls.VersionTLS13 {
		return nil, nil, fmt.Errorf("tls: version %x cannot be handed over", cs.Version)
	}
	if _, _, err := suiteParams(cs.CipherSuite); err != nil {
		return nil, nil, err
	}
	rec.keysMu.Lock()
	secret := rec.clientApp
	rec.keysMu.Unlock()
	if secret == nil {
		return nil, nil, errors.New("tls: no application secret logged")
	}
	if tc.lastFull {
		return nil, nil, errMoveLater
	}
	raw, seq, ok := rec.readState()
	if !ok {
		return nil, nil, errMoveLater
	}
	return &tlsMoveState{suite: cs.CipherSuite, readSecret: secret, readSeq: seq, raw: raw}, nil, nil
}

// writeMoveState completes a parked TLS connection's state with the
// writing half, on the loop: false when crypto/tls wrote records of its
// own (a KeyUpdate's answer), after which its secrets are not the first.
func (tc *tcpConn) writeMoveState() (*tlsMoveState, bool) {
	st := tc.moveRead
	if st == nil {
		return nil, false
	}
	if tc.moved != nil {
		tc.moved.wmu.Lock()
		st.writeSecret, st.writeSeq = tc.moved.out.secret, tc.moved.out.seq
		tc.moved.wmu.Unlock()
		return st, true
	}
	rec := tc.rec
	wrote := rec.wrote.Load() - rec.hsWrites
	rec.keysMu.Lock()
	secret := rec.serverApp
	rec.keysMu.Unlock()
	if wrote != tc.expectW || secret == nil || rec.ticketLarge.Load() {
		return nil, false
	}
	st.writeSecret, st.writeSeq = secret, rec.tickets.Load()+wrote
	return st, true
}

// Drain hands the connections clients opened back to the supervisor, for
// another worker to read, so that scaling the group down closes none
// (pool.Drainer). Each is handed over at a message boundary, once every
// request read from it has its final answer; a TLS 1.3 one with its record
// layer's state (tlsmove.go); one that is not between records at a
// boundary moves at a later one. A TLS connection that cannot move at all
// (TLS 1.2, ChaCha20), and a WSS one, is kept until it is idle or the
// drain times out. A WS one is handed over between WebSocket messages: the
// worker that takes it reads frames at once.
func (w *Worker) Drain() {
	w.draining = true
	if w.opt.HandOff == nil {
		return
	}
	for _, tc := range w.conns {
		if !tc.inbound || !tc.movable() || tc.closed {
			continue
		}
		tc.rmu.Lock()
		tc.handoff.Store(true)
		if tc.waiting {
			tc.c.SetReadDeadline(time.Now())
		}
		tc.rmu.Unlock()
	}
}

// park takes a connection whose reader stopped for the hand-off.
func (w *Worker) park(tc *tcpConn, prefix []byte) {
	if tc.closed {
		return
	}
	tc.parked, tc.prefix = true, prefix
	w.handOffParked()
}

// handOffParked hands over the parked connections whose requests all have
// their final answers; the others wait for a later tick.
func (w *Worker) handOffParked() {
	for _, tc := range w.conns {
		if !tc.parked || tc.closed {
			continue
		}
		waiting := false
		for st := range w.txns.Servers() {
			if st.src.conn == tc && st.State == txn.Trying {
				waiting = true
				break
			}
		}
		if waiting {
			continue
		}
		var state []byte
		raw := tc.c
		if tc.secure {
			st, ok := tc.writeMoveState()
			if !ok {
				w.log.Info("tls connection cannot move: its keys changed; closed", "peer", tc.remote.String())
				w.closeConn(tc, closedHandOff)
				continue
			}
			state = st.marshal()
			// Closing crypto/tls's connection would say close_notify.
			if tc.rec != nil {
				raw = tc.rec.Conn
			} else {
				raw = tc.moved.Conn
			}
		}
		tc.closed = true
		delete(w.conns, tc.remote)
		w.opt.HandOff(tc.remote.String(), tc.prefix, state)
		// The supervisor's copy keeps the connection open for the next
		// worker: this closes only ours.
		if r, ok := raw.(interface{ Release() error }); ok {
			r.Release()
		} else {
			raw.Close()
		}
		w.Stats.HandedOff++
	}
}

// heldConns is how many connections a draining worker still has to hand
// over or see closed.
func (w *Worker) heldConns() int {
	if !w.draining {
		return 0
	}
	n := 0
	for _, tc := range w.conns {
		if tc.inbound && !tc.closed {
			n++
		}
	}
	return n
}
