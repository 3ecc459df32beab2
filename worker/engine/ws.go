package engine

import (
	"bufio"
	"bytes"
	"crypto/sha1"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode/utf8"
)

// SIP over WebSocket (RFC 7118) on ws: and wss: sockets. The server side of
// RFC 6455 is small: an HTTP/1.1 Upgrade that names the sip subprotocol,
// then frames, each data message one SIP message. It is written here over
// the connection reader the TCP path has, rather than taken from a
// library, so that every guard of that path (timeouts, size bounds,
// hand-off at a message boundary, the loop's single writer) holds as it
// is, and the bytes read past a message stay in the reader a hand-off
// passes on.

// WebSocket opcodes (RFC 6455 5.2).
const (
	wsContinuation = 0x0
	wsText         = 0x1
	wsBinary       = 0x2
	wsClose        = 0x8
	wsPing         = 0x9
	wsPong         = 0xA
)

// Close status codes (RFC 6455 7.4.1).
const (
	wsStatusNormal      = 1000
	wsStatusGoingAway   = 1001
	wsStatusProtocol    = 1002
	wsStatusInvalidData = 1007
	wsStatusTooBig      = 1009
)

// maxWSHandshake bounds the Upgrade request, request line and headers.
const maxWSHandshake = 16 << 10

// wsGUID is the key suffix of Sec-WebSocket-Accept (RFC 6455 1.3).
const wsGUID = "258EAFA5-E914-47DA-95CA-C5AB0DC85B11"

// wsError is a frame that breaks RFC 6455: the connection is closed with
// status, after a close frame that says so.
type wsError struct {
	status int
	msg    string
}

func (e *wsError) Error() string { return "websocket: " + e.msg }

func wsErrorf(status int, format string, a ...any) error {
	return &wsError{status: status, msg: fmt.Sprintf(format, a...)}
}

// errWSClosed is the peer's close frame: the close is answered and the
// connection ends as one the peer closed.
var errWSClosed = errors.New("websocket: closed by the peer")

// wsRefusal is an Upgrade refused with an HTTP status.
type wsRefusal struct {
	code   int
	reason string
	extra  string // header lines, each ending in CRLF
	why    string
}

func (e *wsRefusal) Error() string {
	return fmt.Sprintf("websocket upgrade refused %d: %s", e.code, e.why)
}

// response is the HTTP answer that refuses the Upgrade.
func (e *wsRefusal) response() []byte {
	return []byte(fmt.Sprintf("HTTP/1.1 %d %s\r\n%sContent-Length: 0\r\nConnection: close\r\n\r\n", e.code, e.reason, e.extra))
}

// wsUpgrade reads the HTTP Upgrade request of a new WebSocket connection
// and returns the 101 response that accepts it, or a *wsRefusal (with the
// response that refuses it) or a read error. origins, when not empty, are
// the web origins whose pages may connect.
func wsUpgrade(r *bufio.Reader, origins []string) ([]byte, error) {
	var lines []string
	total := 0
	for {
		line, err := r.ReadSlice('\n')
		if err == bufio.ErrBufferFull {
			return nil, &wsRefusal{code: 431, reason: "Request Header Fields Too Large", why: "header line too long"}
		}
		if err != nil {
			return nil, err
		}
		total += len(line)
		if total > maxWSHandshake {
			return nil, &wsRefusal{code: 431, reason: "Request Header Fields Too Large", why: fmt.Sprintf("upgrade request over %d bytes", maxWSHandshake)}
		}
		t := strings.TrimRight(string(line), "\r\n")
		if t == "" {
			if len(lines) == 0 {
				continue // a stray CRLF before the request line (RFC 9112 2.2)
			}
			break
		}
		lines = append(lines, t)
	}
	bad := func(why string) error { return &wsRefusal{code: 400, reason: "Bad Request", why: why} }
	method, rest, _ := strings.Cut(lines[0], " ")
	_, proto, _ := strings.Cut(rest, " ")
	if method != "GET" || !strings.HasPrefix(proto, "HTTP/1.") || proto == "HTTP/1.0" {
		return nil, bad(fmt.Sprintf("request line %q: want GET PATH HTTP/1.1", lines[0]))
	}
	h := map[string]string{}
	for _, l := range lines[1:] {
		name, value, ok := strings.Cut(l, ":")
		if !ok || name == "" || strings.TrimSpace(name) != name {
			return nil, bad(fmt.Sprintf("header line %q", l))
		}
		k := strings.ToLower(name)
		v := strings.TrimSpace(value)
		if old, ok := h[k]; ok {
			v = old + ", " + v
		}
		h[k] = v
	}
	if !hasToken(h["upgrade"], "websocket") || !hasToken(h["connection"], "upgrade") {
		return nil, &wsRefusal{code: 426, reason: "Upgrade Required", extra: "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Protocol: sip\r\n",
			why: "not a WebSocket upgrade (Upgrade: websocket, Connection: Upgrade)"}
	}
	if h["sec-websocket-version"] != "13" {
		return nil, &wsRefusal{code: 426, reason: "Upgrade Required", extra: "Sec-WebSocket-Version: 13\r\n",
			why: fmt.Sprintf("Sec-WebSocket-Version %q, want 13", h["sec-websocket-version"])}
	}
	key := h["sec-websocket-key"]
	if k, err := base64.StdEncoding.DecodeString(key); err != nil || len(k) != 16 {
		return nil, bad(fmt.Sprintf("Sec-WebSocket-Key %q is not 16 bytes in base64", key))
	}
	if o, ok := h["origin"]; ok && len(origins) > 0 && !originAllowed(o, origins) {
		return nil, &wsRefusal{code: 403, reason: "Forbidden", why: fmt.Sprintf("origin %q is not in ws_allowed_origins", o)}
	}
	if !hasToken(h["sec-websocket-protocol"], "sip") {
		return nil, bad(fmt.Sprintf("Sec-WebSocket-Protocol %q does not offer sip (RFC 7118)", h["sec-websocket-protocol"]))
	}
	sum := sha1.Sum([]byte(key + wsGUID))
	return []byte("HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n" +
		"Sec-WebSocket-Accept: " + base64.StdEncoding.EncodeToString(sum[:]) + "\r\n" +
		"Sec-WebSocket-Protocol: sip\r\n\r\n"), nil
}

// hasToken reports whether the comma-separated list v holds tok, case
// aside.
func hasToken(v, tok string) bool {
	for _, f := range strings.Split(v, ",") {
		if strings.EqualFold(strings.TrimSpace(f), tok) {
			return true
		}
	}
	return false
}

func originAllowed(o string, origins []string) bool {
	o = strings.TrimSuffix(strings.ToLower(strings.TrimSpace(o)), "/")
	for _, a := range origins {
		if strings.TrimSuffix(a, "/") == o {
			return true
		}
	}
	return false
}

// wsReader reads the frames of one connection from a client.
type wsReader struct {
	r   *bufio.Reader
	max int // bound on a message, fragments together
	// msg and op are a fragmented message under way.
	msg []byte
	op  byte
}

// wsFrame is what read returns: a whole data message (data), or a control
// frame the loop answers (a ping, with its payload), or neither (a pong).
type wsFrame struct {
	data []byte
	ping []byte
	// isPing is set for a ping, whose payload may be empty.
	isPing bool
}

// read reads frames until a data message is whole, or a control frame
// comes between messages. A close frame is errWSClosed; a frame that
// breaks RFC 6455 is a *wsError.
func (wr *wsReader) read() (wsFrame, error) {
	for {
		var hdr [2]byte
		if _, err := io.ReadFull(wr.r, hdr[:]); err != nil {
			return wsFrame{}, err
		}
		fin, op := hdr[0]&0x80 != 0, hdr[0]&0x0F
		if hdr[0]&0x70 != 0 {
			return wsFrame{}, wsErrorf(wsStatusProtocol, "reserved bits set (no extension was agreed)")
		}
		if hdr[1]&0x80 == 0 {
			return wsFrame{}, wsErrorf(wsStatusProtocol, "unmasked frame from the client (RFC 6455 5.1)")
		}
		n := uint64(hdr[1] & 0x7F)
		switch n {
		case 126:
			var b [2]byte
			if _, err := io.ReadFull(wr.r, b[:]); err != nil {
				return wsFrame{}, err
			}
			n = uint64(binary.BigEndian.Uint16(b[:]))
		case 127:
			var b [8]byte
			if _, err := io.ReadFull(wr.r, b[:]); err != nil {
				return wsFrame{}, err
			}
			n = binary.BigEndian.Uint64(b[:])
			if n>>63 != 0 {
				return wsFrame{}, wsErrorf(wsStatusProtocol, "payload length with its top bit set")
			}
		}
		control := op&0x8 != 0
		switch {
		case control && (op != wsClose && op != wsPing && op != wsPong):
			return wsFrame{}, wsErrorf(wsStatusProtocol, "reserved control opcode %#x", op)
		case !control && op > wsBinary:
			return wsFrame{}, wsErrorf(wsStatusProtocol, "reserved data opcode %#x", op)
		case control && (!fin || n > 125):
			return wsFrame{}, wsErrorf(wsStatusProtocol, "control frame fragmented or over 125 bytes")
		case op == wsContinuation && wr.op == 0:
			return wsFrame{}, wsErrorf(wsStatusProtocol, "continuation frame without a message under way")
		case (op == wsText || op == wsBinary) && wr.op != 0:
			return wsFrame{}, wsErrorf(wsStatusProtocol, "new message before the fragmented one ended")
		case !control && uint64(len(wr.msg))+n > uint64(wr.max):
			return wsFrame{}, wsErrorf(wsStatusTooBig, "message over %d bytes", wr.max)
		}
		var mask [4]byte
		if _, err := io.ReadFull(wr.r, mask[:]); err != nil {
			return wsFrame{}, err
		}
		start := len(wr.msg)
		if control {
			start = 0
		}
		var payload []byte
		if control {
			payload = make([]byte, n)
		} else {
			wr.msg = append(wr.msg, make([]byte, n)...)
			payload = wr.msg[start:]
		}
		if _, err := io.ReadFull(wr.r, payload); err != nil {
			return wsFrame{}, err
		}
		for i := range payload {
			payload[i] ^= mask[i&3]
		}
		switch op {
		case wsPing:
			return wsFrame{ping: payload, isPing: true}, nil
		case wsPong:
			if wr.op == 0 {
				return wsFrame{}, nil
			}
			continue
		case wsClose:
			if len(payload) == 1 {
				return wsFrame{}, wsErrorf(wsStatusProtocol, "close frame of 1 byte")
			}
			return wsFrame{}, errWSClosed
		case wsText, wsBinary:
			wr.op = op
		}
		if !fin {
			continue
		}
		msg, textual := wr.msg, wr.op == wsText
		wr.msg, wr.op = nil, 0
		if textual && !utf8.Valid(msg) {
			return wsFrame{}, wsErrorf(wsStatusInvalidData, "text message not UTF-8")
		}
		return wsFrame{data: msg}, nil
	}
}

// midMessage reports whether a fragmented message is under way: the
// connection is not at a message boundary.
func (wr *wsReader) midMessage() bool { return wr.op != 0 }

// appendWSFrame appends a server frame (unmasked, whole) of op.
func appendWSFrame(b []byte, op byte, payload []byte) []byte {
	b = append(b, 0x80|op)
	switch n := len(payload); {
	case n < 126:
		b = append(b, byte(n))
	case n <= 0xFFFF:
		b = append(b, 126, byte(n>>8), byte(n))
	default:
		b = append(b, 127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	return append(b, payload...)
}

// wsMessageFrame frames one SIP message: text when it is UTF-8, as SIP
// is, binary for a body that is not.
func wsMessageFrame(msg []byte) []byte {
	op := byte(wsText)
	if !utf8.Valid(msg) {
		op = wsBinary
	}
	return appendWSFrame(make([]byte, 0, len(msg)+10), op, msg)
}

// wsCloseFrame is a close frame with status.
func wsCloseFrame(status int) []byte {
	var p [2]byte
	binary.BigEndian.PutUint16(p[:], uint16(status))
	return appendWSFrame(nil, wsClose, p[:])
}

// blank reports whether a message is only white space: a keep-alive.
func blank(b []byte) bool { return len(bytes.TrimSpace(b)) == 0 }
