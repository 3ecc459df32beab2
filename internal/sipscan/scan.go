package sipscan

import "bytes"

// Default caps. A UDP datagram cannot exceed 65535 bytes; no sane header line
// comes near 8 KiB, and a cap bounds the work an attacker can cause per line.
const (
	DefaultMaxDatagram = 65535
	DefaultMaxLine     = 8192
)

// Limits caps what Scan accepts. Zero fields take the defaults.
type Limits struct {
	MaxDatagram int // longest datagram, in bytes
	MaxLine     int // longest physical line, in bytes
}

// Msg is what the front door needs to know about one datagram. The caller
// owns it and may reuse it: Scan resets every field. Byte slices alias the
// scanned datagram.
type Msg struct {
	IsRequest   bool
	Method      Method // NoMethod for responses
	MethodBytes []byte // the method as sent, also for OtherMethod
	RequestURI  []byte
	StatusCode  int // 100..699 for responses, 0 for requests

	CSeq            uint32
	CSeqMethod      Method
	CSeqMethodBytes []byte

	CallID   []byte
	FromTag  []byte
	HasToTag bool   // the To header has a tag parameter (in-dialog, or a response past 100)
	ToTag    []byte // its value, when HasToTag

	// From the first value of the first Via header.
	Branch    []byte // nil when absent (RFC 2543 senders)
	SentBy    []byte // host[:port] as sent
	Transport []byte // "UDP", "TCP", ...
	// TopVia is the span of bytes that takes the first Via value off the
	// message: its whole header line when the line holds no other value,
	// else the value and the comma after it. See WithoutTopVia.
	TopVia [2]int

	MaxForwards int // -1 when absent
	// Expires is the Expires header's delta-seconds, -1 when absent or not
	// a number: how long a subscription lasts. It routes nothing, so a bad
	// value is no error.
	Expires       int
	ContentLength int    // -1 when absent
	HeaderEnd     int    // offset of the first body byte
	Body          []byte // Content-Length bytes, or the rest of the datagram without one

	// ErrOffset is where Scan found the problem it reports; see Position.
	ErrOffset int
}

// Scan reads b with the default Limits. See Limits.Scan.
func Scan(b []byte, m *Msg) error {
	return Limits{}.Scan(b, m)
}

// Scan fills m from the datagram b. On error it returns an Error value, and m
// holds what was read before the problem (in particular the start line, so a
// request can still be answered with 400 or 505). It reads each header line
// once, decodes only the headers routing needs, and handles folded header
// values and bare-LF line ends as RFC 3261 asks receivers to.
func (l Limits) Scan(b []byte, m *Msg) error {
	*m = Msg{MaxForwards: -1, ContentLength: -1, Expires: -1}
	maxDatagram, maxLine := l.MaxDatagram, l.MaxLine
	if maxDatagram <= 0 {
		maxDatagram = DefaultMaxDatagram
	}
	if maxLine <= 0 {
		maxLine = DefaultMaxLine
	}
	if len(b) > maxDatagram {
		m.ErrOffset = maxDatagram
		return ErrTooLong
	}
	// RFC 3261 7.5: CRLFs before the start line are ignored.
	start := 0
	for start < len(b) && (b[start] == '\r' || b[start] == '\n') {
		start++
	}
	if start == len(b) {
		return ErrEmpty
	}
	err := m.scan(b, start, maxLine)
	if q := badNUL(b, start, m.nulLimit(b, err)); q >= 0 {
		m.ErrOffset = q
		return ErrNUL
	}
	if err != 0 {
		return err
	}
	return nil
}

// nulLimit is how far the NUL check looks: all the headers once they have
// been read, else through the line holding the fault, since a NUL there is
// the better explanation of it.
func (m *Msg) nulLimit(b []byte, err Error) int {
	if err == 0 || m.HeaderEnd > 0 {
		return m.HeaderEnd
	}
	if m.ErrOffset >= len(b) {
		return len(b)
	}
	if k := bytes.IndexByte(b[m.ErrOffset:], '\n'); k >= 0 {
		return m.ErrOffset + k
	}
	return len(b)
}

// Bits for single-instance headers already seen.
const (
	seenCallID = 1 << iota
	seenCSeq
	seenFrom
	seenTo
	seenMaxForwards
	seenContentLength
	seenVia
)

func (m *Msg) scan(b []byte, start, maxLine int) Error {
	nl := bytes.IndexByte(b[start:], '\n')
	if nl < 0 {
		m.ErrOffset = len(b)
		if len(b)-start > maxLine {
			m.ErrOffset = start + maxLine
			return ErrTooLong
		}
		return ErrTruncated
	}
	end := start + nl
	next := end + 1
	if end > start && b[end-1] == '\r' {
		end--
	}
	if end-start > maxLine {
		m.ErrOffset = start + maxLine
		return ErrTooLong
	}
	if err := m.startLine(b, start, end); err != 0 {
		return err
	}

	var seen uint
	var h header
	off := next
	for {
		done, err := nextHeader(b, off, maxLine, &h)
		if err != 0 {
			m.ErrOffset = h.errOff
			return err
		}
		if done {
			m.HeaderEnd = h.next
			break
		}
		off = h.next
		bit, err := m.header(b, &h, seen)
		if err != 0 {
			return err
		}
		if bit != 0 && bit != seenVia && seen&bit != 0 {
			m.ErrOffset = h.start
			return ErrDuplicate
		}
		seen |= bit
	}

	m.ErrOffset = m.HeaderEnd
	switch {
	case seen&seenCallID == 0:
		return ErrNoCallID
	case seen&seenCSeq == 0:
		return ErrNoCSeq
	case seen&seenVia == 0:
		return ErrNoVia
	case seen&seenFrom == 0:
		return ErrNoFrom
	case seen&seenTo == 0:
		return ErrNoTo
	}
	if m.IsRequest && !bytes.Equal(m.MethodBytes, m.CSeqMethodBytes) {
		return ErrCSeqMethod
	}
	m.Body = b[m.HeaderEnd:]
	if m.ContentLength >= 0 {
		if m.ContentLength > len(m.Body) {
			m.ErrOffset = len(b)
			m.Body = nil
			return ErrBodyTruncated
		}
		m.Body = m.Body[:m.ContentLength]
	}
	m.ErrOffset = 0
	return 0
}

// header decodes one header line if it is one routing needs, and reports
// which single-instance header it was.
func (m *Msg) header(b []byte, h *header, seen uint) (uint, Error) {
	name := b[h.start:h.nameEnd]
	if !interesting(name) {
		return 0, 0
	}
	var lower [14]byte
	for i, c := range name {
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		lower[i] = c
	}
	s, e := trimLWS(b, h.valStart, h.valEnd)
	switch string(lower[:len(name)]) {
	case "via", "v":
		if seen&seenVia == 0 {
			end, err := m.via(b, s, e)
			if err != 0 {
				return 0, err
			}
			m.TopVia = [2]int{h.start, h.next}
			if end < e {
				m.TopVia = [2]int{s, skipLWS(b, end+1, e)}
			}
		}
		return seenVia, 0
	case "call-id", "i":
		if seen&seenCallID != 0 {
			return seenCallID, 0
		}
		// Only a folded line can hide a line end in the value; for the
		// others two vector searches beat a loop over every byte.
		v := b[s:e]
		if s == e || h.folded && !word(v) || bytes.IndexByte(v, ' ') >= 0 || bytes.IndexByte(v, '\t') >= 0 {
			m.ErrOffset = h.start
			return 0, ErrBadCallID
		}
		m.CallID = b[s:e]
		return seenCallID, 0
	case "cseq":
		if seen&seenCSeq != 0 {
			return seenCSeq, 0
		}
		return seenCSeq, m.cseq(b, s, e)
	case "to", "t":
		if seen&seenTo != 0 {
			return seenTo, 0
		}
		t0, t1, ok := addrTag(b, s, e)
		if t0 < 0 {
			m.ErrOffset = h.start
			return 0, ErrBadHeader
		}
		if ok {
			m.HasToTag = true
			m.ToTag = b[t0:t1]
		}
		return seenTo, 0
	case "from", "f":
		if seen&seenFrom != 0 {
			return seenFrom, 0
		}
		t0, t1, ok := addrTag(b, s, e)
		if t0 < 0 {
			m.ErrOffset = h.start
			return 0, ErrBadHeader
		}
		if ok {
			m.FromTag = b[t0:t1]
		}
		return seenFrom, 0
	case "max-forwards":
		if seen&seenMaxForwards != 0 {
			return seenMaxForwards, 0
		}
		n, ok := number(b, s, e, 255)
		if !ok {
			m.ErrOffset = s
			return 0, ErrBadMaxForwards
		}
		m.MaxForwards = n
		return seenMaxForwards, 0
	case "expires":
		// Not single-instance for ErrDuplicate's sake: a second Expires
		// is no reason to refuse a message, and the first one counts.
		if m.Expires < 0 {
			if n, ok := number(b, s, e, 1<<31-1); ok {
				m.Expires = n
			}
		}
		return 0, 0
	case "content-length", "l":
		if seen&seenContentLength != 0 {
			return seenContentLength, 0
		}
		n, ok := number(b, s, e, 1<<30)
		if !ok {
			m.ErrOffset = s
			return 0, ErrBadContentLength
		}
		m.ContentLength = n
		return seenContentLength, 0
	}
	return 0, 0
}

// interesting is a cheap first filter on header names: most headers in a
// typical message (Contact, Allow, Supported, User-Agent, ...) are not read,
// and their length or first letter tells so without lower-casing them.
func interesting(name []byte) bool {
	switch len(name) {
	case 1, 2, 3, 4, 7, 12, 14:
	default:
		return false
	}
	switch name[0] | 0x20 {
	case 'v', 'i', 't', 'f', 'c', 'm', 'l', 'e':
		return true
	}
	return false
}

// word reports whether a Call-ID is one non-empty run of visible characters.
func word(b []byte) bool {
	for _, c := range b {
		if c <= ' ' || c == 0x7f {
			return false
		}
	}
	return len(b) > 0
}

func (m *Msg) startLine(b []byte, s, e int) Error {
	line := b[s:e]
	m.ErrOffset = s
	if len(line) >= 4 && hasPrefixFold(line, "sip/") {
		return m.statusLine(line)
	}
	sp1 := bytes.IndexByte(line, ' ')
	if sp1 <= 0 || tokenEnd(line, 0, sp1) != sp1 {
		return ErrBadStartLine
	}
	sp2 := bytes.LastIndexByte(line, ' ')
	if sp2 == sp1 || !validURI(line[sp1+1:sp2]) {
		return ErrBadStartLine
	}
	uri := line[sp1+1 : sp2]
	m.IsRequest = true
	m.MethodBytes = line[:sp1]
	m.Method = lookupMethod(m.MethodBytes)
	m.RequestURI = uri
	version := line[sp2+1:]
	if len(version) == 7 && hasPrefixFold(version, "sip/2.0") {
		return 0
	}
	m.ErrOffset = s + sp2 + 1
	if hasPrefixFold(version, "sip/") {
		return ErrBadVersion
	}
	return ErrBadStartLine
}

// statusLine reads "SIP/2.0 SP 3DIGIT SP reason". RFC 4475 (noreason) shows
// an empty reason; a missing final SP is tolerated as well.
func (m *Msg) statusLine(line []byte) Error {
	sp := bytes.IndexByte(line, ' ')
	if sp < 0 {
		return ErrBadStartLine
	}
	if sp != 7 || !hasPrefixFold(line, "sip/2.0") {
		if sp > 4 {
			return ErrBadVersion
		}
		return ErrBadStartLine
	}
	code := line[8:]
	if len(code) < 3 || (len(code) > 3 && code[3] != ' ') {
		return ErrBadStartLine
	}
	n := 0
	for _, c := range code[:3] {
		if c < '0' || c > '9' {
			return ErrBadStartLine
		}
		n = n*10 + int(c-'0')
	}
	if n < 100 || n > 699 {
		return ErrBadStartLine
	}
	m.StatusCode = n
	return 0
}

// validURI checks what the front door relies on: a single token that starts
// with a URI scheme. RFC 4475 ltgtruri (a bracketed URI) fails the scheme.
func validURI(u []byte) bool {
	colon := bytes.IndexByte(u, ':')
	if colon <= 0 || !isAlpha(u[0]) || bytes.IndexByte(u, ' ') >= 0 {
		return false
	}
	for _, c := range u[1:colon] {
		if !isAlpha(c) && !isDigit(c) && c != '+' && c != '-' && c != '.' {
			return false
		}
	}
	return true
}

// via reads the first value of the top Via header:
// protocol SLASH version SLASH transport LWS sent-by *(SEMI param).
// RFC 3261 allows LWS around the separators, and RFC 4475 (wsinv) uses it.
// via decodes the first value of a Via header and returns where it ends: at
// the comma before the next value, or at e.
func (m *Msg) via(b []byte, s, e int) (int, Error) {
	m.ErrOffset = s
	i := s
	var t0 int
	for part := 0; part < 3; part++ {
		if part > 0 {
			i = skipLWS(b, i, e)
			if i == e || b[i] != '/' {
				return 0, ErrBadVia
			}
			i = skipLWS(b, i+1, e)
		}
		t0 = i
		i = tokenEnd(b, i, e)
		if i == t0 {
			return 0, ErrBadVia
		}
	}
	m.Transport = b[t0:i]
	h0 := skipLWS(b, i, e)
	if h0 == i {
		return 0, ErrBadVia
	}
	i = h0
	if b[h0] == '[' {
		// An IPv6 reference holds colons, so it ends at its bracket.
		k := bytes.IndexByte(b[h0:e], ']')
		if k < 0 {
			return 0, ErrBadVia
		}
		i = h0 + k + 1
	} else {
		i = spanEnd(b, i, e, classHost)
		if i == h0 {
			return 0, ErrBadVia
		}
	}
	h1 := i
	if j := skipLWS(b, i, e); j < e && b[j] == ':' {
		p0 := skipLWS(b, j+1, e)
		p1 := p0
		for p1 < e && isDigit(b[p1]) {
			p1++
		}
		if p1 == p0 || p1-p0 > 5 {
			return 0, ErrBadVia
		}
		h1, i = p1, p1
	}
	m.SentBy = b[h0:h1]
	i = skipLWS(b, i, e)
	for i < e && b[i] == ';' {
		n0 := skipLWS(b, i+1, e)
		n1, v0, v1, next := param(b, n0, e)
		if next < 0 {
			m.ErrOffset = n0
			return 0, ErrBadVia
		}
		if v0 >= 0 && equalFold(b[n0:n1], "branch") {
			if m.Branch == nil {
				m.Branch = b[v0:v1]
			}
		}
		i = next
	}
	if i < e && b[i] != ',' {
		m.ErrOffset = i
		return 0, ErrBadVia
	}
	return i, 0
}

// WithoutTopVia returns a copy of b, the message m was scanned from, without
// its first Via value (m.TopVia): what a proxy forwards of a response. The
// rest is left byte for byte as it came.
func (m *Msg) WithoutTopVia(b []byte) []byte {
	c0, c1 := m.TopVia[0], m.TopVia[1]
	if c1 <= c0 {
		return append([]byte(nil), b...)
	}
	out := make([]byte, 0, len(b)-(c1-c0))
	return append(append(out, b[:c0]...), b[c1:]...)
}

// param reads "name [= value]" starting at n0 and the LWS after it. It
// returns the name's end, the value's bounds (v0 < 0 without a value) and the
// offset after it, or next < 0 when the parameter is malformed.
func param(b []byte, n0, e int) (n1, v0, v1, next int) {
	n1 = tokenEnd(b, n0, e)
	if n1 == n0 {
		return 0, 0, 0, -1
	}
	i := skipLWS(b, n1, e)
	v0, v1 = -1, -1
	if i < e && b[i] == '=' {
		v0 = skipLWS(b, i+1, e)
		if v0 < e && b[v0] == '"' {
			v1 = quotedEnd(b, v0, e)
			if v1 < 0 {
				return 0, 0, 0, -1
			}
		} else {
			v1 = spanEnd(b, v0, e, classValue)
			if v1 == v0 {
				return 0, 0, 0, -1
			}
		}
		i = skipLWS(b, v1, e)
	}
	return n1, v0, v1, i
}

// addrTag reads a To or From value, name-addr or addr-spec, and finds its tag
// parameter. t0 < 0 means the value is malformed; ok reports a tag. It jumps
// between delimiters with IndexByte rather than walking every byte, since
// From and To are the longest headers the front door reads.
func addrTag(b []byte, s, e int) (t0, t1 int, ok bool) {
	if s == e {
		return -1, 0, false
	}
	i := s
	if b[i] == '"' {
		if i = quotedEnd(b, i, e); i < 0 {
			return -1, 0, false
		}
		if i = skipLWS(b, i, e); i == e || b[i] != '<' {
			return -1, 0, false
		}
	}
	lt := bytes.IndexByte(b[i:e], '<')
	head := e
	if lt >= 0 {
		head = i + lt
	}
	// A display name holds no ';', so a ';' before the first '<' makes
	// the value an addr-spec, and that '<' part of a parameter value.
	semi := bytes.IndexByte(b[i:head], ';')
	if lt >= 0 && semi < 0 {
		// A display name before the bracket is tokens and spaces only.
		if bytes.IndexByte(b[i:head], '"') >= 0 {
			return -1, 0, false
		}
		i = head
		// RFC 4475 (badaspec): no whitespace inside the brackets.
		k := bytes.IndexByte(b[i:e], '>')
		if k < 2 || isLWS(b[i+1]) || isLWS(b[i+k-1]) {
			return -1, 0, false
		}
		i += k + 1
		i = skipLWS(b, i, e)
	} else {
		// In an addr-spec without brackets, the first ';' starts the
		// header's parameters (RFC 3261 20.10).
		if semi == 0 {
			return -1, 0, false
		}
		if semi < 0 {
			return 0, 0, false
		}
		i += semi
	}
	for i < e && b[i] == ';' {
		n0 := skipLWS(b, i+1, e)
		n1, v0, v1, next := param(b, n0, e)
		if next < 0 {
			return -1, 0, false
		}
		if v0 >= 0 && !ok && equalFold(b[n0:n1], "tag") {
			t0, t1, ok = v0, v1, true
		}
		i = next
	}
	if i < e {
		return -1, 0, false
	}
	return t0, t1, ok
}

func (m *Msg) cseq(b []byte, s, e int) Error {
	m.ErrOffset = s
	i := s
	var n uint64
	for i < e && isDigit(b[i]) {
		n = n*10 + uint64(b[i]-'0')
		if n >= 1<<31 {
			return ErrBadCSeq
		}
		i++
	}
	j := skipLWS(b, i, e)
	if i == s || j == i {
		return ErrBadCSeq
	}
	k := tokenEnd(b, j, e)
	if k == j || k != e {
		return ErrBadCSeq
	}
	m.CSeq = uint32(n)
	m.CSeqMethodBytes = b[j:k]
	m.CSeqMethod = lookupMethod(m.CSeqMethodBytes)
	return 0
}

// number reads a whole value of decimal digits no greater than max.
func number(b []byte, s, e, max int) (int, bool) {
	if s == e {
		return 0, false
	}
	n := 0
	for _, c := range b[s:e] {
		if !isDigit(c) {
			return 0, false
		}
		n = n*10 + int(c-'0')
		if n > max {
			return 0, false
		}
	}
	return n, true
}

// header locates one logical header line: its name, and its value up to the
// line end, continuation lines included.
type header struct {
	start    int // first byte of the name
	nameEnd  int
	valStart int // first byte after the colon
	valEnd   int // before the final line end
	next     int // first byte of the following line
	folded   bool
	errOff   int
}

// nextHeader reads the header line at off into h, or reports the empty line
// that ends the headers (h.next is then the body's offset).
func nextHeader(b []byte, off, maxLine int, h *header) (done bool, err Error) {
	*h = header{start: off, errOff: off}
	if off >= len(b) {
		return false, ErrTruncated
	}
	switch b[off] {
	case '\n':
		h.next = off + 1
		return true, 0
	case '\r':
		if off+1 < len(b) && b[off+1] == '\n' {
			h.next = off + 2
			return true, 0
		}
		if off+1 == len(b) {
			return false, ErrTruncated
		}
		return false, ErrBadHeader
	}
	i := tokenEnd(b, off, len(b))
	if i == off {
		return false, ErrBadHeader
	}
	h.nameEnd = i
	for i < len(b) && (b[i] == ' ' || b[i] == '\t') {
		i++
	}
	if i == len(b) || b[i] != ':' {
		h.errOff = i
		if i == len(b) {
			return false, ErrTruncated
		}
		return false, ErrBadHeader
	}
	h.valStart = i + 1
	lineStart := off
	p := h.valStart
	for {
		nl := bytes.IndexByte(b[p:], '\n')
		if nl < 0 {
			if len(b)-lineStart > maxLine {
				h.errOff = lineStart + maxLine
				return false, ErrTooLong
			}
			h.errOff = len(b)
			return false, ErrTruncated
		}
		end := p + nl
		if end-lineStart > maxLine {
			h.errOff = lineStart + maxLine
			return false, ErrTooLong
		}
		if end+1 == len(b) {
			// Whether a continuation line or the empty line follows, it
			// is missing: the value may be incomplete, so say so.
			h.errOff = len(b)
			return false, ErrTruncated
		}
		if b[end+1] == ' ' || b[end+1] == '\t' {
			h.folded = true
			lineStart = end + 1
			p = lineStart
			continue
		}
		h.next = end + 1
		if end > h.valStart && b[end-1] == '\r' {
			end--
		}
		h.valEnd = end
		return false, 0
	}
}

// badNUL returns the offset of the first NUL in b[s:e] that is not a
// quoted-pair inside a quoted string, or -1. RFC 4475 (intmeth) escapes a NUL
// in a display name, which is legal; any other NUL is not.
func badNUL(b []byte, s, e int) int {
	for s < e {
		k := bytes.IndexByte(b[s:e], 0)
		if k < 0 {
			return -1
		}
		q := s + k
		if !quotedPairAt(b, q) {
			return q
		}
		s = q + 1
	}
	return -1
}

// quotedPairAt walks the line holding q to see whether b[q] is escaped inside
// a quoted string. Only the slow path calls it.
func quotedPairAt(b []byte, q int) bool {
	ls := bytes.LastIndexByte(b[:q], '\n') + 1
	in, esc := false, false
	for i := ls; i < q; i++ {
		switch {
		case esc:
			esc = false
		case in && b[i] == '\\':
			esc = true
		case b[i] == '"':
			in = !in
		}
	}
	return in && esc
}

// quotedEnd returns the offset after the quoted string that starts at
// b[i] == '"', or -1 if it is not closed before e.
func quotedEnd(b []byte, i, e int) int {
	for j := i + 1; j < e; j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1
		}
	}
	return -1
}

func isLWS(c byte) bool { return c == ' ' || c == '\t' || c == '\r' || c == '\n' }

// skipLWS skips spaces, tabs and the line ends of folded lines: inside a
// logical header value a CR or LF can only belong to a fold.
func skipLWS(b []byte, i, e int) int {
	// Ranging over the sub-slice lets the compiler drop per-byte bounds
	// checks; this and tokenEnd are the innermost loops.
	for _, c := range b[i:e] {
		if !isLWS(c) {
			break
		}
		i++
	}
	return i
}

func trimLWS(b []byte, s, e int) (int, int) {
	s = skipLWS(b, s, e)
	v := b[s:e]
	for len(v) > 0 && isLWS(v[len(v)-1]) {
		v = v[:len(v)-1]
	}
	return s, s + len(v)
}

func tokenEnd(b []byte, i, e int) int {
	return spanEnd(b, i, e, classToken)
}

// spanEnd returns the end of the run of bytes in class starting at i.
func spanEnd(b []byte, i, e int, class uint8) int {
	for _, c := range b[i:e] {
		if classes[c]&class == 0 {
			break
		}
		i++
	}
	return i
}
func isAlpha(c byte) bool { return 'a' <= c|0x20 && c|0x20 <= 'z' }
func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// Byte classes, one table lookup per byte in the inner loops.
const (
	classToken = 1 << iota // RFC 3261 token: alphanum and -.!%*_+`'~
	classValue             // an unquoted parameter value: no controls, space, ';' ',' '"' '='
	classHost              // a sent-by host: up to LWS, ';', ',' or ':'
)

var classes = func() (t [256]uint8) {
	for c := range 256 {
		if !isLWS(byte(c)) && c != ';' && c != ',' && c != ':' {
			t[c] |= classHost
		}
		// RFC 3261 makes a value a token, host or quoted string, but clients
		// put '@', '/', '{' and the like in tags and branches, and Kamailio
		// and OpenSIPS take them: refusing them loses calls while routing
		// only compares the bytes. Not '=': the workers' parser (sipgo)
		// splits "tag=a=b" at its last '=' and sees no tag where this one
		// does, and the door must never call a message in-dialog (and so
		// past admission) that a worker takes for a new session. ';' and ',' must end a value, as
		// they start the next parameter or header value. A '"' would open a
		// quoted string for readers that track quotes, the NUL check here
		// among them, so a plain value cannot hold one. '<' and '>'
		// need no exclusion: addrTag finds the closing '>' of a name-addr
		// before it reads any parameter, and URI parameters inside the
		// brackets are never read with this class.
		if c > ' ' && c != 0x7f && c != ';' && c != ',' && c != '"' && c != '=' {
			t[c] |= classValue
		}
	}
	token := "-.!%*_+`'~0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"
	for _, c := range token {
		t[c] |= classToken
	}
	return t
}()

// hasPrefixFold compares b's prefix to the lower-case ASCII string p.
func hasPrefixFold(b []byte, p string) bool {
	return len(b) >= len(p) && equalFold(b[:len(p)], p)
}

// equalFold compares b to the lower-case ASCII string s, ignoring case.
func equalFold(b []byte, s string) bool {
	if len(b) != len(s) {
		return false
	}
	for i := range len(b) {
		c := b[i]
		if 'A' <= c && c <= 'Z' {
			c += 'a' - 'A'
		}
		if c != s[i] {
			return false
		}
	}
	return true
}
