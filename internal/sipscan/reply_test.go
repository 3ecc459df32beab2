package sipscan

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/emiago/sipgo/sip"
)

// requestFiles are the requests a reply can be built for: every stored
// request except ACK, which is never answered.
func requestFiles(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, glob := range []string{"testdata/msgs/*.sip", "testdata/rfc4475/valid/*.dat", "testdata/rfc4475/invalid/*.dat"} {
		files, err := filepath.Glob(glob)
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			b := readMsg(t, strings.TrimPrefix(filepath.ToSlash(f), "testdata/"))
			var m Msg
			if Scan(b, &m) == nil && m.IsRequest && m.Method != Ack {
				out = append(out, f)
			}
		}
	}
	if len(out) < 30 {
		t.Fatalf("want at least 30 requests, have %d", len(out))
	}
	return out
}

func viaBranches(t *testing.T, msg sip.Message) []string {
	t.Helper()
	var out []string
	for _, h := range msg.GetHeaders("Via") {
		via, ok := h.(*sip.ViaHeader)
		if !ok {
			t.Fatalf("want *sip.ViaHeader, have %T", h)
		}
		branch, _ := via.Params.Get("branch")
		out = append(out, via.Host+" "+branch)
	}
	return out
}

// TestAppendReplyParsesWithSipgo checks every reply with an independent
// parser: status, Via list, Call-ID, CSeq and From as in the request, and a
// To tag.
func TestAppendReplyParsesWithSipgo(t *testing.T) {
	t.Parallel()
	for _, f := range requestFiles(t) {
		t.Run(f, func(t *testing.T) {
			b := readMsg(t, strings.TrimPrefix(filepath.ToSlash(f), "testdata/"))
			var m Msg
			if err := Scan(b, &m); err != nil {
				t.Fatal(err)
			}
			out := AppendReply(nil, b, &m, 503, "", 7)
			if len(out) == 0 {
				t.Fatal("want a reply, have none")
			}
			if n, crlfs := bytes.Count(out, []byte("\n")), bytes.Count(out, []byte("\r\n")); n != crlfs {
				t.Errorf("want CRLF line ends only, have %d LF and %d CRLF", n, crlfs)
			}
			msg, err := sip.ParseMessage(out)
			if err != nil {
				t.Fatalf("sipgo cannot parse the reply: %v\n%s", err, out)
			}
			res, ok := msg.(*sip.Response)
			if !ok {
				t.Fatalf("want a response, have %T", msg)
			}
			if res.StatusCode != 503 || res.Reason != "Service Unavailable" {
				t.Errorf("want 503 Service Unavailable, have %d %s", res.StatusCode, res.Reason)
			}
			if have := res.CallID().Value(); have != string(m.CallID) {
				t.Errorf("Call-ID: want %v, have %v", string(m.CallID), have)
			}
			if have := res.CSeq(); have.SeqNo != m.CSeq || string(have.MethodName) != string(m.CSeqMethodBytes) {
				t.Errorf("CSeq: want %d %s, have %d %s", m.CSeq, m.CSeqMethodBytes, have.SeqNo, have.MethodName)
			}
			var r Msg
			if err := Scan(out, &r); err != nil {
				t.Fatalf("want the reply to scan, have %v", err)
			}
			if !r.HasToTag || m.HasToTag && string(r.ToTag) != string(m.ToTag) {
				t.Errorf("To tag: want the request's or a new one, have %q", r.ToTag)
			}
			// sipgo misreads LWS around "=" (RFC 4475 wsinv), so it checks
			// only the tags this package writes.
			if tag, _ := res.To().Params.Get("tag"); !m.HasToTag && tag != string(r.ToTag) {
				t.Errorf("To tag: want %q, have %q", r.ToTag, tag)
			}
			if ra := res.GetHeader("Retry-After"); ra == nil || ra.Value() != "7" {
				t.Errorf("Retry-After: want 7, have %v", ra)
			}
			if cl := res.ContentLength(); cl == nil || *cl != 0 {
				t.Errorf("Content-Length: want 0, have %v", cl)
			}
			req, err := sip.ParseMessage(b)
			if err != nil {
				// sipgo refuses some torture messages that it should take;
				// the reply was still checked above.
				t.Logf("sipgo cannot parse the request: %v", err)
				return
			}
			if want, have := viaBranches(t, req), viaBranches(t, res); strings.Join(want, ",") != strings.Join(have, ",") {
				t.Errorf("Via: want %v, have %v", want, have)
			}
			if want, have := req.From().Value(), res.From().Value(); want != have {
				t.Errorf("From: want %v, have %v", want, have)
			}
		})
	}
}

func TestAppendReplyTag(t *testing.T) {
	t.Parallel()
	b := readMsg(t, "msgs/bench_invite.sip")
	var m Msg
	if err := Scan(b, &m); err != nil {
		t.Fatal(err)
	}
	first := AppendReply(nil, b, &m, 503, "", 0)
	again := AppendReply(nil, b, &m, 503, "", 0)
	if !bytes.Equal(first, again) {
		t.Errorf("want a retransmission to get the same reply, have\n%s\nand\n%s", first, again)
	}
	var r Msg
	if err := Scan(first, &r); err != nil {
		t.Fatal(err)
	}
	if !r.HasToTag || len(r.ToTag) != 16 {
		t.Fatalf("want a 16-digit tag, have %q", r.ToTag)
	}

	other := bytes.Replace(b, []byte("6d2f8e1c3a5b7d90"), []byte("6d2f8e1c3a5b7d91"), 1)
	if err := Scan(other, &m); err != nil {
		t.Fatal(err)
	}
	var o Msg
	if err := Scan(AppendReply(nil, other, &m, 503, "", 0), &o); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(o.ToTag, r.ToTag) {
		t.Errorf("want a new transaction to get a new tag, have %s twice", r.ToTag)
	}

	// A 100 Trying needs no tag; an in-dialog request keeps its own.
	if err := Scan(b, &m); err != nil {
		t.Fatal(err)
	}
	if err := Scan(AppendReply(nil, b, &m, 100, "", 0), &o); err != nil || o.HasToTag {
		t.Errorf("100: want no tag, have %q (%v)", o.ToTag, err)
	}
	in := readMsg(t, "msgs/reinvite.sip")
	if err := Scan(in, &m); err != nil {
		t.Fatal(err)
	}
	out := AppendReply(nil, in, &m, 503, "", 0)
	if err := Scan(out, &o); err != nil || string(o.ToTag) != "a6c85cf" {
		t.Errorf("in-dialog: want tag a6c85cf, have %q (%v)", o.ToTag, err)
	}
	if n := bytes.Count(out, []byte("tag=")); n != 2 {
		t.Errorf("want tags in From and To only, have %d", n)
	}
}

func TestAppendReplyRefuses(t *testing.T) {
	t.Parallel()
	invite := readMsg(t, "msgs/rfc3261_invite.sip")
	tests := []struct {
		name string
		req  []byte
		code int
	}{
		{"ACK", readMsg(t, "msgs/rfc3261_ack.sip"), 503},
		{"response", readMsg(t, "msgs/rfc3261_200_invite.sip"), 503},
		{"code 99", invite, 99},
		{"code 700", invite, 700},
		{"no Call-ID", bytes.Replace(invite, []byte("Call-ID:"), []byte("X-Call-ID:"), 1), 400},
		{"no Via", bytes.Replace(invite, []byte("Via:"), []byte("X-Via:"), 1), 400},
		{"no start line", []byte("garbage"), 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m Msg
			_ = Scan(tt.req, &m)
			dst := []byte("kept")
			if out := AppendReply(dst, tt.req, &m, tt.code, "", 0); string(out) != "kept" {
				t.Errorf("want no reply, have %q", out)
			}
		})
	}
	if out := AppendReply(nil, invite, nil, 503, "", 0); out != nil {
		t.Errorf("nil Msg: want no reply, have %q", out)
	}
}

// TestAppendReplyAfterScanError answers requests the front door will not
// route: the start line was read, so a 400, 483 or 505 can still go back.
func TestAppendReplyAfterScanError(t *testing.T) {
	t.Parallel()
	tests := []struct {
		file string
		err  Error
		code int
	}{
		{"rfc4475/invalid/scalar02.dat", ErrBadCSeq, 400},
		{"rfc4475/invalid/badvers.dat", ErrBadVersion, 505},
		{"rfc4475/invalid/zeromf.dat", 0, 483},
		{"rfc4475/invalid/mismatch01.dat", ErrCSeqMethod, 400},
		{"rfc4475/invalid/ncl.dat", ErrBadContentLength, 400},
		{"rfc4475/invalid/clerr.dat", ErrBodyTruncated, 400},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			b := readMsg(t, tt.file)
			var m Msg
			if err := Scan(b, &m); err != error(tt.err) && !(tt.err == 0 && err == nil) {
				t.Fatalf("want %v, have %v", tt.err, err)
			}
			out := AppendReply(nil, b, &m, tt.code, "", 0)
			if len(out) == 0 {
				t.Fatal("want a reply, have none")
			}
			var r Msg
			if err := Scan(out, &r); tt.err != ErrBadCSeq && err != nil {
				t.Fatalf("want the reply to scan, have %v\n%s", err, out)
			}
			if r.StatusCode != tt.code && tt.err != ErrBadCSeq {
				t.Errorf("want %v, have %v", tt.code, r.StatusCode)
			}
			if !bytes.HasPrefix(out, []byte("SIP/2.0 "+itoa(tt.code)+" ")) {
				t.Errorf("want status %d, have %q", tt.code, out[:min(len(out), 20)])
			}
		})
	}
}

func itoa(n int) string { return string(appendUint(nil, uint(n))) }

func TestAppendReplyHeaders(t *testing.T) {
	t.Parallel()
	b := readMsg(t, "msgs/options_keepalive.sip")
	var m Msg
	if err := Scan(b, &m); err != nil {
		t.Fatal(err)
	}
	r := Reply{Code: 503, Reason: "Overloaded\r\nX-Injected: 1", RetryAfter: 30, Server: "sipvisor"}
	out := string(r.Append(nil, b, &m))
	for _, want := range []string{"SIP/2.0 503 Service Unavailable\r\n", "\r\nRetry-After: 30\r\n",
		"\r\nServer: sipvisor\r\n", "\r\nContent-Length: 0\r\n\r\n"} {
		if !strings.Contains(out, want) {
			t.Errorf("want %q in the reply, have\n%s", want, out)
		}
	}
	if strings.Contains(out, "Injected") || strings.Contains(out, "Accept") || strings.Contains(out, "Max-Forwards") {
		t.Errorf("want only the RFC 3261 8.2.6 headers, have\n%s", out)
	}
	if have := string(AppendReply(nil, b, &m, 483, "Hops", 0)); !strings.HasPrefix(have, "SIP/2.0 483 Hops\r\n") {
		t.Errorf("want a caller's reason kept, have %q", have[:20])
	}
	if have := string(AppendReply(nil, b, &m, 599, "", 0)); !strings.HasPrefix(have, "SIP/2.0 599 Unknown\r\n") {
		t.Errorf("want a generic reason, have %q", have[:20])
	}
}

// TestAppendReplyUnfolds answers RFC 4475's wsinv, whose Via, To and CSeq are
// folded over several lines: the reply carries each on one line.
func TestAppendReplyUnfolds(t *testing.T) {
	t.Parallel()
	b := readMsg(t, "rfc4475/valid/wsinv.dat")
	var m Msg
	if err := Scan(b, &m); err != nil {
		t.Fatal(err)
	}
	out := AppendReply(nil, b, &m, 503, "", 0)
	lines := strings.Split(strings.TrimSuffix(string(out), "\r\n\r\n"), "\r\n")
	for _, l := range lines {
		if strings.HasPrefix(l, " ") || strings.HasPrefix(l, "\t") {
			t.Errorf("want no continuation lines, have %q", l)
		}
	}
	var r Msg
	if err := Scan(out, &r); err != nil {
		t.Fatal(err)
	}
	if string(r.Branch) != "390skdjuw" || r.CSeq != 9 || string(r.ToTag) != "1918181833n" {
		t.Errorf("want branch 390skdjuw, CSeq 9, tag 1918181833n; have %s %d %s", r.Branch, r.CSeq, r.ToTag)
	}
}

// Not parallel: it measures the process's allocations.
func TestAppendReplyDoesNotAllocate(t *testing.T) {
	dst := make([]byte, 0, 4096)
	for _, f := range requestFiles(t) {
		b := readMsg(t, strings.TrimPrefix(filepath.ToSlash(f), "testdata/"))
		var m Msg
		if err := Scan(b, &m); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(20, func() { dst = AppendReply(dst[:0], b, &m, 503, "", 5) }); n != 0 {
			t.Errorf("%s: want 0 allocations, have %v", f, n)
		}
		if len(dst) > len(b)+200 {
			t.Errorf("%s: want at most %d bytes, have %d", f, len(b)+200, len(dst))
		}
	}
}

// The ACK of a stateless reply carries the reply's tag back, whatever the
// request's retransmission; an ACK of someone else's reply does not match.
func TestIsOwnAck(t *testing.T) {
	t.Parallel()
	inv := []byte("INVITE sip:bob@example.com SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bKabc\r\n" +
		"From: <sip:alice@example.com>;tag=a1\r\n" +
		"To: <sip:bob@example.com>\r\n" +
		"Call-ID: own-ack@10.0.0.1\r\n" +
		"CSeq: 7 INVITE\r\n" +
		"Content-Length: 0\r\n\r\n")
	var m Msg
	if err := Scan(inv, &m); err != nil {
		t.Fatal(err)
	}
	reply := AppendReply(nil, inv, &m, 503, "", 5)
	var r Msg
	if err := Scan(reply, &r); err != nil {
		t.Fatal(err)
	}
	ack := func(tag string, cseq string) []byte {
		return []byte("ACK sip:bob@example.com SIP/2.0\r\n" +
			"Via: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bKabc\r\n" +
			"From: <sip:alice@example.com>;tag=a1\r\n" +
			"To: <sip:bob@example.com>;tag=" + tag + "\r\n" +
			"Call-ID: own-ack@10.0.0.1\r\n" +
			"CSeq: " + cseq + " ACK\r\n" +
			"Content-Length: 0\r\n\r\n")
	}
	for _, c := range []struct {
		name string
		b    []byte
		want bool
	}{
		{"ack of our reply", ack(string(r.ToTag), "7"), true},
		{"ack with another tag", ack("0123456789abcdef", "7"), false},
		{"ack of another transaction", ack(string(r.ToTag), "8"), false},
		{"ack with a short tag", ack("abc", "7"), false},
		{"ack with a 16-byte tag, not hex", ack("0123456789abcde@", "7"), false},
		{"the invite itself", inv, false},
	} {
		var a Msg
		if err := Scan(c.b, &a); err != nil {
			t.Fatalf("%s: %v", c.name, err)
		}
		if have := IsOwnAck(&a); have != c.want {
			t.Errorf("%s: want %v, have %v", c.name, c.want, have)
		}
	}
}
