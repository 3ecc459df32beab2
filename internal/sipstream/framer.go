// Package sipstream finds where each SIP message ends on a stream
// transport, TCP or TLS (over WebSocket each message has a frame of its
// own): the header ends at the first empty line and the body is
// Content-Length bytes long (RFC 3261 18.3), with CRLF keep-alives allowed
// between messages (RFC 5626 4.4.1).
//
// A Framer looks at the bytes a connection has buffered and says how long
// the first message is, without copying or allocating; it remembers how
// far it has looked, so that a message that arrives in many reads is
// scanned once.
package sipstream

import (
	"bytes"
	"errors"
	"fmt"
)

// Errors a Framer reports; a connection that sends one of them is not
// SIP, or not within bounds, and is closed.
var (
	ErrNoLength      = errors.New("message without Content-Length on a stream")
	ErrHeaderTooLong = errors.New("message header over the size bound")
)

// A LengthError is a Content-Length that is not a number, is over the
// bound, or disagrees with another Content-Length of the same message.
type LengthError struct {
	Value string // as written, at most 60 bytes of it
	Why   string
}

func (e *LengthError) Error() string { return fmt.Sprintf("bad Content-Length %q: %s", e.Value, e.Why) }

// Framer frames the messages of one stream. The zero value bounds nothing:
// set MaxHeader and MaxBody.
type Framer struct {
	// MaxHeader bounds a message's start line and headers, their empty
	// line included; MaxBody its Content-Length.
	MaxHeader, MaxBody int

	// What is known of the message in progress, as offsets from its first
	// byte: how far its header has been scanned (a whole number of lines),
	// and its Content-Length (-1: none seen yet).
	scanned int
	length  int
	started bool
}

// Next looks at b, the stream's bytes from the end of the last message
// framed on. It reports skip, how many keep-alive bytes (CR and LF)
// precede the next message, and n, that message's length after them: 0
// while more bytes are needed. The caller consumes skip+n bytes once n > 0
// (and may consume the skip bytes at once) and calls Next again with what
// follows; until then, each call must pass the same bytes grown by what
// was read since. An error is for the stream: it cannot be framed on.
func (f *Framer) Next(b []byte) (skip, n int, err error) {
	for skip < len(b) && (b[skip] == '\r' || b[skip] == '\n') {
		skip++
	}
	m := b[skip:]
	if !f.started {
		f.started, f.scanned, f.length = true, 0, -1
	}
	if f.scanned < 0 {
		// The header has ended: scanned is minus its length.
		return skip, f.body(m, -f.scanned), nil
	}
	for {
		i := indexLF(m[f.scanned:])
		if i < 0 {
			if len(m) > f.MaxHeader {
				return skip, 0, ErrHeaderTooLong
			}
			return skip, 0, nil
		}
		line := m[f.scanned : f.scanned+i]
		f.scanned += i + 1
		if f.scanned > f.MaxHeader {
			return skip, 0, ErrHeaderTooLong
		}
		if len(line) > 0 && line[len(line)-1] == '\r' {
			line = line[:len(line)-1]
		}
		if len(line) == 0 {
			if f.length < 0 {
				return skip, 0, ErrNoLength
			}
			f.scanned = -f.scanned
			return skip, f.body(m, -f.scanned), nil
		}
		if err := f.header(line); err != nil {
			return skip, 0, err
		}
	}
}

// body reports the whole message's length once its body, after a header of
// hdr bytes, is all in m, and starts over for the next message.
func (f *Framer) body(m []byte, hdr int) int {
	total := hdr + f.length
	if len(m) < total {
		return 0
	}
	f.started = false
	return total
}

// Reset forgets the message in progress: the next call frames from a new
// message's start.
func (f *Framer) Reset() { f.started = false }

// Need is how many bytes the message in progress has in all, once its
// header has ended; 0 before.
func (f *Framer) Need() int {
	if !f.started || f.scanned >= 0 {
		return 0
	}
	return -f.scanned + f.length
}

// header takes one header line: a Content-Length (or its compact form l)
// sets the body's length.
func (f *Framer) header(line []byte) error {
	colon := -1
	for i, c := range line {
		if c == ':' {
			colon = i
			break
		}
	}
	if colon <= 0 {
		return nil
	}
	name := trim(line[:colon])
	if !(len(name) == 1 && (name[0] == 'l' || name[0] == 'L')) && !bytes.EqualFold(name, contentLength) {
		return nil
	}
	v := trim(line[colon+1:])
	n, ok := atoi(v, f.MaxBody)
	if !ok {
		if len(v) > 0 && allDigits(v) {
			return &LengthError{Value: clip(v), Why: fmt.Sprintf("over the bound of %d bytes", f.MaxBody)}
		}
		return &LengthError{Value: clip(v), Why: "not a number"}
	}
	if f.length >= 0 && f.length != n {
		return &LengthError{Value: clip(v), Why: fmt.Sprintf("the message also says %d", f.length)}
	}
	f.length = n
	return nil
}

func indexLF(b []byte) int { return bytes.IndexByte(b, '\n') }

var contentLength = []byte("Content-Length")

func trim(b []byte) []byte {
	for len(b) > 0 && (b[0] == ' ' || b[0] == '\t') {
		b = b[1:]
	}
	for len(b) > 0 && (b[len(b)-1] == ' ' || b[len(b)-1] == '\t' || b[len(b)-1] == '\r') {
		b = b[:len(b)-1]
	}
	return b
}

// atoi reads a decimal number of at most limit.
func atoi(b []byte, limit int) (int, bool) {
	if len(b) == 0 {
		return 0, false
	}
	n := 0
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		n = n*10 + int(c-'0')
		if n > limit {
			return 0, false
		}
	}
	return n, true
}

func allDigits(b []byte) bool {
	for _, c := range b {
		if c < '0' || c > '9' {
			return false
		}
	}
	return true
}

func clip(b []byte) string {
	if len(b) > 60 {
		b = b[:60]
	}
	return string(b)
}
