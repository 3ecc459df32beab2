package engine

import (
	"net/netip"
	"strconv"
	"strings"

	"github.com/emiago/sipgo/sip"
)

// The writers below put a parsed message back into bytes exactly as
// sipgo's StringWrite does, for the header types a relayed request carries,
// but append to a byte slice. sipgo's own writers allocate as they go: a
// string for every port and CSeq number (strconv.Itoa), the whole Via value
// and every URI's parameters as intermediate strings, the body converted
// to a string, and the separator of every parameter list. Relaying a
// request and answering an INVITE 100 Trying cost a proxied call about 45
// allocations that way (BenchmarkCall; bench/results/PERFORMANCE-history.md,
// "The fifth round"). Header types not written here go through sipgo's
// StringWrite; TestWriteLikeSipgo holds the two to the same bytes.

// msgBuf is a byte slice that sipgo's writers can append to.
type msgBuf []byte

func (b *msgBuf) WriteString(s string) (int, error) {
	*b = append(*b, s...)
	return len(s), nil
}

// sipgoV6 is what sipgo's uriIP takes for an IPv6 address, to write it in
// brackets: what net.ParseIP reads as one that is not an IPv4 address,
// from a host of at most 46 bytes (sipgo's quick check returns false past
// the 46th). Only a host with a colon can be one, and checking that first
// spares the failed parse of every domain name its error.
func sipgoV6(host string) bool {
	if len(host) > 46 || strings.IndexByte(host, ':') < 0 {
		return false
	}
	a, err := netip.ParseAddr(host)
	return err == nil && a.Zone() == "" && a.Is6() && !a.Is4In6()
}

func appendHost(b []byte, host string) []byte {
	if sipgoV6(host) {
		b = append(b, '[')
		b = append(b, host...)
		return append(b, ']')
	}
	return append(b, host...)
}

// appendParams writes parameters as HeaderParams.ToString and ToStringWrite
// do (the two write the same).
func appendParams(b []byte, sep byte, hp sip.HeaderParams) []byte {
	for i, kv := range hp {
		if i > 0 {
			b = append(b, sep)
		}
		b = append(b, kv.K...)
		if kv.V == "" {
			continue
		}
		if strings.ContainsAny(kv.V, " \t") {
			b = append(b, `="`...)
			b = append(b, kv.V...)
			b = append(b, '"')
		} else {
			b = append(b, '=')
			b = append(b, kv.V...)
		}
	}
	return b
}

// appendURI writes u as Uri.StringWrite does.
func appendURI(b []byte, u *sip.Uri) []byte {
	if u.Scheme == "" {
		b = append(b, "sip"...)
	} else {
		b = append(b, u.Scheme...)
	}
	b = append(b, ':')
	if raw := u.Raw(); raw != "" {
		return append(b, raw...)
	}
	if u.HierarhicalSlashes {
		b = append(b, "//"...)
	}
	if u.User != "" {
		b = append(b, u.User...)
		if u.Password != "" {
			b = append(b, ':')
			b = append(b, u.Password...)
		}
		b = append(b, '@')
	}
	b = appendHost(b, u.Host)
	if u.Port > 0 {
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(u.Port), 10)
	}
	if len(u.UriParams) > 0 {
		b = append(b, ';')
		b = appendParams(b, ';', u.UriParams)
	}
	if len(u.Headers) > 0 {
		b = append(b, '?')
		b = appendParams(b, '&', u.Headers)
	}
	return b
}

// appendNameAddr writes the value of a From, To or Contact header.
func appendNameAddr(b []byte, display string, u *sip.Uri, params sip.HeaderParams) []byte {
	if display != "" {
		b = append(b, '"')
		b = append(b, display...)
		b = append(b, `" `...)
	}
	b = append(b, '<')
	b = appendURI(b, u)
	b = append(b, '>')
	if len(params) > 0 {
		b = append(b, ';')
		b = appendParams(b, ';', params)
	}
	return b
}

func appendViaValue(b []byte, h *sip.ViaHeader) []byte {
	b = append(b, h.ProtocolName...)
	b = append(b, '/')
	b = append(b, h.ProtocolVersion...)
	b = append(b, '/')
	b = append(b, h.Transport...)
	b = append(b, ' ')
	b = appendHost(b, h.Host)
	if h.Port > 0 {
		b = append(b, ':')
		b = strconv.AppendInt(b, int64(h.Port), 10)
	}
	if len(h.Params) > 0 {
		b = append(b, ';')
		b = appendParams(b, ';', h.Params)
	}
	return b
}

// appendKnownValue writes the value of a header of a type written here and
// reports whether it was one.
func appendKnownValue(b []byte, h sip.Header) ([]byte, bool) {
	switch h := h.(type) {
	case *sip.ViaHeader:
		return appendViaValue(b, h), true
	case *sip.FromHeader:
		return appendNameAddr(b, h.DisplayName, &h.Address, h.Params), true
	case *sip.ToHeader:
		return appendNameAddr(b, h.DisplayName, &h.Address, h.Params), true
	case *sip.ContactHeader:
		if h.Address.Wildcard {
			return append(b, '*'), true
		}
		return appendNameAddr(b, h.DisplayName, &h.Address, h.Params), true
	case *sip.CallIDHeader:
		return append(b, *h...), true
	case *sip.CSeqHeader:
		b = strconv.AppendInt(b, int64(int(h.SeqNo)), 10)
		b = append(b, ' ')
		return append(b, h.MethodName...), true
	case *sip.MaxForwardsHeader:
		return strconv.AppendInt(b, int64(int(*h)), 10), true
	case *sip.ContentLengthHeader:
		return strconv.AppendInt(b, int64(int(*h)), 10), true
	case *sip.ContentTypeHeader:
		return append(b, *h...), true
	case *sip.RouteHeader:
		b = append(b, '<')
		b = appendURI(b, &h.Address)
		return append(b, '>'), true
	case *sip.RecordRouteHeader:
		b = append(b, '<')
		b = appendURI(b, &h.Address)
		return append(b, '>'), true
	}
	return b, false
}

// appendHeader writes "Name: value" as the header's StringWrite does,
// through it for the types not written here.
func (b *msgBuf) appendHeader(h sip.Header) {
	start := len(*b)
	*b = append(*b, h.Name()...)
	*b = append(*b, ": "...)
	var ok bool
	if *b, ok = appendKnownValue(*b, h); !ok {
		*b = (*b)[:start]
		h.StringWrite(b)
	}
}

// appendRequest writes req as Request.StringWrite does, with via (a whole
// line, CRLF included, or nothing) before its first header. It returns
// false, having written nothing, for a request it does not write the way
// sipgo would (compact header names).
func (b *msgBuf) appendRequest(req *sip.Request, via []byte) bool {
	if req.CompactHeaders {
		return false
	}
	*b = append(*b, req.Method...)
	*b = append(*b, ' ')
	*b = appendURI(*b, &req.Recipient)
	*b = append(*b, ' ')
	*b = append(*b, req.SipVersion...)
	*b = append(*b, "\r\n"...)
	*b = append(*b, via...)
	for i, h := range req.Headers() {
		if i > 0 {
			*b = append(*b, "\r\n"...)
		}
		b.appendHeader(h)
	}
	*b = append(*b, "\r\n\r\n"...)
	if body := req.Body(); body != nil {
		*b = append(*b, body...)
	}
	return true
}
