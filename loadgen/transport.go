package loadgen

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/sipvisor/sipvisor/internal/sipstream"
)

// packet is one received SIP message, handed from a reader goroutine to the
// endpoint's loop, which owns all call state.
type packet struct {
	buf  []byte // backing buffer, back to bufPool when handled
	data []byte
	from peer
}

// peer is where a reply goes: a UDP address, or the TCP connection the
// request came on.
type peer struct {
	ap netip.AddrPort
	c  *streamConn
}

const maxDatagram = 65535

// sink is where reader goroutines hand over messages and errors. Once the
// loop has ended (quit closed) nothing reads them, so a reader gives up
// instead of blocking forever.
type sink struct {
	in   chan *packet
	errc chan error
	quit chan struct{}
}

func (s *sink) deliver(p *packet) bool {
	select {
	case s.in <- p:
		return true
	case <-s.quit:
		return false
	}
}

func (s *sink) fail(err error) {
	select {
	case s.errc <- err:
	case <-s.quit:
	}
}

var bufPool = sync.Pool{New: func() any { b := make([]byte, maxDatagram); return &b }}

// transport is one UDP socket or a set of TCP connections.
type transport interface {
	send(b []byte, to peer) error
	localAddr() netip.AddrPort
	close() error
	// drops reports datagrams the kernel dropped on this socket, or -1.
	drops() int64
}

type udpTransport struct {
	c    *net.UDPConn
	port int
}

func listenUDP(ip string, port int, bufSize int, k *sink) (*udpTransport, error) {
	a, err := netip.ParseAddr(ip)
	if err != nil {
		return nil, fmt.Errorf("local IP %q: %w", ip, err)
	}
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(a, uint16(port))))
	if err != nil {
		return nil, fmt.Errorf("listen udp: %w", err)
	}
	// Small socket buffers, not the server, are what loses calls under
	// load; ask for large ones (the kernel caps them at rmem_max).
	_ = c.SetReadBuffer(bufSize)
	_ = c.SetWriteBuffer(bufSize)
	t := &udpTransport{c: c, port: c.LocalAddr().(*net.UDPAddr).Port}
	go func() {
		for {
			bp := bufPool.Get().(*[]byte)
			n, from, err := c.ReadFromUDPAddrPort(*bp)
			if err != nil {
				bufPool.Put(bp)
				if !errors.Is(err, net.ErrClosed) {
					k.fail(fmt.Errorf("read udp: %w", err))
				}
				return
			}
			if !k.deliver(&packet{buf: *bp, data: (*bp)[:n], from: peer{ap: from}}) {
				return
			}
		}
	}()
	return t, nil
}

func (t *udpTransport) send(b []byte, to peer) error {
	_, err := t.c.WriteToUDPAddrPort(b, to.ap)
	return err
}

func (t *udpTransport) localAddr() netip.AddrPort {
	return t.c.LocalAddr().(*net.UDPAddr).AddrPort()
}

func (t *udpTransport) close() error { return t.c.Close() }

func (t *udpTransport) drops() int64 { return udpDrops(t.port) }

// udpDrops reads the kernel's per-socket drop counter from /proc/net/udp{,6}.
func udpDrops(port int) int64 {
	var total int64 = -1
	for _, f := range []string{"/proc/net/udp", "/proc/net/udp6"} {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		if n := parseUDPDrops(string(b), port); n >= 0 {
			total = max(total, 0) + n
		}
	}
	return total
}

// parseUDPDrops sums the last column ("drops") of the sockets bound to port
// in a /proc/net/udp table; -1 if there is none.
func parseUDPDrops(table string, port int) int64 {
	var total int64 = -1
	hexPort := fmt.Sprintf(":%04X", port)
	lines := strings.Split(table, "\n")
	for _, l := range lines[min(1, len(lines)):] {
		fs := strings.Fields(l)
		if len(fs) < 13 || !strings.HasSuffix(fs[1], hexPort) {
			continue
		}
		n, err := strconv.ParseInt(fs[len(fs)-1], 10, 64)
		if err != nil {
			continue
		}
		total = max(total, 0) + n
	}
	return total
}

// streamConn is one TCP connection; writes come only from the loop.
type streamConn struct {
	c net.Conn
	w *bufio.Writer
}

type tcpTransport struct {
	ln    net.Listener  // uas
	conn  *streamConn   // uac: the one connection of -t t1
	eof   chan struct{} // uac: closed when the server closes the connection
	local netip.AddrPort
	mu    sync.Mutex
	conns map[*streamConn]struct{}
	shut  bool // closed: a handshake that ends now is not served
}

// The bounds of a message sipload reads from a stream: a header of 64 KiB,
// a body of 1 MiB.
const (
	maxStreamHeader = 64 << 10
	maxStreamBody   = 1 << 20
)

// readStream frames messages off one connection. A client's only connection
// closing ends its run (reportClose), a server's peer leaving does not.
func readStream(sc *streamConn, k *sink, reportClose bool, done func()) {
	defer done()
	buf := make([]byte, 0, 256<<10)
	tmp := make([]byte, 64<<10)
	fr := sipstream.Framer{MaxHeader: maxStreamHeader, MaxBody: maxStreamBody}
	for {
		n, err := sc.c.Read(tmp)
		buf = append(buf, tmp[:n]...)
		for {
			skip, l, ferr := fr.Next(buf)
			if ferr != nil {
				k.fail(fmt.Errorf("tcp from %s: %w", sc.c.RemoteAddr(), ferr))
				sc.c.Close()
				return
			}
			if l == 0 {
				buf = buf[:copy(buf, buf[skip:])]
				break
			}
			bp := bufPool.Get().(*[]byte)
			if l > len(*bp) {
				b := make([]byte, l)
				bp = &b
			}
			copy(*bp, buf[skip:skip+l])
			if !k.deliver(&packet{buf: *bp, data: (*bp)[:l], from: peer{c: sc}}) {
				return
			}
			buf = buf[:copy(buf, buf[skip+l:])]
		}
		if err != nil {
			if reportClose && !errors.Is(err, net.ErrClosed) {
				k.fail(fmt.Errorf("tcp connection to %s: %w", sc.c.RemoteAddr(), err))
			}
			return
		}
	}
}

// tlsHandshakeTimeout bounds a client's TLS handshake, so a server that
// accepts the connection but never answers ends the run with a reason.
const tlsHandshakeTimeout = 10 * time.Second

// dialTCP opens the one connection of -t t1, or of -t l1 when tc is set.
func dialTCP(ip string, target string, tc *tls.Config, k *sink) (*tcpTransport, error) {
	d := net.Dialer{}
	if ip != "" {
		a, err := netip.ParseAddr(ip)
		if err != nil {
			return nil, fmt.Errorf("local IP %q: %w", ip, err)
		}
		d.LocalAddr = &net.TCPAddr{IP: a.AsSlice()}
	}
	c, err := d.Dial("tcp", target)
	if err != nil {
		return nil, fmt.Errorf("connect tcp: %w", err)
	}
	if tc != nil {
		tlc := tls.Client(c, tc)
		ctx, cancel := context.WithTimeout(context.Background(), tlsHandshakeTimeout)
		err := tlc.HandshakeContext(ctx)
		cancel()
		if err != nil {
			c.Close()
			return nil, fmt.Errorf("tls handshake with %s: %w", target, err)
		}
		c = tlc
	}
	sc := &streamConn{c: c, w: bufio.NewWriterSize(c, 64<<10)}
	t := &tcpTransport{conn: sc, local: c.LocalAddr().(*net.TCPAddr).AddrPort(), eof: make(chan struct{})}
	go readStream(sc, k, true, func() { close(t.eof) })
	return t, nil
}

// listenTCP accepts the connections of a server scenario over TCP, or over
// TLS when tc is set.
func listenTCP(ip string, port int, tc *tls.Config, k *sink) (*tcpTransport, error) {
	ln, err := net.Listen("tcp", joinHostPort(ip, port))
	if err != nil {
		return nil, fmt.Errorf("listen tcp: %w", err)
	}
	t := &tcpTransport{ln: ln, local: ln.Addr().(*net.TCPAddr).AddrPort(), conns: map[*streamConn]struct{}{}}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			if tc != nil {
				tlc := tls.Server(c, tc)
				go func() {
					// The handshake runs beside the accept loop so a slow
					// client holds up no other; one that fails is counted,
					// and the run goes on.
					ctx, cancel := context.WithTimeout(context.Background(), tlsHandshakeTimeout)
					err := tlc.HandshakeContext(ctx)
					cancel()
					if err != nil {
						k.fail(fmt.Errorf("tls handshake from %s: %w", c.RemoteAddr(), err))
						c.Close()
						return
					}
					t.serve(tlc, k)
				}()
				continue
			}
			t.serve(c, k)
		}
	}()
	return t, nil
}

// serve reads an accepted connection until its peer leaves.
func (t *tcpTransport) serve(c net.Conn, k *sink) {
	sc := &streamConn{c: c, w: bufio.NewWriterSize(c, 64<<10)}
	t.mu.Lock()
	if t.shut {
		t.mu.Unlock()
		c.Close()
		return
	}
	t.conns[sc] = struct{}{}
	t.mu.Unlock()
	go readStream(sc, k, false, func() {
		t.mu.Lock()
		delete(t.conns, sc)
		t.mu.Unlock()
		c.Close()
	})
}

func (t *tcpTransport) send(b []byte, to peer) error {
	sc := to.c
	if sc == nil {
		sc = t.conn
	}
	if sc == nil {
		return errors.New("no tcp connection")
	}
	// Buffered: the loop flushes once per batch of work, not per message.
	_, err := sc.w.Write(b)
	return err
}

// flush writes out what send buffered; the loop calls it when idle.
func (t *tcpTransport) flush() {
	if t.conn != nil {
		t.conn.w.Flush()
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	for sc := range t.conns {
		if sc.w.Buffered() > 0 {
			sc.w.Flush()
		}
	}
}

func (t *tcpTransport) localAddr() netip.AddrPort { return t.local }

// tcpLinger is how long a client keeps its connection after the last call:
// a server still finishing that call's transaction (SIPp's uas counts a call
// whose connection closed under it as failed) gets to end it first.
const tcpLinger = 500 * time.Millisecond

func (t *tcpTransport) close() error {
	if t.conn != nil {
		t.conn.w.Flush()
		select {
		case <-t.eof:
		case <-time.After(tcpLinger):
		}
		return t.conn.c.Close()
	}
	err := t.ln.Close()
	t.mu.Lock()
	defer t.mu.Unlock()
	t.shut = true
	for sc := range t.conns {
		sc.w.Flush()
		sc.c.Close()
	}
	return err
}

func (t *tcpTransport) drops() int64 { return -1 }
