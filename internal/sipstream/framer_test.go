package sipstream

import (
	"errors"
	"strings"
	"testing"
)

const (
	inv  = "INVITE sip:b@x SIP/2.0\r\nVia: SIP/2.0/TCP h;branch=z9hG4bK1\r\nContent-Length: 4\r\n\r\nv=0\n"
	bye  = "BYE sip:b@x SIP/2.0\r\nl: 0\r\n\r\n"
	resp = "SIP/2.0 200 OK\r\ncontent-length:   2  \r\n\r\nok"
)

// frames feeds the stream to a Framer in reads of step bytes (all at once
// for 0) and returns the messages it framed and the error it ended on.
func frames(stream string, step int, f *Framer) (msgs []string, err error) {
	var buf []byte
	for off := 0; off < len(stream) || len(buf) > 0; {
		if off < len(stream) {
			k := len(stream) - off
			if step > 0 {
				k = min(step, k)
			}
			buf = append(buf, stream[off:off+k]...)
			off += k
		}
		for {
			skip, n, err := f.Next(buf)
			if err != nil {
				return msgs, err
			}
			if n == 0 {
				// Keep-alives may go at once.
				buf = buf[skip:]
				break
			}
			msgs = append(msgs, string(buf[skip:skip+n]))
			buf = buf[skip+n:]
		}
		if off == len(stream) {
			break
		}
	}
	return msgs, nil
}

func TestFramer(t *testing.T) {
	cases := []struct {
		name, stream string
		want         []string
		err          string // in the error, "" for none
	}{
		{"one", inv, []string{inv}, ""},
		{"pipelined", inv + bye + resp, []string{inv, bye, resp}, ""},
		{"keep-alives between and before", "\r\n\r\n" + inv + "\r\n\r\n" + bye, []string{inv, bye}, ""},
		{"only keep-alives", "\r\n\r\n\r\n", nil, ""},
		{"bare LF lines", "OPTIONS sip:x SIP/2.0\nContent-Length: 0\n\n" + bye, []string{"OPTIONS sip:x SIP/2.0\nContent-Length: 0\n\n", bye}, ""},
		{"compact l upper case", "BYE sip:b@x SIP/2.0\r\nL: 1\r\n\r\nx", []string{"BYE sip:b@x SIP/2.0\r\nL: 1\r\n\r\nx"}, ""},
		{"incomplete body waits", inv[:len(inv)-2], nil, ""},
		{"same length twice", "BYE sip:b@x SIP/2.0\r\nl: 0\r\nContent-Length: 0\r\n\r\n", []string{"BYE sip:b@x SIP/2.0\r\nl: 0\r\nContent-Length: 0\r\n\r\n"}, ""},
		{"no Content-Length", "BYE sip:b@x SIP/2.0\r\nVia: x\r\n\r\n", nil, "without Content-Length"},
		{"Content-Length not a number", "BYE sip:b@x SIP/2.0\r\nContent-Length: 1x\r\n\r\n", nil, `bad Content-Length "1x": not a number`},
		{"Content-Length negative", "BYE sip:b@x SIP/2.0\r\nContent-Length: -1\r\n\r\n", nil, "not a number"},
		{"Content-Length empty", "BYE sip:b@x SIP/2.0\r\nContent-Length:\r\n\r\n", nil, "not a number"},
		{"Content-Length over the bound", "BYE sip:b@x SIP/2.0\r\nContent-Length: 99999999999999999999\r\n\r\n", nil, "over the bound of 1000 bytes"},
		{"two Content-Lengths disagree", "BYE sip:b@x SIP/2.0\r\nContent-Length: 0\r\nl: 5\r\n\r\n", nil, "also says 0"},
		{"header over the bound", "BYE sip:b@x SIP/2.0\r\nSubject: " + strings.Repeat("a", 300) + "\r\nl: 0\r\n\r\n", nil, "header over"},
		{"header over the bound, no line end", "BYE sip:b@x SIP/2.0\r\nSubject: " + strings.Repeat("a", 300), nil, "header over"},
		{"bad message after a good one", bye + "junk\r\n\r\n", []string{bye}, "without Content-Length"},
	}
	for _, tc := range cases {
		for _, step := range []int{0, 1, 7} {
			f := &Framer{MaxHeader: 256, MaxBody: 1000}
			msgs, err := frames(tc.stream, step, f)
			if tc.err == "" && err != nil || tc.err != "" && (err == nil || !strings.Contains(err.Error(), tc.err)) {
				t.Errorf("%s, reads of %d: error %v, want one with %q", tc.name, step, err, tc.err)
			}
			if strings.Join(msgs, "|") != strings.Join(tc.want, "|") {
				t.Errorf("%s, reads of %d: framed %q, want %q", tc.name, step, msgs, tc.want)
			}
		}
	}
}

func TestFramerErrorKinds(t *testing.T) {
	f := &Framer{MaxHeader: 100, MaxBody: 10}
	if _, _, err := f.Next([]byte("BYE x SIP/2.0\r\n\r\n")); !errors.Is(err, ErrNoLength) {
		t.Errorf("want ErrNoLength, have %v", err)
	}
	f.Reset()
	var le *LengthError
	if _, _, err := f.Next([]byte("BYE x SIP/2.0\r\nl: 11\r\n\r\n")); !errors.As(err, &le) {
		t.Errorf("want a LengthError, have %v", err)
	}
}

func TestFramerNeed(t *testing.T) {
	f := &Framer{MaxHeader: 256, MaxBody: 1000}
	if _, n, _ := f.Next([]byte(inv[:10])); n != 0 || f.Need() != 0 {
		t.Fatalf("a partial header: n %d, need %d", n, f.Need())
	}
	if _, n, _ := f.Next([]byte(inv[:len(inv)-1])); n != 0 || f.Need() != len(inv) {
		t.Fatalf("a partial body: n %d, need %d, want %d", n, f.Need(), len(inv))
	}
	if _, n, _ := f.Next([]byte(inv)); n != len(inv) || f.Need() != 0 {
		t.Fatalf("the whole message: n %d, need %d", n, f.Need())
	}
}

func TestFramerAllocates0(t *testing.T) {
	stream := []byte("\r\n\r\n" + inv + bye + resp)
	f := &Framer{MaxHeader: 1 << 16, MaxBody: 1 << 16}
	allocs := testing.AllocsPerRun(100, func() {
		b := stream
		for len(b) > 0 {
			skip, n, err := f.Next(b)
			if err != nil || n == 0 {
				t.Fatalf("framing stopped: %v", err)
			}
			b = b[skip+n:]
		}
	})
	if allocs != 0 {
		t.Errorf("%v allocations per stream of three messages, want 0", allocs)
	}
}

func BenchmarkFramer(b *testing.B) {
	msg := []byte(inv)
	f := &Framer{MaxHeader: 1 << 16, MaxBody: 1 << 16}
	b.ReportAllocs()
	for b.Loop() {
		if _, n, _ := f.Next(msg); n != len(msg) {
			b.Fatal("not framed")
		}
	}
}
