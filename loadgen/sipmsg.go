package loadgen

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
)

// msg is a SIP message scanned in place: every field is a slice of raw, so a
// scan allocates nothing beyond the reused vias/rrs backing arrays. It keeps
// only what a UAC or UAS endpoint needs to answer or continue a call.
type msg struct {
	raw        []byte
	isResp     bool
	status     int
	reason     []byte // reason phrase of a response
	method     []byte // request method
	ruri       []byte
	callID     []byte
	from       []byte
	to         []byte
	toTag      []byte
	cseq       []byte // whole CSeq value, "1 INVITE"
	cseqNum    uint32
	cseqM      []byte
	contact    []byte // first Contact URI, without <>
	vias       [][]byte
	rrs        [][]byte // Record-Route values in message order
	retryAfter bool
	// challenges are the WWW-Authenticate or Proxy-Authenticate values of
	// a 401 or 407, in message order.
	challenges [][]byte
	body       []byte
}

var (
	errShort    = errors.New("message too short")
	errNoCallID = errors.New("no Call-ID header")
	errNoCSeq   = errors.New("no valid CSeq header")
)

// scan fills m from b. Errors name the line they stopped at, so a stray
// datagram in a log says what was wrong with it.
func (m *msg) scan(b []byte) error {
	vias, rrs, chs := m.vias[:0], m.rrs[:0], m.challenges[:0]
	*m = msg{raw: b, vias: vias, rrs: rrs, challenges: chs}
	eol := bytes.Index(b, crlf)
	if eol < 0 {
		return errShort
	}
	first := b[:eol]
	if bytes.HasPrefix(first, []byte("SIP/2.0 ")) {
		m.isResp = true
		if len(first) < 11 {
			return fmt.Errorf("line 1: bad status line %q", clip(first))
		}
		code, err := strconv.Atoi(string(first[8:11]))
		if err != nil || code < 100 || code > 699 {
			return fmt.Errorf("line 1: bad status code in %q", clip(first))
		}
		m.status = code
		if len(first) > 12 {
			m.reason = first[12:]
		}
	} else {
		sp1 := bytes.IndexByte(first, ' ')
		sp2 := bytes.LastIndexByte(first, ' ')
		if sp1 <= 0 || sp2 <= sp1 || !bytes.Equal(first[sp2+1:], []byte("SIP/2.0")) {
			return fmt.Errorf("line 1: bad request line %q", clip(first))
		}
		m.method = first[:sp1]
		m.ruri = first[sp1+1 : sp2]
	}
	pos := eol + 2
	line := 1
	var last *[]byte
	for {
		line++
		if pos >= len(b) {
			// A datagram cut before the blank line: take what is there.
			break
		}
		e := bytes.Index(b[pos:], crlf)
		var l []byte
		if e < 0 {
			l = b[pos:]
			e = len(l)
		} else {
			l = b[pos : pos+e]
		}
		next := pos + e + 2
		if len(l) == 0 {
			if next <= len(b) {
				m.body = b[next:]
			}
			break
		}
		if l[0] == ' ' || l[0] == '\t' {
			// Folded continuation: extend the previous value over it.
			if last != nil && len(*last) > 0 {
				*last = extend(b, *last, pos+e)
			}
			pos = next
			continue
		}
		colon := bytes.IndexByte(l, ':')
		if colon <= 0 {
			return fmt.Errorf("line %d: header without a colon: %q", line, clip(l))
		}
		name := bytes.TrimRight(l[:colon], " \t")
		val := bytes.TrimSpace(l[colon+1:])
		last = nil
		switch {
		case hdrIs(name, "Via", "v"):
			m.vias = append(m.vias, val)
			last = &m.vias[len(m.vias)-1]
		case hdrIs(name, "Call-ID", "i"):
			m.callID = val
		case hdrIs(name, "From", "f"):
			m.from = val
			last = &m.from
		case hdrIs(name, "To", "t"):
			m.to = val
			last = &m.to
		case hdrIs(name, "CSeq", ""):
			m.cseq = val
			sp := bytes.IndexByte(val, ' ')
			if sp <= 0 {
				return fmt.Errorf("line %d: %w: %q", line, errNoCSeq, clip(val))
			}
			n, err := strconv.ParseUint(string(val[:sp]), 10, 32)
			if err != nil {
				return fmt.Errorf("line %d: %w: %q", line, errNoCSeq, clip(val))
			}
			m.cseqNum = uint32(n)
			m.cseqM = bytes.TrimSpace(val[sp+1:])
		case hdrIs(name, "Contact", "m"):
			if m.contact == nil {
				m.contact = uriOf(val)
			}
		case hdrIs(name, "Record-Route", ""):
			m.rrs = append(m.rrs, val)
		case hdrIs(name, "Retry-After", ""):
			m.retryAfter = true
		case hdrIs(name, "WWW-Authenticate", ""), hdrIs(name, "Proxy-Authenticate", ""):
			m.challenges = append(m.challenges, val)
		}
		pos = next
	}
	if len(m.callID) == 0 {
		return errNoCallID
	}
	if len(m.cseqM) == 0 {
		return errNoCSeq
	}
	m.toTag = param(m.to, "tag")
	return nil
}

var crlf = []byte("\r\n")

// extend grows v (a slice of b) to end at end, so folded lines stay verbatim.
func extend(b, v []byte, end int) []byte {
	off := cap(b) - cap(v) // v shares b's array, so this is its start
	if off < 0 || off > end || end > len(b) {
		return v
	}
	return b[off:end]
}

func hdrIs(name []byte, long, short string) bool {
	if short != "" && len(name) == 1 {
		return name[0]|0x20 == short[0]
	}
	return len(name) == len(long) && bytes.EqualFold(name, []byte(long))
}

// uriOf returns the URI in a name-addr ("Bob" <sip:b@h>;x) or addr-spec.
func uriOf(v []byte) []byte {
	if i := bytes.IndexByte(v, '<'); i >= 0 {
		if j := bytes.IndexByte(v[i:], '>'); j > 0 {
			return v[i+1 : i+j]
		}
	}
	if i := bytes.IndexAny(v, ";,"); i >= 0 {
		v = v[:i]
	}
	return bytes.TrimSpace(v)
}

// userOf returns the user part of the URI in a name-addr or addr-spec, nil
// when it has none.
func userOf(v []byte) []byte {
	u := uriOf(v)
	if i := bytes.IndexByte(u, ':'); i >= 0 {
		u = u[i+1:]
	}
	at := bytes.IndexByte(u, '@')
	if at < 0 {
		return nil
	}
	return u[:at]
}

// param finds ;name=value in a header value, outside any <...>.
func param(v []byte, name string) []byte {
	if i := bytes.LastIndexByte(v, '>'); i >= 0 {
		v = v[i+1:]
	}
	for len(v) > 0 {
		i := bytes.IndexByte(v, ';')
		if i < 0 {
			return nil
		}
		v = v[i+1:]
		p := v
		if j := bytes.IndexByte(p, ';'); j >= 0 {
			p = p[:j]
		}
		k, val, _ := bytes.Cut(p, []byte("="))
		if bytes.EqualFold(bytes.TrimSpace(k), []byte(name)) {
			return bytes.TrimSpace(val)
		}
	}
	return nil
}

func clip(b []byte) string {
	if len(b) > 60 {
		return string(b[:60]) + "..."
	}
	return string(b)
}
