package loadgen

import (
	"strconv"
	"strings"
)

// endpoint is what every message sipload builds says about itself and its
// peer. The strings are fixed for a run, so builders only append.
type endpoint struct {
	local     string // ip:port, for Via and Contact
	localIP   string
	remote    string // ip:port of the target (UAC)
	transport string // "UDP", "TCP" or "TLS"
	uriParam  string // ";transport=tcp" or ";transport=tls" in our URIs; "" for UDP
	service   string // -s, the user part of the request URI
	tagBase   string // makes tags and Call-IDs unique across runs
	sdp       []byte
}

func newEndpoint(localIP string, localPort int, remote, transport, service, runID string) *endpoint {
	e := &endpoint{
		localIP:   localIP,
		local:     joinHostPort(localIP, localPort),
		remote:    remote,
		transport: transport,
		service:   service,
		uriParam:  uriTransport(transport),
		tagBase:   runID,
	}
	ipv := "IP4"
	if isIPv6(localIP) {
		ipv = "IP6"
	}
	e.sdp = []byte("v=0\r\no=sipload 53655765 2353687637 IN " + ipv + " " + localIP + "\r\ns=-\r\nc=IN " + ipv + " " +
		localIP + "\r\nt=0 0\r\nm=audio 6000 RTP/AVP 0\r\na=rtpmap:0 PCMU/8000\r\n")
	return e
}

// uriTransport is the transport parameter of a Contact reached over
// transport: UDP is the default and goes without (RFC 3261 19.1.1).
func uriTransport(transport string) string {
	if transport == "UDP" {
		return ""
	}
	return ";transport=" + strings.ToLower(transport)
}

func isIPv6(ip string) bool {
	for i := 0; i < len(ip); i++ {
		if ip[i] == ':' {
			return true
		}
	}
	return false
}

func joinHostPort(ip string, port int) string {
	if isIPv6(ip) {
		return "[" + ip + "]:" + strconv.Itoa(port)
	}
	return ip + ":" + strconv.Itoa(port)
}

func (e *endpoint) contactHdr(b []byte) []byte {
	b = append(b, "Contact: <sip:sipload@"...)
	b = append(b, e.local...)
	b = append(b, e.uriParam...)
	return append(b, ">\r\n"...)
}

func appendHdr(b []byte, name string, v []byte) []byte {
	b = append(b, name...)
	b = append(b, ": "...)
	b = append(b, v...)
	return append(b, "\r\n"...)
}

func appendCSeq(b []byte, n uint32, method string) []byte {
	b = append(b, "CSeq: "...)
	b = strconv.AppendUint(b, uint64(n), 10)
	b = append(b, ' ')
	b = append(b, method...)
	return append(b, "\r\n"...)
}

func appendBody(b []byte, ctype string, body []byte) []byte {
	if len(body) > 0 {
		b = append(b, "Content-Type: "...)
		b = append(b, ctype...)
		b = append(b, "\r\n"...)
	}
	b = append(b, "Content-Length: "...)
	b = strconv.AppendInt(b, int64(len(body)), 10)
	b = append(b, "\r\n\r\n"...)
	return append(b, body...)
}

// response builds a reply to req. toTag is added when the request's To has
// none; a dialog-creating reply carries Record-Route and our Contact.
func (e *endpoint) response(b []byte, req *msg, code int, reason string, toTag string, dialog bool, extra string, body []byte) []byte {
	b = append(b, "SIP/2.0 "...)
	b = strconv.AppendInt(b, int64(code), 10)
	b = append(b, ' ')
	b = append(b, reason...)
	b = append(b, "\r\n"...)
	for _, v := range req.vias {
		b = appendHdr(b, "Via", v)
	}
	if dialog {
		for _, v := range req.rrs {
			b = appendHdr(b, "Record-Route", v)
		}
	}
	b = appendHdr(b, "From", req.from)
	b = append(b, "To: "...)
	b = append(b, req.to...)
	if len(req.toTag) == 0 && toTag != "" {
		b = append(b, ";tag="...)
		b = append(b, toTag...)
	}
	b = append(b, "\r\n"...)
	b = appendHdr(b, "Call-ID", req.callID)
	b = appendHdr(b, "CSeq", req.cseq)
	if dialog {
		b = e.contactHdr(b)
	}
	b = append(b, extra...)
	return appendBody(b, "application/sdp", body)
}
