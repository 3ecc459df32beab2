package sipmsg

import (
	"bytes"
	"strconv"

	"github.com/sipvisor/sipvisor/internal/sipscan"
)

// Kind is which of the headers routing uses a header line is.
type Kind uint8

// The kinds of header Parse tells apart; every other header is Other.
const (
	Other Kind = iota
	Via
	Route
	RecordRoute
	MaxForwards
	ContentLength
	Contact
	From
	To
	CallID
	CSeq
)

// Header is one header line of a Msg.
type Header struct {
	Kind Kind
	sipscan.Line
}

// Msg is a message parsed into offsets. The caller owns it and may reuse
// it: Parse resets every field. A Msg of its own holds up to 40 header
// lines without allocating.
type Msg struct {
	sipscan.Msg
	// Raw is the parsed message; StartEnd the offset of its first header
	// line.
	Raw      []byte
	StartEnd int
	Headers  []Header
	arr      [40]Header
}

// Parse reads b into m. Errors are sipscan.Error values with m.ErrOffset
// saying where the problem lies.
func (m *Msg) Parse(b []byte) error {
	m.Raw, m.Headers = nil, m.arr[:0]
	if err := sipscan.Scan(b, &m.Msg); err != nil {
		return err
	}
	s := 0
	for s < len(b) && (b[s] == '\r' || b[s] == '\n') {
		s++
	}
	nl := bytes.IndexByte(b[s:], '\n')
	if nl < 0 {
		return sipscan.ErrTruncated // Scan accepted it: not reached
	}
	m.StartEnd = s + nl + 1
	for off := m.StartEnd; ; {
		var l sipscan.Line
		done, err := sipscan.NextLine(b, off, &l)
		if err != nil {
			return err
		}
		if done {
			break
		}
		m.Headers = append(m.Headers, Header{Kind: kindOf(b[l.Start:l.NameEnd]), Line: l})
		off = l.Next
	}
	m.Raw = b
	return nil
}

func kindOf(name []byte) Kind {
	switch {
	case len(name) == 1:
		switch name[0] | 0x20 {
		case 'v':
			return Via
		case 'l':
			return ContentLength
		case 'm':
			return Contact
		case 'f':
			return From
		case 't':
			return To
		case 'i':
			return CallID
		}
	case equalFold(name, "via"):
		return Via
	case equalFold(name, "route"):
		return Route
	case equalFold(name, "record-route"):
		return RecordRoute
	case equalFold(name, "max-forwards"):
		return MaxForwards
	case equalFold(name, "content-length"):
		return ContentLength
	case equalFold(name, "contact"):
		return Contact
	case equalFold(name, "from"):
		return From
	case equalFold(name, "to"):
		return To
	case equalFold(name, "call-id"):
		return CallID
	case equalFold(name, "cseq"):
		return CSeq
	}
	return Other
}

func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c, d := b[i], s[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if 'A' <= d && d <= 'Z' {
			d += 'a' - 'A'
		}
		if c != d {
			return false
		}
	}
	return true
}

// Value is one comma-separated value of a header line, trimmed.
func (m *Msg) Value(h *Header, from int) (v []byte, next int, ok bool) {
	if from < h.ValStart {
		from = h.ValStart
	}
	vs, ve, next := NextValue(m.Raw, from, h.ValEnd)
	if vs >= ve {
		return nil, h.ValEnd, false
	}
	return m.Raw[vs:ve], next, true
}

// Named reports whether h is a header line named name, in any case (a
// header Parse does not tell apart: Authorization, Expires, Path).
func (m *Msg) Named(h *Header, name string) bool {
	return equalFold(m.Raw[h.Start:h.NameEnd], name)
}

// Val is the whole value of a header line without the whitespace around
// it, as a parser that does not split it at commas reads it. A folded
// line keeps its line breaks.
func (m *Msg) Val(h *Header) []byte {
	return trim(m.Raw[h.ValStart:h.ValEnd])
}

// First is the first value of the first header of kind k.
func (m *Msg) First(k Kind) (v []byte, ok bool) {
	for i := range m.Headers {
		if h := &m.Headers[i]; h.Kind == k {
			if v, _, ok := m.Value(h, 0); ok {
				return v, true
			}
		}
	}
	return nil, false
}

// NextValue finds the first value of the comma-separated list b[s:e]: its
// bounds without surrounding whitespace, and where the next value starts
// (e when there is none). Commas inside quotes and angle brackets belong
// to the value.
func NextValue(b []byte, s, e int) (vs, ve, next int) {
	e = min(e, len(b))
	for s < e && isLWS(b[s]) {
		s++
	}
	i, quoted, angle := s, false, false
	for ; i < e; i++ {
		switch c := b[i]; {
		case quoted && c == '\\':
			i++
		case c == '"':
			quoted = !quoted
		case quoted:
		case c == '<':
			angle = true
		case c == '>':
			angle = false
		case c == ',' && !angle:
			ve = i
			for ve > s && isLWS(b[ve-1]) {
				ve--
			}
			return s, ve, i + 1
		}
	}
	ve = min(i, e)
	for ve > s && isLWS(b[ve-1]) {
		ve--
	}
	return s, ve, e
}

func isLWS(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// URI is a SIP URI in parts, each a sub-slice of what was parsed.
type URI struct {
	Scheme, User, Host []byte
	Port               int    // 0 when absent
	Params             []byte // ";a=b;c", without the headers part
}

// AddrSpec is the URI a name-addr ("Bob" <sip:b@h>;tag=x) or an addr-spec
// (sip:b@h;tag=x, whose parameters belong to the header) holds.
func AddrSpec(v []byte) []byte {
	if i := bytes.IndexByte(v, '<'); i >= 0 {
		if j := bytes.IndexByte(v[i:], '>'); j >= 0 {
			return v[i+1 : i+j]
		}
		return nil
	}
	if i := bytes.IndexAny(v, "; \t"); i >= 0 {
		return v[:i]
	}
	return v
}

// ParseURI reads a sip: or sips: URI. It reports false for anything else
// or for one it cannot read, which callers hand to a full parser.
func ParseURI(b []byte) (u URI, ok bool) {
	c := bytes.IndexByte(b, ':')
	if c <= 0 {
		return u, false
	}
	u.Scheme = b[:c]
	if !equalFold(u.Scheme, "sip") && !equalFold(u.Scheme, "sips") {
		return u, false
	}
	rest := b[c+1:]
	if q := bytes.IndexByte(rest, '?'); q >= 0 {
		rest = rest[:q]
	}
	if at := bytes.LastIndexByte(rest, '@'); at >= 0 {
		u.User, rest = rest[:at], rest[at+1:]
		if p := bytes.IndexByte(u.User, ':'); p >= 0 {
			u.User = u.User[:p]
		}
	}
	hostEnd := bytes.IndexByte(rest, ';')
	if hostEnd < 0 {
		hostEnd = len(rest)
	}
	hp := rest[:hostEnd]
	u.Params = rest[hostEnd:]
	if len(hp) > 0 && hp[0] == '[' {
		e := bytes.IndexByte(hp, ']')
		if e < 0 {
			return u, false
		}
		u.Host, hp = hp[:e+1], hp[e+1:]
	} else {
		p := bytes.IndexByte(hp, ':')
		if p < 0 {
			p = len(hp)
		}
		u.Host, hp = hp[:p], hp[p:]
	}
	if len(u.Host) == 0 {
		return u, false
	}
	for _, ch := range u.Host {
		if ch <= ' ' || ch == '<' || ch == '>' || ch == '"' || ch == ',' || ch == '@' {
			return u, false
		}
	}
	if len(hp) > 0 {
		if hp[0] != ':' || len(hp) == 1 || len(hp) > 6 {
			return u, false
		}
		n, err := strconv.Atoi(string(hp[1:]))
		if err != nil || n <= 0 || n > 65535 {
			return u, false
		}
		u.Port = n
	}
	return u, true
}

// Param is the value of the URI parameter name (nil, true for one without
// a value), found without case.
func (u *URI) Param(name string) ([]byte, bool) {
	return param(u.Params, name)
}

// param finds name in a ";a=b;c" list.
func param(p []byte, name string) ([]byte, bool) {
	for len(p) > 0 {
		if p[0] != ';' {
			return nil, false
		}
		p = p[1:]
		e := bytes.IndexByte(p, ';')
		if e < 0 {
			e = len(p)
		}
		kv := bytes.TrimSpace(p[:e])
		p = p[e:]
		k, v := kv, []byte(nil)
		if i := bytes.IndexByte(kv, '='); i >= 0 {
			k, v = bytes.TrimSpace(kv[:i]), bytes.TrimSpace(kv[i+1:])
		}
		if equalFold(k, name) {
			return v, true
		}
	}
	return nil, false
}

// IPv4 reads a dotted-quad IPv4 address without allocating (netip's
// parser keeps its input in its error, so a []byte handed to it as a
// string is copied). It reports false for anything else.
func IPv4(b []byte) (a [4]byte, ok bool) {
	n, part, digits := 0, 0, 0
	for i := 0; i <= len(b); i++ {
		if i == len(b) || b[i] == '.' {
			if digits == 0 || n > 3 {
				return a, false
			}
			a[n] = byte(part)
			n, part, digits = n+1, 0, 0
			continue
		}
		c := b[i]
		if c < '0' || c > '9' || digits > 0 && part == 0 {
			return a, false // not a digit, or a leading zero
		}
		part, digits = part*10+int(c-'0'), digits+1
		if part > 255 {
			return a, false
		}
	}
	return a, n == 4
}
