package sipscan

import "bytes"

// Reply is a stateless response the front door sends without a worker: a 503
// to a refused new session, a 400 to a request it cannot route, a 483 when
// Max-Forwards is spent.
type Reply struct {
	Code       int    // 100..699
	Reason     string // empty, or containing control characters: ReasonPhrase(Code)
	RetryAfter int    // seconds; a Retry-After header only when > 0
	Server     string // a Server header only when not empty
}

// AppendReply appends to dst a response to the raw request req; see
// Reply.Append.
func AppendReply(dst []byte, req []byte, m *Msg, code int, reason string, retryAfter int) []byte {
	r := Reply{Code: code, Reason: reason, RetryAfter: retryAfter}
	return r.Append(dst, req, m)
}

// Append builds the response RFC 3261 8.2.6 describes from the request
// bytes: every Via in order (compact "v:" and comma-separated values
// included), From, To, Call-ID and CSeq as received, a To tag when the
// request had none, and Content-Length: 0. The added tag is ReplyTag: a
// retransmitted request gets the same tag, so the client sees one
// consistent reply, and the ACK of the reply carries it back (see IsOwnAck).
//
// m must come from scanning req; Append uses it only to refuse what must not
// be answered, and reads the headers itself, so a Msg from a Scan that failed
// after the start line still yields a 400. Append returns dst unchanged when
// no reply may be sent: m is not a request, the request is an ACK, Code is
// outside 100..699, or the request lacks a Via, From, To, Call-ID or CSeq a
// client would need to match the reply. It does not allocate when dst has
// room for the reply: the request's length plus 128 bytes, Reason and Server
// suffice for a request with CRLF line ends (a bare-LF one may need a byte
// more per copied header line).
func (r *Reply) Append(dst []byte, req []byte, m *Msg) []byte {
	if m == nil || !m.IsRequest || m.Method == Ack || r.Code < 100 || r.Code > 699 {
		return dst
	}
	start := 0
	for start < len(req) && (req[start] == '\r' || req[start] == '\n') {
		start++
	}
	nl := bytes.IndexByte(req[start:], '\n')
	if nl < 0 {
		return dst
	}

	out := append(dst, "SIP/2.0 "...)
	out = append(out, byte('0'+r.Code/100), byte('0'+r.Code/10%10), byte('0'+r.Code%10), ' ')
	if reason := r.Reason; reason != "" && printable(reason) {
		out = append(out, reason...)
	} else {
		out = append(out, ReasonPhrase(r.Code)...)
	}
	out = append(out, "\r\n"...)

	var (
		seen     uint
		h        header
		tagAt    = -1 // where the To tag's digits go, once the hash is known
		callID   []byte
		lower    [8]byte
		reqLimit = len(req) + 1 // Scan applied the caller's line limit already
	)
	for off := start + nl + 1; ; {
		done, err := nextHeader(req, off, reqLimit, &h)
		if done || err != 0 {
			break
		}
		off = h.next
		name := req[h.start:h.nameEnd]
		if len(name) > len(lower) {
			continue
		}
		for i, c := range name {
			if 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			lower[i] = c
		}
		var bit uint
		switch string(lower[:len(name)]) {
		case "via", "v":
			bit = seenVia
		case "from", "f":
			bit = seenFrom
		case "to", "t":
			bit = seenTo
		case "call-id", "i":
			bit = seenCallID
		case "cseq":
			bit = seenCSeq
		default:
			continue
		}
		if bit != seenVia && seen&bit != 0 {
			continue
		}
		seen |= bit
		s, e := trimLWS(req, h.valStart, h.valEnd)
		out = appendUnfolded(out, req[h.start:e], h.folded)
		switch bit {
		case seenCallID:
			callID = req[s:e]
		case seenTo:
			t0, _, ok := addrTag(req, s, e)
			if t0 < 0 {
				return dst
			}
			if !ok && r.Code > 100 {
				out = append(out, ";tag="...)
				tagAt = len(out)
				out = append(out, "0000000000000000"...)
			}
		}
		out = append(out, "\r\n"...)
	}
	const need = seenVia | seenFrom | seenTo | seenCallID | seenCSeq
	if seen&need != need || len(callID) == 0 {
		return dst
	}
	if tagAt >= 0 {
		tag := ReplyTag(m)
		const hex = "0123456789abcdef"
		for i := 15; i >= 0; i-- {
			out[tagAt+i] = hex[tag&0xf]
			tag >>= 4
		}
	}
	if r.RetryAfter > 0 {
		out = append(out, "Retry-After: "...)
		out = appendUint(out, uint(r.RetryAfter))
		out = append(out, "\r\n"...)
	}
	if r.Server != "" && printable(r.Server) {
		out = append(out, "Server: "...)
		out = append(out, r.Server...)
		out = append(out, "\r\n"...)
	}
	return append(out, "Content-Length: 0\r\n\r\n"...)
}

// appendUnfolded copies a header line. A folded one is joined as RFC 3261
// 7.3.1 reads it, each line end and the whitespace around it replaced by one
// space, so the reply has one line per header and no bare LF.
func appendUnfolded(out, line []byte, folded bool) []byte {
	if !folded {
		return append(out, line...)
	}
	for {
		nl := bytes.IndexByte(line, '\n')
		if nl < 0 {
			return append(out, line...)
		}
		seg := line[:nl]
		for len(seg) > 0 && isLWS(seg[len(seg)-1]) {
			seg = seg[:len(seg)-1]
		}
		out = append(out, seg...)
		out = append(out, ' ')
		line = line[skipLWS(line, nl, len(line)):]
	}
}

func appendUint(out []byte, v uint) []byte {
	var buf [20]byte
	i := len(buf)
	for {
		i--
		buf[i] = byte('0' + v%10)
		v /= 10
		if v == 0 {
			break
		}
	}
	return append(out, buf[i:]...)
}

// printable reports whether s can go into a header or reason phrase as is:
// no control characters, which could end the line or the message early.
func printable(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; (c < ' ' && c != '\t') || c == 0x7f {
			return false
		}
	}
	return true
}

// ReasonPhrase is the RFC 3261 reason phrase for code, or a generic one for
// codes it does not name.
func ReasonPhrase(code int) string {
	switch code {
	case 100:
		return "Trying"
	case 180:
		return "Ringing"
	case 183:
		return "Session Progress"
	case 200:
		return "OK"
	case 202:
		return "Accepted"
	case 400:
		return "Bad Request"
	case 401:
		return "Unauthorized"
	case 403:
		return "Forbidden"
	case 404:
		return "Not Found"
	case 405:
		return "Method Not Allowed"
	case 408:
		return "Request Timeout"
	case 413:
		return "Request Entity Too Large"
	case 414:
		return "Request-URI Too Long"
	case 415:
		return "Unsupported Media Type"
	case 416:
		return "Unsupported URI Scheme"
	case 420:
		return "Bad Extension"
	case 480:
		return "Temporarily Unavailable"
	case 481:
		return "Call/Transaction Does Not Exist"
	case 482:
		return "Loop Detected"
	case 483:
		return "Too Many Hops"
	case 486:
		return "Busy Here"
	case 487:
		return "Request Terminated"
	case 500:
		return "Server Internal Error"
	case 501:
		return "Not Implemented"
	case 503:
		return "Service Unavailable"
	case 504:
		return "Server Time-out"
	case 505:
		return "Version Not Supported"
	case 513:
		return "Message Too Large"
	case 600:
		return "Busy Everywhere"
	case 603:
		return "Decline"
	}
	return "Unknown"
}

// ReplyTag is the To tag Append adds to a reply to m: a hash of the Call-ID,
// the top Via's branch (its sent-by for RFC 2543 senders) and the CSeq
// number, which a request, its retransmissions and the ACK of its final
// reply share (RFC 3261 17.1.1.3).
func ReplyTag(m *Msg) uint64 {
	via := m.Branch
	if via == nil {
		via = m.SentBy
	}
	var n [4]byte
	n[0], n[1], n[2], n[3] = byte(m.CSeq>>24), byte(m.CSeq>>16), byte(m.CSeq>>8), byte(m.CSeq)
	return hashBytes(hashBytes(hashBytes(hashSeed, m.CallID), via), n[:])
}

// IsOwnAck reports whether m is the ACK of a reply that Append built: its To
// tag is ReplyTag. Such an ACK ends a transaction that lived nowhere but in
// the reply, so it needs no worker.
func IsOwnAck(m *Msg) bool {
	if !m.IsRequest || m.Method != Ack || len(m.ToTag) != 16 {
		return false
	}
	tag := ReplyTag(m)
	for i := 15; i >= 0; i-- {
		c := m.ToTag[i]
		var v uint64
		switch {
		case '0' <= c && c <= '9':
			v = uint64(c - '0')
		case 'a' <= c && c <= 'f':
			v = uint64(c-'a') + 10
		default:
			return false
		}
		if v != tag&0xf {
			return false
		}
		tag >>= 4
	}
	return true
}
