package testkit

import (
	"strconv"
	"strings"
)

// Request is a SIP request as a user agent sends it, for tests that need a
// well-formed message and vary a few of its fields. An empty field takes
// the default in its comment. String and Bytes write it with CRLF line
// ends and a Content-Length that fits the body.
type Request struct {
	Method      string   // "INVITE"
	URI         string   // the request-URI; "sip:bob@example.com"
	Transport   string   // of the Via; "UDP"
	Via         string   // the Via's sent-by, host:port; "127.0.0.1:5070"
	Branch      string   // "z9hG4bK-" and a token of Call-ID, CSeq and method
	Rport       bool     // asks for ;rport in the Via
	MaxForwards string   // "70"; "none" leaves the header out
	From        string   // "<sip:alice@example.com>"
	FromTag     string   // "alice-tag"
	To          string   // "<sip:bob@example.com>"
	ToTag       string   // no tag: a request outside a dialog
	CallID      string   // "call-1@test"
	CSeq        int      // 1
	Contact     string   // the whole value, e.g. "<sip:alice@127.0.0.1:5070>"; no header when empty
	Headers     []string // more header lines, "Name: value", after the others
	Body        string
}

// Invite is an INVITE of the call callID from alice at via (host:port) to
// uri, with a Contact at via.
func Invite(uri, via, callID string) Request {
	return Request{Method: "INVITE", URI: uri, To: "<" + uri + ">", Via: via, CallID: callID, Contact: "<sip:alice@" + via + ">"}
}

// Options is an OPTIONS ping of uri from via, as a load balancer's probe.
func Options(uri, via, callID string) Request {
	return Request{Method: "OPTIONS", URI: uri, To: "<" + uri + ">", Via: via, CallID: callID,
		From: "<sip:probe@" + via + ">", FromTag: "probe-tag"}
}

// Register is a REGISTER of aor (sip:user@domain) binding contact (a URI)
// for expires seconds, sent from via to the registrar of the AOR's domain.
func Register(aor, contact, via, callID string, expires int) Request {
	domain := aor
	if i := strings.IndexByte(aor, '@'); i >= 0 {
		domain = "sip:" + aor[i+1:]
	}
	return Request{Method: "REGISTER", URI: domain, From: "<" + aor + ">", FromTag: "reg-tag", To: "<" + aor + ">",
		Via: via, CallID: callID, Contact: "<" + contact + ">", Headers: []string{"Expires: " + strconv.Itoa(expires)}}
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// String is the request on the wire.
func (r Request) String() string {
	method := or(r.Method, "INVITE")
	cseq := r.CSeq
	if cseq == 0 {
		cseq = 1
	}
	callID := or(r.CallID, "call-1@test")
	branch := r.Branch
	if branch == "" {
		branch = "z9hG4bK-" + token(callID+"-"+strconv.Itoa(cseq)+"-"+method)
	}
	var b strings.Builder
	b.WriteString(method + " " + or(r.URI, "sip:bob@example.com") + " SIP/2.0\r\n")
	b.WriteString("Via: SIP/2.0/" + or(r.Transport, "UDP") + " " + or(r.Via, "127.0.0.1:5070") + ";branch=" + branch)
	if r.Rport {
		b.WriteString(";rport")
	}
	b.WriteString("\r\n")
	if mf := or(r.MaxForwards, "70"); mf != "none" {
		b.WriteString("Max-Forwards: " + mf + "\r\n")
	}
	b.WriteString("From: " + or(r.From, "<sip:alice@example.com>") + ";tag=" + or(r.FromTag, "alice-tag") + "\r\n")
	b.WriteString("To: " + or(r.To, "<sip:bob@example.com>"))
	if r.ToTag != "" {
		b.WriteString(";tag=" + r.ToTag)
	}
	b.WriteString("\r\n")
	b.WriteString("Call-ID: " + callID + "\r\n")
	b.WriteString("CSeq: " + strconv.Itoa(cseq) + " " + method + "\r\n")
	if r.Contact != "" {
		b.WriteString("Contact: " + r.Contact + "\r\n")
	}
	for _, h := range r.Headers {
		b.WriteString(h + "\r\n")
	}
	b.WriteString("Content-Length: " + strconv.Itoa(len(r.Body)) + "\r\n\r\n")
	b.WriteString(r.Body)
	return b.String()
}

// Bytes is String as a datagram's payload.
func (r Request) Bytes() []byte { return []byte(r.String()) }

// token keeps what a branch parameter may hold of s.
func token(s string) string {
	return strings.Map(func(r rune) rune {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', strings.ContainsRune("-.!%*_+`'~", r):
			return r
		}
		return '-'
	}, s)
}
