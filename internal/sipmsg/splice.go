package sipmsg

import "strconv"

// Splice is what a proxy changes of a request it relays (RFC 3261 16.6).
type Splice struct {
	// RequestURI, when set, replaces the Request-URI.
	RequestURI string
	// Via is this server's Via line, CRLF included, put on top.
	Via []byte
	// Received, when set, is the received parameter of the top Via as it
	// came (RFC 3261 18.2.1), and Rport, when not 0, the value of its
	// rport parameter if that came empty (RFC 3581): replaced where they
	// stand, else received is added at the end.
	Received []byte
	Rport    int
	// ForceRport is force_rport's: rport is set to Rport whatever value it
	// came with, and added when absent, as received is; RportFirst adds
	// rport before received when both are added.
	ForceRport, RportFirst bool
	// RecordRoute are lines (CRLF included) put above the other headers.
	RecordRoute [2][]byte
	// MaxForwards, when not -1, is the Max-Forwards value written; the
	// header is added when absent.
	MaxForwards int
	// DropRoutes is how many Route values come off the top.
	DropRoutes int
	// ContentLength adds a Content-Length when absent, as a stream needs.
	ContentLength bool
}

// AppendSplice appends the message as s changes it to dst. It allocates
// only when dst has no room.
func (m *Msg) AppendSplice(dst []byte, s *Splice) []byte {
	b := m.Raw
	if s.RequestURI != "" {
		dst = append(dst, m.MethodBytes...)
		dst = append(dst, ' ')
		dst = append(dst, s.RequestURI...)
		dst = append(dst, " SIP/2.0\r\n"...)
	} else {
		dst = append(dst, b[:m.StartEnd]...)
	}
	dst = append(dst, s.Via...)
	for _, rr := range s.RecordRoute {
		dst = append(dst, rr...)
	}
	drop, topVia, mfSeen, clSeen := s.DropRoutes, true, false, false
	for i := range m.Headers {
		h := &m.Headers[i]
		switch h.Kind {
		case Via:
			if topVia {
				topVia = false
				if s.Received != nil || s.Rport != 0 {
					dst = m.appendTopVia(dst, h, s)
					continue
				}
			}
		case Route:
			if drop > 0 {
				dst, drop = m.appendRouteRest(dst, h, drop)
				continue
			}
		case MaxForwards:
			mfSeen = true
			if s.MaxForwards >= 0 {
				dst = append(dst, b[h.Start:h.ValStart]...)
				dst = append(dst, ' ')
				dst = strconv.AppendInt(dst, int64(s.MaxForwards), 10)
				dst = append(dst, "\r\n"...)
				continue
			}
		case ContentLength:
			clSeen = true
		}
		dst = append(dst, b[h.Start:h.Next]...)
	}
	if !mfSeen && s.MaxForwards >= 0 {
		dst = append(dst, "Max-Forwards: "...)
		dst = strconv.AppendInt(dst, int64(s.MaxForwards), 10)
		dst = append(dst, "\r\n"...)
	}
	if !clSeen && s.ContentLength {
		dst = append(dst, "Content-Length: "...)
		dst = strconv.AppendInt(dst, int64(len(m.Body)), 10)
		dst = append(dst, "\r\n"...)
	}
	dst = append(dst, "\r\n"...)
	return append(dst, m.Body...)
}

// appendTopVia writes the first Via line with received and rport set on
// its first value.
func (m *Msg) appendTopVia(dst []byte, h *Header, s *Splice) []byte {
	b := m.Raw
	vs, ve, _ := NextValue(b, h.ValStart, h.ValEnd)
	dst = append(dst, b[h.Start:vs]...)
	// The sent-protocol and sent-by, then each parameter.
	p := vs
	for p < ve && b[p] != ';' {
		p++
	}
	dst = append(dst, b[vs:p]...)
	recvDone, rportDone := false, false
	for p < ve {
		e := p + 1
		for e < ve && b[e] != ';' {
			e++
		}
		kv := b[p+1 : e]
		k := kv
		hasVal := false
		for j := range kv {
			if kv[j] == '=' {
				k, hasVal = kv[:j], true
				break
			}
		}
		k = trim(k)
		switch {
		case s.Received != nil && equalFold(k, "received"):
			dst = append(dst, ";received="...)
			dst = append(dst, s.Received...)
			recvDone = true
		case s.Rport != 0 && equalFold(k, "rport") && (s.ForceRport || !hasVal || len(trim(kv[len(k)+1:])) == 0):
			dst = append(dst, ";rport="...)
			dst = strconv.AppendInt(dst, int64(s.Rport), 10)
			rportDone = true
		default:
			dst = append(dst, b[p:e]...)
		}
		p = e
	}
	addRport := s.ForceRport && s.Rport != 0 && !rportDone
	if addRport && s.RportFirst {
		dst = append(dst, ";rport="...)
		dst = strconv.AppendInt(dst, int64(s.Rport), 10)
		addRport = false
	}
	if s.Received != nil && !recvDone {
		dst = append(dst, ";received="...)
		dst = append(dst, s.Received...)
	}
	if addRport {
		dst = append(dst, ";rport="...)
		dst = strconv.AppendInt(dst, int64(s.Rport), 10)
	}
	return append(dst, b[ve:h.Next]...)
}

func trim(b []byte) []byte {
	for len(b) > 0 && isLWS(b[0]) {
		b = b[1:]
	}
	for len(b) > 0 && isLWS(b[len(b)-1]) {
		b = b[:len(b)-1]
	}
	return b
}

// appendRouteRest writes a Route line without its first drop values, or
// nothing when it has no more; it returns how many are left to drop.
func (m *Msg) appendRouteRest(dst []byte, h *Header, drop int) ([]byte, int) {
	b := m.Raw
	p := h.ValStart
	for drop > 0 {
		vs, ve, next := NextValue(b, p, h.ValEnd)
		if vs >= ve {
			break
		}
		drop--
		p = next
		if next >= h.ValEnd {
			return dst, drop // the whole line goes
		}
	}
	vs, _, _ := NextValue(b, p, h.ValEnd)
	if vs >= h.ValEnd {
		return dst, drop
	}
	dst = append(dst, b[h.Start:h.ValStart]...)
	dst = append(dst, ' ')
	return append(dst, b[vs:h.Next]...), drop
}

// Routes calls fn with each Route value from the top until fn returns
// false.
func (m *Msg) Routes(fn func(v []byte) bool) {
	for i := range m.Headers {
		h := &m.Headers[i]
		if h.Kind != Route {
			continue
		}
		for p := h.ValStart; p < h.ValEnd; {
			vs, ve, next := NextValue(m.Raw, p, h.ValEnd)
			if vs < ve && !fn(m.Raw[vs:ve]) {
				return
			}
			p = next
		}
	}
}

// AppendReply appends a reply of this server's to the request m: the
// status line, its Vias (the top one with the received and rport s sets),
// From, To (with toTag when it has no tag and toTag is set), Call-ID and
// CSeq as they came, in their order (RFC 3261 8.2.6).
func (m *Msg) AppendReply(dst []byte, code int, reason string, s *Splice, toTag []byte) []byte {
	return AppendReplyEnd(m.AppendReplyHead(dst, code, reason, s, toTag))
}

// AppendReplyEnd ends a reply AppendReplyHead began, after the header
// lines of its own the caller put in between.
func AppendReplyEnd(dst []byte) []byte {
	return append(dst, "Server: sipvisor\r\nContent-Length: 0\r\n\r\n"...)
}

// AppendReplyHead is AppendReply without its end (AppendReplyEnd), for a
// reply with more header lines: a challenge, a registrar's Contacts.
func (m *Msg) AppendReplyHead(dst []byte, code int, reason string, s *Splice, toTag []byte) []byte {
	b := m.Raw
	dst = append(dst, "SIP/2.0 "...)
	dst = strconv.AppendInt(dst, int64(code), 10)
	dst = append(dst, ' ')
	dst = append(dst, reason...)
	dst = append(dst, "\r\n"...)
	topVia := true
	for i := range m.Headers {
		h := &m.Headers[i]
		switch h.Kind {
		case Via:
			if topVia && (s.Received != nil || s.Rport != 0) {
				dst = m.appendTopVia(dst, h, s)
			} else {
				dst = appendLine(dst, b[h.Start:h.Next])
			}
			topVia = false
		case To:
			if len(toTag) == 0 || m.HasToTag {
				dst = appendLine(dst, b[h.Start:h.Next])
				continue
			}
			dst = append(dst, b[h.Start:h.ValEnd]...)
			dst = append(dst, ";tag="...)
			dst = append(dst, toTag...)
			dst = append(dst, "\r\n"...)
		case From, CallID, CSeq:
			dst = appendLine(dst, b[h.Start:h.Next])
		}
	}
	return dst
}

// appendLine appends a header line with a CRLF end, whatever it came with.
func appendLine(dst, line []byte) []byte {
	n := len(line)
	for n > 0 && (line[n-1] == '\n' || line[n-1] == '\r') {
		n--
	}
	return append(append(dst, line[:n]...), "\r\n"...)
}
