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

func (e *endpoint) via(b []byte, n int64, k uint32) []byte {
	b = append(b, "Via: SIP/2.0/"...)
	b = append(b, e.transport...)
	b = append(b, ' ')
	b = append(b, e.local...)
	b = append(b, ";branch=z9hG4bK-"...)
	b = append(b, e.tagBase...)
	b = append(b, '-')
	b = strconv.AppendInt(b, n, 10)
	b = append(b, '-')
	b = strconv.AppendUint(b, uint64(k), 10)
	b = append(b, ";rport\r\n"...)
	return b
}

func (e *endpoint) contactHdr(b []byte) []byte {
	b = append(b, "Contact: <sip:sipload@"...)
	b = append(b, e.local...)
	b = append(b, e.uriParam...)
	return append(b, ">\r\n"...)
}

// callID appends the Call-ID of call n; unique across runs through tagBase.
func (e *endpoint) callID(b []byte, n int64) []byte {
	b = strconv.AppendInt(b, n, 10)
	b = append(b, '-')
	b = append(b, e.tagBase...)
	b = append(b, '@')
	return append(b, e.localIP...)
}

func (e *endpoint) fromHdr(b []byte, user string, n int64) []byte {
	b = append(b, "From: <sip:"...)
	b = append(b, user...)
	b = append(b, '@')
	b = append(b, e.localIP...)
	b = append(b, ">;tag="...)
	b = append(b, e.tagBase...)
	b = append(b, '-')
	b = strconv.AppendInt(b, n, 10)
	return append(b, "\r\n"...)
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

// outOfDialog starts a request of call c that opens a transaction outside a
// dialog, to the Request-URI: start line, Via, Max-Forwards, From, To,
// Call-ID, CSeq.
func (e *endpoint) outOfDialog(b []byte, method string, c *call) []byte {
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, c.ruri...)
	b = append(b, " SIP/2.0\r\n"...)
	// A request sent again with credentials is a new transaction: its
	// branch carries its CSeq.
	b = e.via(b, c.n, c.cseq)
	b = append(b, "Max-Forwards: 70\r\n"...)
	b = e.fromHdr(b, c.fromUser(), c.n)
	b = append(b, "To: <"...)
	b = append(b, c.ruri...)
	b = append(b, ">\r\nCall-ID: "...)
	b = append(b, c.callID...)
	b = append(b, "\r\n"...)
	b = append(b, c.auth...)
	return appendCSeq(b, c.cseq, method)
}

// inDialog starts a request within call c's dialog: to the remote target,
// along the reversed route set, with the dialog's To.
func (e *endpoint) inDialog(b []byte, method string, c *call, branch uint32) []byte {
	b = append(b, method...)
	b = append(b, ' ')
	b = append(b, c.target...)
	b = append(b, " SIP/2.0\r\n"...)
	b = e.via(b, c.n, branch)
	for i := len(c.routes) - 1; i >= 0; i-- {
		b = appendHdr(b, "Route", c.routes[i])
	}
	b = append(b, "Max-Forwards: 70\r\n"...)
	b = e.fromHdr(b, c.fromUser(), c.n)
	b = appendHdr(b, "To", c.to)
	b = appendHdr(b, "Call-ID", []byte(c.callID))
	return appendCSeq(b, c.cseq, method)
}

// invite builds the initial INVITE of call n, the same shape as SIPp's uac.
func (e *endpoint) invite(b []byte, c *call) []byte {
	b = e.outOfDialog(b, "INVITE", c)
	b = e.contactHdr(b)
	b = append(b, "Subject: Performance Test\r\n"...)
	return appendBody(b, "application/sdp", e.sdp)
}

// ack builds the ACK for the INVITE's final response. For a 2xx it is a new
// transaction to the remote target along the route set; for a failure it
// reuses the INVITE's branch and Request-URI (RFC 3261 17.1.1.3).
func (e *endpoint) ack(b []byte, c *call, twoxx bool) []byte {
	if twoxx {
		return appendBody(e.inDialog(b, "ACK", c, 2), "", nil)
	}
	b = append(b, "ACK "...)
	b = append(b, c.ruri...)
	b = append(b, " SIP/2.0\r\n"...)
	b = e.via(b, c.n, c.cseq)
	b = append(b, "Max-Forwards: 70\r\n"...)
	b = e.fromHdr(b, c.fromUser(), c.n)
	b = appendHdr(b, "To", c.to)
	b = appendHdr(b, "Call-ID", []byte(c.callID))
	b = appendCSeq(b, c.cseq, "ACK")
	return appendBody(b, "", nil)
}

func (e *endpoint) bye(b []byte, c *call) []byte {
	return appendBody(e.inDialog(b, "BYE", c, 3), "", nil)
}

// register builds a REGISTER for user; a refresh reuses its Call-ID with a
// higher CSeq, as RFC 3261 10.2.4 asks.
func (e *endpoint) register(b []byte, c *call, user string, expires int) []byte {
	b = append(b, "REGISTER "...)
	b = append(b, c.ruri...)
	b = append(b, " SIP/2.0\r\n"...)
	b = e.via(b, c.n, c.cseq)
	b = append(b, "Max-Forwards: 70\r\n"...)
	aor := "<sip:" + user + "@" + e.remote + ">"
	b = append(b, "From: "...)
	b = append(b, aor...)
	b = append(b, ";tag="...)
	// The tag is the Call-ID's unique part: a tag is a token, and the
	// Call-ID's "@" is not a token character.
	tag, _, _ := strings.Cut(c.callID, "@")
	b = append(b, tag...)
	b = append(b, "\r\nTo: "...)
	b = append(b, aor...)
	b = append(b, "\r\nCall-ID: "...)
	b = append(b, c.callID...)
	b = append(b, "\r\n"...)
	b = appendCSeq(b, c.cseq, "REGISTER")
	b = append(b, c.auth...)
	b = append(b, "Contact: <sip:"...)
	b = append(b, user...)
	b = append(b, '@')
	b = append(b, e.local...)
	b = append(b, e.uriParam...)
	b = append(b, ">\r\nExpires: "...)
	b = strconv.AppendInt(b, int64(expires), 10)
	b = append(b, "\r\n"...)
	return appendBody(b, "", nil)
}

func (e *endpoint) options(b []byte, c *call) []byte {
	b = e.outOfDialog(b, "OPTIONS", c)
	b = append(b, "Accept: application/sdp\r\n"...)
	return appendBody(b, "", nil)
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
