package harness

import (
	"bufio"
	"crypto/rand"
	"crypto/sha1"
	"crypto/tls"
	"encoding/base64"
	"encoding/binary"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// WS is the client side of a WebSocket connection (RFC 6455), written for
// the tests: a SIP client over ws: and wss: (RFC 7118), and the DevTools
// connection to a browser. It frames as a client must (masked) and reads
// what a server sends (unmasked, possibly fragmented), answering pings.
type WS struct {
	t testing.TB
	C net.Conn
	r *bufio.Reader
}

// DialWS opens a WebSocket to addr (IP:PORT) at path with the Upgrade
// headers given (Origin, Sec-WebSocket-Protocol), over TLS when conf is
// set. It returns the HTTP status of the answer: a connection only for 101.
func DialWS(t testing.TB, addr, path string, conf *tls.Config, headers map[string]string) (*WS, int, error) {
	t.Helper()
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return nil, 0, err
	}
	if conf != nil {
		tc := tls.Client(c, conf)
		tc.SetDeadline(time.Now().Add(10 * time.Second))
		if err := tc.Handshake(); err != nil {
			c.Close()
			return nil, 0, err
		}
		c = tc
	}
	var k [16]byte
	rand.Read(k[:])
	key := base64.StdEncoding.EncodeToString(k[:])
	req := "GET " + path + " HTTP/1.1\r\nHost: " + addr + "\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Key: " + key + "\r\nSec-WebSocket-Version: 13\r\n"
	for h, v := range headers {
		req += h + ": " + v + "\r\n"
	}
	c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		c.Close()
		return nil, 0, err
	}
	r := bufio.NewReader(c)
	resp, err := http.ReadResponse(r, nil)
	if err != nil {
		c.Close()
		return nil, 0, err
	}
	resp.Body.Close()
	if resp.StatusCode != 101 {
		c.Close()
		return nil, resp.StatusCode, nil
	}
	sum := sha1.Sum([]byte(key + "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"))
	if got := resp.Header.Get("Sec-WebSocket-Accept"); got != base64.StdEncoding.EncodeToString(sum[:]) {
		c.Close()
		return nil, 101, fmt.Errorf("Sec-WebSocket-Accept %q does not answer the key", got)
	}
	c.SetDeadline(time.Time{})
	return &WS{t: t, C: c, r: r}, 101, nil
}

// SIPOverWS opens a sip-subprotocol WebSocket to addr, failing the test
// unless it is accepted.
func SIPOverWS(t testing.TB, addr string, conf *tls.Config) *WS {
	t.Helper()
	ws, code, err := DialWS(t, addr, "/", conf, map[string]string{"Sec-WebSocket-Protocol": "sip"})
	if err != nil || code != 101 {
		t.Fatalf("websocket to %s: status %d, %v", addr, code, err)
	}
	return ws
}

// Frame is a client frame: op (1 text, 2 binary, 8 close, 9 ping, 10 pong),
// masked unless unmasked is set.
func Frame(fin bool, op byte, payload []byte, unmasked bool) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	b := []byte{b0}
	var m byte = 0x80
	if unmasked {
		m = 0
	}
	switch n := len(payload); {
	case n < 126:
		b = append(b, m|byte(n))
	case n <= 0xFFFF:
		b = append(b, m|126, byte(n>>8), byte(n))
	default:
		b = append(b, m|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	if unmasked {
		return append(b, payload...)
	}
	var mask [4]byte
	rand.Read(mask[:])
	b = append(b, mask[:]...)
	for i, c := range payload {
		b = append(b, c^mask[i&3])
	}
	return b
}

// WriteRaw writes bytes as they are.
func (ws *WS) WriteRaw(b []byte) error {
	ws.C.SetWriteDeadline(time.Now().Add(5 * time.Second))
	_, err := ws.C.Write(b)
	return err
}

// Send sends one message in a text frame.
func (ws *WS) Send(msg string) {
	ws.t.Helper()
	if err := ws.WriteRaw(Frame(true, 1, []byte(msg), false)); err != nil {
		ws.t.Fatalf("websocket send: %v", err)
	}
}

// ReadFrame reads one server frame: its opcode and payload; fragments
// are not joined.
func (ws *WS) ReadFrame(within time.Duration) (fin bool, op byte, payload []byte, err error) {
	ws.C.SetReadDeadline(time.Now().Add(within))
	var h [2]byte
	if _, err = io.ReadFull(ws.r, h[:]); err != nil {
		return
	}
	fin, op = h[0]&0x80 != 0, h[0]&0x0F
	if h[1]&0x80 != 0 {
		return fin, op, nil, fmt.Errorf("masked frame from the server")
	}
	n := uint64(h[1] & 0x7F)
	switch n {
	case 126:
		var b [2]byte
		if _, err = io.ReadFull(ws.r, b[:]); err != nil {
			return
		}
		n = uint64(binary.BigEndian.Uint16(b[:]))
	case 127:
		var b [8]byte
		if _, err = io.ReadFull(ws.r, b[:]); err != nil {
			return
		}
		n = binary.BigEndian.Uint64(b[:])
	}
	if n > 64<<20 {
		return fin, op, nil, fmt.Errorf("frame of %d bytes", n)
	}
	payload = make([]byte, n)
	_, err = io.ReadFull(ws.r, payload)
	return
}

// Recv reads the next data message, joining fragments and answering
// pings; a close frame is an error that names its status.
func (ws *WS) Recv(within time.Duration) (string, error) {
	deadline := time.Now().Add(within)
	var msg []byte
	for {
		fin, op, p, err := ws.ReadFrame(time.Until(deadline))
		if err != nil {
			return "", err
		}
		switch op {
		case 9:
			ws.WriteRaw(Frame(true, 10, p, false))
			continue
		case 10:
			continue
		case 8:
			status := 0
			if len(p) >= 2 {
				status = int(binary.BigEndian.Uint16(p))
			}
			return "", &WSClosed{Status: status}
		}
		msg = append(msg, p...)
		if fin {
			return string(msg), nil
		}
	}
}

// WSClosed is the server's close frame.
type WSClosed struct{ Status int }

func (e *WSClosed) Error() string {
	return fmt.Sprintf("websocket closed by the server, status %d", e.Status)
}

// Expect reads SIP messages until one satisfies want, failing the test
// after within.
func (ws *WS) Expect(within time.Duration, what string, want func(Msg) bool) Msg {
	ws.t.Helper()
	deadline := time.Now().Add(within)
	var seen []string
	for {
		s, err := ws.Recv(time.Until(deadline))
		if err != nil {
			ws.t.Fatalf("waiting for %s over websocket: %v; seen %q", what, err, seen)
		}
		first, _, _ := strings.Cut(s, "\r\n")
		m := Msg{Raw: s, First: first}
		if want(m) {
			return m
		}
		seen = append(seen, strings.SplitN(s, "\r\n", 2)[0])
	}
}

// Close closes the connection.
func (ws *WS) Close() { ws.C.Close() }
