package engine

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"io"
	"strings"
	"testing"
)

// clientFrame is a frame as a client sends it: masked.
func clientFrame(fin bool, op byte, payload []byte) []byte {
	b0 := op
	if fin {
		b0 |= 0x80
	}
	b := []byte{b0}
	switch n := len(payload); {
	case n < 126:
		b = append(b, 0x80|byte(n))
	case n <= 0xFFFF:
		b = append(b, 0x80|126, byte(n>>8), byte(n))
	default:
		b = append(b, 0x80|127)
		b = binary.BigEndian.AppendUint64(b, uint64(n))
	}
	mask := [4]byte{0x12, 0x34, 0x56, 0x78}
	b = append(b, mask[:]...)
	for i, c := range payload {
		b = append(b, c^mask[i&3])
	}
	return b
}

func cat(parts ...[]byte) []byte { return bytes.Join(parts, nil) }

func TestWSReadFrames(t *testing.T) {
	big := bytes.Repeat([]byte("a"), 70000)
	tests := []struct {
		name   string
		in     []byte
		want   []string // data messages, "PING:x" for a ping, "" for a pong
		status int      // the close status of the error that ends it, 0: EOF
		closed bool     // ends with the peer's close
	}{
		{name: "text", in: clientFrame(true, wsText, []byte("OPTIONS sip:a SIP/2.0\r\n\r\n")), want: []string{"OPTIONS sip:a SIP/2.0\r\n\r\n"}},
		{name: "binary", in: clientFrame(true, wsBinary, []byte{0xff, 0}), want: []string{"\xff\x00"}},
		{name: "16-bit length", in: clientFrame(true, wsText, bytes.Repeat([]byte("b"), 300)), want: []string{strings.Repeat("b", 300)}},
		{name: "fragments with a ping between",
			in:   cat(clientFrame(false, wsText, []byte("IN")), clientFrame(true, wsPing, []byte("p")), clientFrame(false, wsContinuation, []byte("VI")), clientFrame(true, wsContinuation, []byte("TE"))),
			want: []string{"PING:p", "INVITE"}},
		{name: "pong between messages", in: cat(clientFrame(true, wsPong, nil), clientFrame(true, wsText, []byte("x"))), want: []string{"", "x"}},
		{name: "close", in: clientFrame(true, wsClose, []byte{0x03, 0xe8}), closed: true},
		{name: "unmasked", in: []byte{0x81, 0x01, 'x'}, status: wsStatusProtocol},
		{name: "reserved bits", in: cat([]byte{0xC1}, clientFrame(true, wsText, []byte("x"))[1:]), status: wsStatusProtocol},
		{name: "reserved opcode", in: clientFrame(true, 0x3, []byte("x")), status: wsStatusProtocol},
		{name: "reserved control opcode", in: clientFrame(true, 0xB, nil), status: wsStatusProtocol},
		{name: "fragmented ping", in: clientFrame(false, wsPing, nil), status: wsStatusProtocol},
		{name: "long ping", in: clientFrame(true, wsPing, bytes.Repeat([]byte("p"), 126)), status: wsStatusProtocol},
		{name: "continuation first", in: clientFrame(true, wsContinuation, []byte("x")), status: wsStatusProtocol},
		{name: "new message mid-fragment", in: cat(clientFrame(false, wsText, []byte("a")), clientFrame(true, wsText, []byte("b"))), status: wsStatusProtocol},
		{name: "too big", in: clientFrame(true, wsText, big), status: wsStatusTooBig},
		{name: "too big in fragments", in: cat(clientFrame(false, wsText, big[:40000]), clientFrame(true, wsContinuation, big[:40000])), status: wsStatusTooBig},
		{name: "64-bit length top bit", in: []byte{0x81, 0xFF, 0x80, 0, 0, 0, 0, 0, 0, 0, 1, 2, 3, 4}, status: wsStatusProtocol},
		{name: "invalid UTF-8 text", in: clientFrame(true, wsText, []byte{0xc3, 0x28}), status: wsStatusInvalidData},
		{name: "close of 1 byte", in: clientFrame(true, wsClose, []byte{1}), status: wsStatusProtocol},
		{name: "truncated header", in: []byte{0x81}},
		{name: "truncated payload", in: clientFrame(true, wsText, []byte("hello"))[:8]},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			wr := &wsReader{r: bufio.NewReader(bytes.NewReader(tt.in)), max: maxTCPMessage}
			var got []string
			for {
				f, err := wr.read()
				if err != nil {
					var we *wsError
					switch {
					case tt.status != 0:
						if !errors.As(err, &we) || we.status != tt.status {
							t.Fatalf("error %v, want close status %d", err, tt.status)
						}
					case tt.closed:
						if !errors.Is(err, errWSClosed) {
							t.Fatalf("error %v, want the peer's close", err)
						}
					default:
						if !errors.Is(err, io.EOF) && !errors.Is(err, io.ErrUnexpectedEOF) {
							t.Fatalf("error %v, want EOF", err)
						}
					}
					break
				}
				switch {
				case f.isPing:
					got = append(got, "PING:"+string(f.ping))
				default:
					got = append(got, string(f.data))
				}
			}
			if strings.Join(got, "|") != strings.Join(tt.want, "|") {
				t.Fatalf("read %q, want %q", got, tt.want)
			}
		})
	}
}

func FuzzWSRead(f *testing.F) {
	f.Add(clientFrame(true, wsText, []byte("OPTIONS sip:a SIP/2.0\r\n\r\n")))
	f.Add(cat(clientFrame(false, wsText, []byte("IN")), clientFrame(true, wsPing, nil), clientFrame(true, wsContinuation, []byte("VITE"))))
	f.Add([]byte{0x81, 0xFF, 0x7F, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF})
	f.Fuzz(func(t *testing.T, in []byte) {
		wr := &wsReader{r: bufio.NewReader(bytes.NewReader(in)), max: 1 << 10}
		for i := 0; i < 100; i++ {
			fr, err := wr.read()
			if err != nil {
				return
			}
			if len(fr.data) > 1<<10 || len(fr.ping) > 125 {
				t.Fatalf("frame over its bound: %d, %d", len(fr.data), len(fr.ping))
			}
		}
	})
}

func TestWSUpgrade(t *testing.T) {
	good := "GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: keep-alive, Upgrade\r\n" +
		"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: sip\r\n"
	tests := []struct {
		name    string
		req     string
		origins []string
		code    int // 101 accepted
	}{
		{name: "accepted", req: good + "\r\n", code: 101},
		{name: "origin allowed", req: good + "Origin: https://Phone.example.com\r\n\r\n", origins: []string{"https://phone.example.com"}, code: 101},
		{name: "no origin, list set", req: good + "\r\n", origins: []string{"https://phone.example.com"}, code: 101},
		{name: "origin refused", req: good + "Origin: https://evil.example\r\n\r\n", origins: []string{"https://phone.example.com"}, code: 403},
		{name: "any origin without a list", req: good + "Origin: https://evil.example\r\n\r\n", code: 101},
		{name: "no sip subprotocol", req: strings.Replace(good, "Protocol: sip", "Protocol: chat", 1) + "\r\n", code: 400},
		{name: "not an upgrade", req: "GET / HTTP/1.1\r\nHost: x\r\n\r\n", code: 426},
		{name: "old version", req: strings.Replace(good, "Version: 13", "Version: 8", 1) + "\r\n", code: 426},
		{name: "bad key", req: strings.Replace(good, "dGhlIHNhbXBsZSBub25jZQ==", "short", 1) + "\r\n", code: 400},
		{name: "POST", req: strings.Replace(good, "GET", "POST", 1) + "\r\n", code: 400},
		{name: "HTTP/1.0", req: strings.Replace(good, "HTTP/1.1", "HTTP/1.0", 1) + "\r\n", code: 400},
		{name: "header without colon", req: good + "Junk\r\n\r\n", code: 400},
		{name: "huge", req: good + strings.Repeat("X-Pad: "+strings.Repeat("p", 1000)+"\r\n", 20) + "\r\n", code: 431},
		{name: "line over the buffer", req: good + "X-Pad: " + strings.Repeat("p", 9000) + "\r\n\r\n", code: 431},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp, err := wsUpgrade(bufio.NewReaderSize(strings.NewReader(tt.req), 8<<10), tt.origins)
			var ref *wsRefusal
			switch {
			case tt.code == 101 && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.code == 101:
				// RFC 6455 1.3's example key and answer.
				if !bytes.Contains(resp, []byte("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=\r\n")) || !bytes.Contains(resp, []byte("Sec-WebSocket-Protocol: sip\r\n")) {
					t.Fatalf("101 without the accept key or the subprotocol:\n%s", resp)
				}
			case !errors.As(err, &ref):
				t.Fatalf("want refusal %d, have %v", tt.code, err)
			case ref.code != tt.code:
				t.Fatalf("refused %d (%v), want %d", ref.code, err, tt.code)
			}
		})
	}
	if _, err := wsUpgrade(bufio.NewReader(strings.NewReader("GET / HTTP/1.1\r\n")), nil); !errors.Is(err, io.EOF) {
		t.Fatalf("a request cut short: %v, want EOF", err)
	}
}

func TestWSServerFrames(t *testing.T) {
	for _, n := range []int{0, 125, 126, 65535, 65536} {
		msg := bytes.Repeat([]byte("s"), n)
		b := wsMessageFrame(msg)
		// Read back as a client would: unmasked, FIN, text.
		if b[0] != 0x81 || b[1]&0x80 != 0 {
			t.Fatalf("%d bytes: header %x", n, b[:2])
		}
		hl := 2
		switch b[1] {
		case 126:
			hl = 4
		case 127:
			hl = 10
		}
		if !bytes.Equal(b[hl:], msg) {
			t.Fatalf("%d bytes: payload of %d", n, len(b)-hl)
		}
	}
	if b := wsMessageFrame([]byte{0xff}); b[0] != 0x82 {
		t.Fatalf("a message that is not UTF-8 went as %x, want binary", b[0])
	}
}
