package sipscan

// Error is the reason a datagram could not be scanned. Values are small
// integers, so a caller can count them in an array indexed by Error and name
// them with String; converting one to error does not allocate.
type Error uint8

// Reasons Scan returns. ErrEmpty is not a fault: RFC 5626 keepalives are bare
// CRLFs and arrive as datagrams of their own.
const (
	ErrEmpty            Error = iota + 1 // only CR/LF: a keepalive
	ErrTooLong                           // datagram or line over the configured cap
	ErrTruncated                         // headers do not end with an empty line
	ErrBodyTruncated                     // fewer body bytes than Content-Length says
	ErrBadStartLine                      // not "METHOD URI SIP/2.0" nor "SIP/2.0 CODE reason"
	ErrBadVersion                        // SIP version other than 2.0 (a server answers 505)
	ErrBadHeader                         // a header line without name and colon, or a broken To/From
	ErrNUL                               // a NUL byte in the headers outside a quoted-pair
	ErrDuplicate                         // a single-instance header appears twice
	ErrNoCallID                          // no Call-ID header
	ErrBadCallID                         // empty Call-ID or one containing whitespace
	ErrNoCSeq                            // no CSeq header
	ErrBadCSeq                           // CSeq not "number method", or number >= 2**31
	ErrCSeqMethod                        // a request whose CSeq method differs from its method
	ErrNoVia                             // no Via header
	ErrBadVia                            // top Via not "SIP/2.0/transport sent-by;params"
	ErrNoFrom                            // no From header
	ErrNoTo                              // no To header
	ErrBadMaxForwards                    // Max-Forwards not a number in 0..255
	ErrBadContentLength                  // Content-Length not a number or too large

	// NumErrors bounds the values above, for arrays of counters.
	NumErrors
)

var errorText = [NumErrors]string{
	ErrEmpty:            "empty datagram",
	ErrTooLong:          "datagram or header line too long",
	ErrTruncated:        "truncated headers",
	ErrBodyTruncated:    "body shorter than Content-Length",
	ErrBadStartLine:     "bad start line",
	ErrBadVersion:       "unsupported SIP version",
	ErrBadHeader:        "malformed header",
	ErrNUL:              "NUL byte in headers",
	ErrDuplicate:        "duplicate single-instance header",
	ErrNoCallID:         "missing Call-ID",
	ErrBadCallID:        "malformed Call-ID",
	ErrNoCSeq:           "missing CSeq",
	ErrBadCSeq:          "malformed CSeq",
	ErrCSeqMethod:       "CSeq method does not match request method",
	ErrNoVia:            "missing Via",
	ErrBadVia:           "malformed Via",
	ErrNoFrom:           "missing From",
	ErrNoTo:             "missing To",
	ErrBadMaxForwards:   "malformed Max-Forwards",
	ErrBadContentLength: "malformed Content-Length",
}

var errorNames = [NumErrors]string{
	ErrEmpty:            "empty",
	ErrTooLong:          "too_long",
	ErrTruncated:        "truncated",
	ErrBodyTruncated:    "body_truncated",
	ErrBadStartLine:     "bad_start_line",
	ErrBadVersion:       "bad_version",
	ErrBadHeader:        "bad_header",
	ErrNUL:              "nul",
	ErrDuplicate:        "duplicate",
	ErrNoCallID:         "no_call_id",
	ErrBadCallID:        "bad_call_id",
	ErrNoCSeq:           "no_cseq",
	ErrBadCSeq:          "bad_cseq",
	ErrCSeqMethod:       "cseq_method",
	ErrNoVia:            "no_via",
	ErrBadVia:           "bad_via",
	ErrNoFrom:           "no_from",
	ErrNoTo:             "no_to",
	ErrBadMaxForwards:   "bad_max_forwards",
	ErrBadContentLength: "bad_content_length",
}

func (e Error) Error() string {
	if e == 0 {
		return "no error"
	}
	if e >= NumErrors {
		return "unknown scan error"
	}
	return errorText[e]
}

// String gives a stable snake_case name, suitable as a metric label value.
func (e Error) String() string {
	if e == 0 {
		return "none"
	}
	if e >= NumErrors {
		return "unknown"
	}
	return errorNames[e]
}

// Position turns a byte offset into a 1-based line and column, for log
// messages about a rejected datagram. It is slow on purpose: only the error
// path should call it.
func Position(b []byte, off int) (line, col int) {
	if off > len(b) {
		off = len(b)
	}
	if off < 0 {
		off = 0
	}
	line, col = 1, 1
	for _, c := range b[:off] {
		if c == '\n' {
			line++
			col = 1
		} else {
			col++
		}
	}
	return line, col
}
