package engine

import (
	"bytes"
	"strconv"
	"strings"
	"testing"

	"github.com/emiago/sipgo/sip"
)

// writeCorpus is requests and responses with what sipgo's writers treat
// specially: IPv6 hosts with and without brackets, IPv4-mapped and zoned
// addresses, display names, parameters without values and with spaces,
// URI headers, non-SIP URIs, a wildcard Contact, several values on one
// line, compact names, unknown headers and a body.
var writeCorpus = []string{
	fixture,
	`INVITE sip:bob@[2001:db8::1]:5060;transport=tcp;lr SIP/2.0
Via: SIP/2.0/TCP [2001:db8::9]:5070;branch=z9hG4bK-6;rport=5070;received=2001:db8::9
v: SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK-a, SIP/2.0/UDP host.example.com:5062;branch=z9hG4bK-b;maddr=1.2.3.4
Record-Route: <sip:[::1]:5060;lr>, <sip:proxy.example.com;lr;transport=tcp>
Route: <sip:127.0.0.1:5060;lr>
Route: <sip:p2.example.com;lr>
Max-Forwards: 70
f: "Alice Smith" <sip:alice:secret@example.com;user=phone?subject=hi&priority=urgent>;tag=a b
t: <tel:+1-212-555-0100>
i: cid-2@[::1]
CSeq: 2147483647 INVITE
m: <sip:alice@[fe80::1%25eth0]:5070>;expires=60;+sip.instance="<urn:uuid:1>"
Contact: *
Expires: 120
c: application/sdp
User-Agent: tester/1.0
X-Empty:
Subject: spaces   inside
Content-Length: 8

v=0
o=-`,
	`REGISTER sips:example.com SIP/2.0
Via: SIP/2.0/TLS 192.0.2.1:5061;branch=z9hG4bK-r
From: <sips:alice@example.com>;tag=1
To: <sips:alice@example.com>
Call-ID: reg-1
CSeq: 1 REGISTER
Contact: <sip:alice@[::ffff:192.0.2.1]>;expires=3600
Contact: "Bob" <urn:uuid:f81d4fae-7dec-11d0-a765-00a0c91e6bf6>
Authorization: Digest username="alice", realm="example.com", nonce="n", uri="sips:example.com", response="r"
Max-Forwards: 0

`,
	`BYE sip:bob@host.example.com SIP/2.0
Via: SIP/2.0/UDP 0123456789abcdef0123456789abcdef0123456789abcdef.example.com;branch=z9hG4bK-l
Via: SIP/2.0/UDP ::1;branch=z9hG4bK-v6
From: <sip:alice@example.com>;tag=x
To: <sip:bob@example.com>;tag=y
Call-ID: bye-1
CSeq: 2 BYE

`,
	`SIP/2.0 180 Ringing
Via: SIP/2.0/UDP 10.0.0.9:5070;branch=z9hG4bK-x;rport=5070;received=10.0.0.9
Record-Route: <sip:10.0.0.1;lr>
From: "Alice" <sip:alice@example.com>;tag=ft
To: <sip:bob@example.com>;tag=bt
Call-ID: cid-1@x
CSeq: 7 INVITE
Contact: <sip:bob@10.0.0.2>
Content-Length: 0

`,
}

func crlfText(s string) []byte { return []byte(strings.ReplaceAll(s, "\n", "\r\n")) }

// checkWriteLikeSipgo parses data and, if sipgo takes it, holds this
// package's writers to sipgo's bytes: every header, the whole request with
// and without a Via line put in, and a reply built from it.
func checkWriteLikeSipgo(t *testing.T, data []byte) {
	m, err := sip.ParseMessage(data)
	if err != nil {
		return
	}
	var hdrs []sip.Header
	switch m := m.(type) {
	case *sip.Request:
		hdrs = m.Headers()
	case *sip.Response:
		hdrs = m.Headers()
	}
	for _, h := range hdrs {
		var b msgBuf
		b.appendHeader(h)
		if want := h.String(); string(b) != want {
			t.Fatalf("header: want %q, have %q", want, b)
		}
		if v, ok := appendKnownValue(nil, h); ok && string(v) != h.Value() {
			t.Fatalf("value: want %q, have %q", h.Value(), v)
		}
	}
	req, ok := m.(*sip.Request)
	if !ok {
		return
	}
	var b msgBuf
	if !b.appendRequest(req, nil) {
		t.Fatal("appendRequest refused a parsed request")
	}
	if want := req.String(); string(b) != want {
		t.Fatalf("request:\nwant %q\nhave %q", want, b)
	}
	via := []byte("Via: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bK-new\r\n")
	var bv msgBuf
	bv.appendRequest(req, via)
	at := bytes.Index(b, []byte("\r\n")) + 2
	if want := string(b[:at]) + string(via) + string(b[at:]); string(bv) != want {
		t.Fatalf("request with a Via:\nwant %q\nhave %q", want, bv)
	}
	if req.Via() == nil || req.From() == nil || req.To() == nil || req.CallID() == nil || req.CSeq() == nil {
		return
	}
	if want, have := sipgoReply(req, 180, "Ringing", "tt", []string{"X: y"}), buildReply(req, 180, "Ringing", "tt", []string{"X: y"}); string(have) != want {
		t.Fatalf("reply:\nwant %q\nhave %q", want, have)
	}
}

// sipgoReply is buildReply as it was written with sipgo's Value().
func sipgoReply(req *sip.Request, code int, reason, toTag string, extra []string) string {
	var b strings.Builder
	b.WriteString("SIP/2.0 " + strconv.Itoa(code) + " " + reason + "\r\n")
	for _, h := range req.Headers() {
		switch h := h.(type) {
		case *sip.ViaHeader, *sip.FromHeader, *sip.CallIDHeader, *sip.CSeqHeader:
			b.WriteString(h.Name() + ": " + h.Value() + "\r\n")
		case *sip.ToHeader:
			b.WriteString("To: " + h.Value())
			if _, ok := param(h.Params, "tag"); !ok && code > 100 && toTag != "" {
				b.WriteString(";tag=" + toTag)
			}
			b.WriteString("\r\n")
		}
	}
	for _, e := range extra {
		b.WriteString(e + "\r\n")
	}
	b.WriteString("Server: sipvisor\r\nContent-Length: 0\r\n\r\n")
	return b.String()
}

// TestWriteLikeSipgo: the writers relayed requests and replies go through
// write what sipgo's StringWrite would.
func TestWriteLikeSipgo(t *testing.T) {
	for _, s := range writeCorpus {
		data := crlfText(s)
		if _, err := sip.ParseMessage(data); err != nil {
			t.Fatalf("corpus message does not parse: %v\n%s", err, s)
		}
		checkWriteLikeSipgo(t, data)
	}
	// Values set by the script rather than parsed.
	req, err := sip.ParseMessage(crlfText(fixture))
	if err != nil {
		t.Fatal(err)
	}
	r := req.(*sip.Request)
	r.Recipient = sip.Uri{Host: "2001:db8::7", Port: 5080, UriParams: sip.HeaderParams{{K: "lr"}, {K: "x", V: "a b"}}}
	r.PrependHeader(&sip.RecordRouteHeader{Address: sip.Uri{Scheme: "sip", Host: "127.0.0.1", Port: 5060, UriParams: sip.HeaderParams{{K: "lr"}}}})
	r.Via().Params.Add("received", "::1")
	r.AppendHeader(sip.NewHeader("X-Added", "v"))
	r.SetBody([]byte("body"))
	var b msgBuf
	b.appendRequest(r, nil)
	if want := r.String(); string(b) != want {
		t.Fatalf("edited request:\nwant %q\nhave %q", want, b)
	}
}

func FuzzWriteLikeSipgo(f *testing.F) {
	for _, s := range writeCorpus {
		f.Add(crlfText(s))
	}
	f.Fuzz(checkWriteLikeSipgo)
}
