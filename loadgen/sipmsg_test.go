package loadgen

import (
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/sipstream"
)

const resp200 = "SIP/2.0 200 OK\r\n" +
	"v: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK-1\r\n" +
	"Via: SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK-proxy\r\n" +
	"Record-Route: <sip:10.0.0.9;lr>\r\n" +
	"Record-Route: <sip:10.0.0.8;lr>\r\n" +
	"f: <sip:a@h>;tag=abc\r\n" +
	"To: \"Bob\" <sip:b@h;x=1>\r\n ;tag=xyz\r\n" +
	"i: 7-run@127.0.0.1\r\n" +
	"CSeq: 1 INVITE\r\n" +
	"m: <sip:bob@10.0.0.2:5062>;expires=60\r\n" +
	"l: 3\r\n\r\nabc"

func TestScan(t *testing.T) {
	t.Parallel()
	var m msg
	if err := m.scan([]byte(resp200)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ name, want, have string }{
		{"status", "200", strconv.Itoa(m.status)},
		{"callID", "7-run@127.0.0.1", string(m.callID)},
		{"cseqM", "INVITE", string(m.cseqM)},
		{"cseqNum", "1", strconv.Itoa(int(m.cseqNum))},
		{"toTag", "xyz", string(m.toTag)},
		{"to (folded)", "\"Bob\" <sip:b@h;x=1>\r\n ;tag=xyz", string(m.to)},
		{"contact", "sip:bob@10.0.0.2:5062", string(m.contact)},
		{"vias", "2", strconv.Itoa(len(m.vias))},
		{"rrs", "<sip:10.0.0.9;lr>|<sip:10.0.0.8;lr>", string(m.rrs[0]) + "|" + string(m.rrs[1])},
		{"body", "abc", string(m.body)},
	} {
		if tc.want != tc.have {
			t.Errorf("%s: want %q, have %q", tc.name, tc.want, tc.have)
		}
	}
}

func TestScanErrors(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ in, err string }{
		{"", "too short"},
		{"SIP/2.0 2x0 OK\r\n\r\n", "line 1: bad status code"},
		{"SIP/2.0 99 OK\r\n\r\n", "line 1: bad status"},
		{"INVITE sip:a@b\r\n\r\n", "line 1: bad request line"},
		{"OPTIONS sip:a@b SIP/2.0\r\nCall-ID: x\r\nnocolon\r\n\r\n", "line 3: header without a colon"},
		{"OPTIONS sip:a@b SIP/2.0\r\nCSeq: 1 OPTIONS\r\n\r\n", "no Call-ID"},
		{"OPTIONS sip:a@b SIP/2.0\r\nCall-ID: x\r\nCSeq: one OPTIONS\r\n\r\n", "line 3: no valid CSeq"},
		{"OPTIONS sip:a@b SIP/2.0\r\nCall-ID: x\r\n\r\n", "no valid CSeq"},
	} {
		var m msg
		err := m.scan([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.err) {
			t.Errorf("%q: want error with %q, have %v", tc.in, tc.err, err)
		}
	}
}

// A response sipload builds must scan back to what it said: the request's
// Via, a To tag, our Contact.
func TestBuildScansBack(t *testing.T) {
	t.Parallel()
	e := newEndpoint("127.0.0.1", 5070, "127.0.0.1:5060", "UDP", "service", "run")
	var m msg
	inv := []byte("INVITE sip:service@127.0.0.1:5070 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bK-1\r\n" +
		"From: <sip:a@h>;tag=1\r\nTo: <sip:service@h>\r\nCall-ID: 42\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n")
	if err := m.scan(inv); err != nil {
		t.Fatalf("invite: %v", err)
	}
	var resp msg
	r := e.response(nil, &m, 200, "OK", "t1", true, "", e.sdp)
	if err := resp.scan(r); err != nil {
		t.Fatalf("response: %v\n%s", err, r)
	}
	if resp.status != 200 || string(resp.toTag) != "t1" || len(resp.vias) != 1 || string(resp.contact) != "sip:sipload@127.0.0.1:5070" || len(resp.body) != len(e.sdp) {
		t.Errorf("response: want 200 tag t1, one Via, contact, body, have %d %q %d %q %d", resp.status, resp.toTag, len(resp.vias), resp.contact, len(resp.body))
	}
}

func FuzzScan(f *testing.F) {
	f.Add([]byte(resp200))
	f.Add([]byte("INVITE sip:a@b SIP/2.0\r\nCall-ID: x\r\nCSeq: 1 INVITE\r\n\r\n"))
	f.Add([]byte("SIP/2.0 100 Trying\r\n\tx\r\n"))
	f.Fuzz(func(t *testing.T, b []byte) {
		var m msg
		_ = m.scan(b)
		fr := sipstream.Framer{MaxHeader: maxStreamHeader, MaxBody: maxStreamBody}
		_, _, _ = fr.Next(b)
	})
}

func TestHistQuantile(t *testing.T) {
	t.Parallel()
	var h hist
	if have := h.quantile(.5); have != 0 {
		t.Errorf("empty: want 0, have %v", have)
	}
	for i := 1; i <= 1000; i++ {
		h.add(time.Duration(i) * time.Millisecond)
	}
	for _, tc := range []struct {
		q    float64
		want time.Duration
	}{{.5, 500 * time.Millisecond}, {.9, 900 * time.Millisecond}, {.99, 990 * time.Millisecond}} {
		have := h.quantile(tc.q)
		// Buckets are within 1/32 of their value.
		if have < tc.want || have > tc.want+tc.want/32 {
			t.Errorf("q%v: want %v (+3%%), have %v", tc.q, tc.want, have)
		}
	}
	for us := 0; us < 1<<20; us = us*3/2 + 1 {
		d := time.Duration(us) * time.Microsecond
		if v := histValue(histIndex(d)); v < d || v > d+d/32+time.Microsecond {
			t.Fatalf("%v: want bucket bound within 3%%, have %v", d, v)
		}
	}
}
