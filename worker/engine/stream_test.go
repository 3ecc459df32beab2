package engine

import (
	"bufio"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"testing/iotest"
)

// readStreamMessage frames messages larger than its reader's buffer,
// pipelined ones, keep-alives before them, and from reads of any size.
func TestReadStreamMessage(t *testing.T) {
	msg := func(body int) string {
		return "MESSAGE sip:b@x SIP/2.0\r\nVia: SIP/2.0/TCP h;branch=z9hG4bK" + strconv.Itoa(body) +
			"\r\nContent-Length: " + strconv.Itoa(body) + "\r\n\r\n" + strings.Repeat("x", body)
	}
	big := "MESSAGE sip:b@x SIP/2.0\r\nSubject: " + strings.Repeat("s", 20000) + "\r\nl: 3\r\n\r\nabc"
	want := []string{msg(0), msg(100), msg(30000), big, msg(5)}
	stream := "\r\n\r\n" + want[0] + want[1] + "\r\n" + want[2] + want[3] + want[4]
	for name, wrap := range map[string]func(io.Reader) io.Reader{
		"whole":    func(r io.Reader) io.Reader { return r },
		"one byte": iotest.OneByteReader,
		"halves":   iotest.HalfReader,
	} {
		r := bufio.NewReaderSize(wrap(strings.NewReader(stream)), 8<<10)
		for i, w := range want {
			b, err := readStreamMessage(r)
			if err != nil {
				t.Fatalf("%s: message %d: %v", name, i, err)
			}
			if string(b) != w {
				t.Fatalf("%s: message %d: %d bytes, want %d", name, i, len(b), len(w))
			}
		}
		if _, err := readStreamMessage(r); !errors.Is(err, io.EOF) {
			t.Errorf("%s: after the last message: %v, want EOF", name, err)
		}
	}
	bad := map[string]string{
		"MESSAGE sip:b@x SIP/2.0\r\nContent-Length: 70000\r\n\r\n":          "over the bound",
		"MESSAGE sip:b@x SIP/2.0\r\nVia: x\r\n\r\n":                         "without Content-Length",
		"MESSAGE sip:b@x SIP/2.0\r\nSubject: " + strings.Repeat("s", 70000): "header over",
	}
	for in, want := range bad {
		_, err := readStreamMessage(bufio.NewReaderSize(strings.NewReader(in), 8<<10))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%.40q: error %v, want one with %q", in, err, want)
		}
	}
}
