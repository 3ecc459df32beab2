package sipscan

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func readMsg(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// crlf joins lines into a message with CRLF line ends and the empty line that
// ends the headers.
func crlf(lines ...string) []byte {
	return []byte(strings.Join(lines, "\r\n") + "\r\n\r\n")
}

// summary is the part of a Msg the tables compare, with slices as strings.
type summary struct {
	IsRequest     bool
	Method        Method
	MethodBytes   string
	StatusCode    int
	CSeq          uint32
	CSeqMethod    Method
	CallID        string
	FromTag       string
	HasToTag      bool
	ToTag         string
	Branch        string
	SentBy        string
	Transport     string
	MaxForwards   int
	ContentLength int
	Expires       int
	Kind          Kind
}

func summarize(m *Msg) summary {
	return summary{
		IsRequest:     m.IsRequest,
		Method:        m.Method,
		MethodBytes:   string(m.MethodBytes),
		StatusCode:    m.StatusCode,
		CSeq:          m.CSeq,
		CSeqMethod:    m.CSeqMethod,
		CallID:        string(m.CallID),
		FromTag:       string(m.FromTag),
		HasToTag:      m.HasToTag,
		ToTag:         string(m.ToTag),
		Branch:        string(m.Branch),
		SentBy:        string(m.SentBy),
		Transport:     string(m.Transport),
		MaxForwards:   m.MaxForwards,
		ContentLength: m.ContentLength,
		Expires:       m.Expires,
		Kind:          m.Kind(),
	}
}

var messageTests = []struct {
	file string
	want summary
}{
	{"msgs/sipp_uac_invite.sip", summary{
		IsRequest: true, Method: Invite, MethodBytes: "INVITE", CSeq: 1, CSeqMethod: Invite,
		CallID: "1-12550@127.0.0.1", FromTag: "12550SIPpTag001",
		Branch: "z9hG4bK-12550-1-0", SentBy: "127.0.0.1:47171", Transport: "UDP",
		MaxForwards: 70, Expires: -1, ContentLength: 129, Kind: KindCall}},
	{"msgs/sipp_uas_180.sip", summary{
		StatusCode: 180, CSeq: 1, CSeqMethod: Invite,
		CallID: "1-12550@127.0.0.1", FromTag: "12550SIPpTag001", HasToTag: true, ToTag: "12515SIPpTag011",
		Branch: "z9hG4bK-12550-1-0", SentBy: "127.0.0.1:47171", Transport: "UDP",
		MaxForwards: -1, Expires: -1, ContentLength: 0, Kind: KindCall}},
	{"msgs/sipp_uas_200_invite.sip", summary{
		StatusCode: 200, CSeq: 1, CSeqMethod: Invite,
		CallID: "1-12550@127.0.0.1", FromTag: "12550SIPpTag001", HasToTag: true, ToTag: "12515SIPpTag011",
		Branch: "z9hG4bK-12550-1-0", SentBy: "127.0.0.1:47171", Transport: "UDP",
		MaxForwards: -1, Expires: -1, ContentLength: 129, Kind: KindCall}},
	{"msgs/sipp_uac_ack.sip", summary{
		IsRequest: true, Method: Ack, MethodBytes: "ACK", CSeq: 1, CSeqMethod: Ack,
		CallID: "1-12550@127.0.0.1", FromTag: "12550SIPpTag001", HasToTag: true, ToTag: "12515SIPpTag011",
		Branch: "z9hG4bK-12550-1-5", SentBy: "127.0.0.1:47171", Transport: "UDP",
		MaxForwards: 70, Expires: -1, ContentLength: 0}},
	{"msgs/sipp_uac_bye.sip", summary{
		IsRequest: true, Method: Bye, MethodBytes: "BYE", CSeq: 2, CSeqMethod: Bye,
		CallID: "1-12550@127.0.0.1", FromTag: "12550SIPpTag001", HasToTag: true, ToTag: "12515SIPpTag011",
		Branch: "z9hG4bK-12550-1-7", SentBy: "127.0.0.1:47171", Transport: "UDP",
		MaxForwards: 70, Expires: -1, ContentLength: 0}},
	{"msgs/sipp_uas_200_bye.sip", summary{
		StatusCode: 200, CSeq: 2, CSeqMethod: Bye,
		CallID: "1-12550@127.0.0.1", FromTag: "12550SIPpTag001", HasToTag: true, ToTag: "12515SIPpTag011",
		Branch: "z9hG4bK-12550-1-7", SentBy: "127.0.0.1:47171", Transport: "UDP",
		MaxForwards: -1, Expires: -1, ContentLength: 0}},
	{"msgs/sipp_register.sip", summary{
		IsRequest: true, Method: Register, MethodBytes: "REGISTER", CSeq: 1, CSeqMethod: Register,
		CallID: "1-4242@127.0.0.1", FromTag: "4242SIPpTag001",
		Branch: "z9hG4bK-4242-1-0", SentBy: "127.0.0.1:5061", Transport: "UDP",
		MaxForwards: 70, Expires: 3600, ContentLength: 0, Kind: KindRegistration}},
	{"msgs/rfc3261_invite.sip", summary{
		IsRequest: true, Method: Invite, MethodBytes: "INVITE", CSeq: 314159, CSeqMethod: Invite,
		CallID: "a84b4c76e66710@pc33.atlanta.com", FromTag: "1928301774",
		Branch: "z9hG4bK776asdhds", SentBy: "pc33.atlanta.com", Transport: "UDP",
		MaxForwards: 70, Expires: -1, ContentLength: 156, Kind: KindCall}},
	{"msgs/rfc3261_200_invite.sip", summary{
		StatusCode: 200, CSeq: 314159, CSeqMethod: Invite,
		CallID: "a84b4c76e66710@pc33.atlanta.com", FromTag: "1928301774", HasToTag: true, ToTag: "a6c85cf",
		Branch: "z9hG4bKnashds8", SentBy: "server10.biloxi.com", Transport: "UDP",
		MaxForwards: -1, Expires: -1, ContentLength: 139, Kind: KindCall}},
	{"msgs/rfc3261_ack.sip", summary{
		IsRequest: true, Method: Ack, MethodBytes: "ACK", CSeq: 314159, CSeqMethod: Ack,
		CallID: "a84b4c76e66710@pc33.atlanta.com", FromTag: "1928301774", HasToTag: true, ToTag: "a6c85cf",
		Branch: "z9hG4bKnashds9", SentBy: "pc33.atlanta.com", Transport: "UDP",
		MaxForwards: 70, Expires: -1, ContentLength: 0}},
	{"msgs/rfc3261_bye.sip", summary{
		IsRequest: true, Method: Bye, MethodBytes: "BYE", CSeq: 231, CSeqMethod: Bye,
		CallID: "a84b4c76e66710@pc33.atlanta.com", FromTag: "a6c85cf", HasToTag: true, ToTag: "1928301774",
		Branch: "z9hG4bKnashds10", SentBy: "192.0.2.4", Transport: "UDP",
		MaxForwards: 70, Expires: -1, ContentLength: 0}},
	{"msgs/rfc3261_register.sip", summary{
		IsRequest: true, Method: Register, MethodBytes: "REGISTER", CSeq: 1826, CSeqMethod: Register,
		CallID: "843817637684230@998sdasdh09", FromTag: "456248",
		Branch: "z9hG4bKnashds7", SentBy: "bobspc.biloxi.com:5060", Transport: "UDP",
		MaxForwards: 70, Expires: 7200, ContentLength: 0, Kind: KindRegistration}},
	{"msgs/rfc3261_cancel.sip", summary{
		IsRequest: true, Method: Cancel, MethodBytes: "CANCEL", CSeq: 314159, CSeqMethod: Cancel,
		CallID: "a84b4c76e66710@pc33.atlanta.com", FromTag: "1928301774",
		Branch: "z9hG4bK776asdhds", SentBy: "pc33.atlanta.com", Transport: "UDP",
		MaxForwards: 70, Expires: -1, ContentLength: 0}},
	{"msgs/compact_invite.sip", summary{
		IsRequest: true, Method: Invite, MethodBytes: "INVITE", CSeq: 314160, CSeqMethod: Invite,
		CallID: "compact-a84b4c76e66710@pc33.atlanta.com", FromTag: "1928301774",
		Branch: "z9hG4bKcompact1", SentBy: "pc33.atlanta.com", Transport: "UDP",
		MaxForwards: 69, Expires: -1, ContentLength: 156, Kind: KindCall}},
	{"msgs/options_keepalive.sip", summary{
		IsRequest: true, Method: Options, MethodBytes: "OPTIONS", CSeq: 1, CSeqMethod: Options,
		CallID: "opt-1@192.0.2.20", FromTag: "opt-77",
		Branch: "z9hG4bKopt1", SentBy: "192.0.2.20:5060", Transport: "UDP",
		MaxForwards: 70, Expires: -1, ContentLength: 0}},
	{"msgs/message_ood.sip", summary{
		IsRequest: true, Method: Message, MethodBytes: "MESSAGE", CSeq: 1, CSeqMethod: Message,
		CallID: "asd88asd77a@1.2.3.4", FromTag: "49583",
		Branch: "z9hG4bK776sgdkse", SentBy: "user1pc.domain.com", Transport: "TCP",
		MaxForwards: 70, Expires: -1, ContentLength: 18}},
	{"msgs/subscribe.sip", summary{
		IsRequest: true, Method: Subscribe, MethodBytes: "SUBSCRIBE", CSeq: 1, CSeqMethod: Subscribe,
		CallID: "sub-1@pc33.atlanta.com", FromTag: "sub-1",
		Branch: "z9hG4bKsub1", SentBy: "pc33.atlanta.com", Transport: "UDP",
		MaxForwards: 70, ContentLength: 0, Expires: 3600, Kind: KindSubscription}},
	{"msgs/notify_in_dialog.sip", summary{
		IsRequest: true, Method: Notify, MethodBytes: "NOTIFY", CSeq: 1, CSeqMethod: Notify,
		CallID: "sub-1@pc33.atlanta.com", FromTag: "not-9", HasToTag: true, ToTag: "sub-1",
		Branch: "z9hG4bKnot1", SentBy: "biloxi.com", Transport: "UDP",
		MaxForwards: 70, Expires: -1, ContentLength: 0, Kind: KindSubscription}},
	{"msgs/reinvite.sip", summary{
		IsRequest: true, Method: Invite, MethodBytes: "INVITE", CSeq: 314160, CSeqMethod: Invite,
		CallID: "a84b4c76e66710@pc33.atlanta.com", FromTag: "1928301774", HasToTag: true, ToTag: "a6c85cf",
		Branch: "z9hG4bKreinv", SentBy: "pc33.atlanta.com", Transport: "UDP",
		MaxForwards: 70, Expires: -1, ContentLength: 0, Kind: KindCall}},
	{"msgs/bench_invite.sip", summary{
		IsRequest: true, Method: Invite, MethodBytes: "INVITE", CSeq: 1, CSeqMethod: Invite,
		CallID: "8b4e1f0a2c3d4e5f6a7b8c9d0e1f2a3b@198.51.100.23", FromTag: "4f8a2c61",
		Branch: "z9hG4bK-524287-1---6d2f8e1c3a5b7d90", SentBy: "198.51.100.23:5060", Transport: "UDP",
		MaxForwards: 70, Expires: -1, ContentLength: 240, Kind: KindCall}},
	{"msgs/bench_200.sip", summary{
		StatusCode: 200, CSeq: 1, CSeqMethod: Invite,
		CallID: "8b4e1f0a2c3d4e5f6a7b8c9d0e1f2a3b@198.51.100.23", FromTag: "4f8a2c61", HasToTag: true, ToTag: "as1d9e22f1",
		Branch: "z9hG4bK-524287-1---6d2f8e1c3a5b7d90", SentBy: "198.51.100.23:5060", Transport: "UDP",
		MaxForwards: -1, Expires: -1, ContentLength: 0, Kind: KindCall}},
	// Tags and branches beyond RFC 3261's token, as some clients send them.
	{"msgs/lenient_invite.sip", summary{
		IsRequest: true, Method: Invite, MethodBytes: "INVITE", CSeq: 1, CSeqMethod: Invite,
		CallID: "7f1e0c2a@192.0.2.10", FromTag: "abc@host/{x}|a",
		Branch: "z9hG4bK@192.0.2.10/7f1e", SentBy: "192.0.2.10:5060", Transport: "UDP",
		MaxForwards: 70, Expires: -1, ContentLength: 0, Kind: KindCall}},
	{"msgs/lenient_bye.sip", summary{
		IsRequest: true, Method: Bye, MethodBytes: "BYE", CSeq: 2, CSeqMethod: Bye,
		CallID: "7f1e0c2a@192.0.2.10", FromTag: "<9d2e>", HasToTag: true, ToTag: "abc@host/{x}|a",
		Branch: "z9hG4bK#1$2&3^4", SentBy: "192.0.2.20:5060", Transport: "UDP",
		MaxForwards: 70, Expires: -1, ContentLength: 0}},
	// RFC 4475 3.1.1.1: folding and LWS everywhere.
	{"rfc4475/valid/wsinv.dat", summary{
		IsRequest: true, Method: Invite, MethodBytes: "INVITE", CSeq: 9, CSeqMethod: Invite,
		CallID: "wsinv.ndaksdj@192.0.2.1", FromTag: "98asjd8", HasToTag: true, ToTag: "1918181833n",
		Branch: "390skdjuw", SentBy: "192.0.2.2", Transport: "UDP",
		MaxForwards: 68, Expires: -1, ContentLength: 150, Kind: KindCall}},
	// RFC 4475 3.1.1.2: an unknown method with every token character.
	{"rfc4475/valid/intmeth.dat", summary{
		IsRequest: true, Method: OtherMethod, MethodBytes: "!interesting-Method0123456789_*+`.%indeed'~",
		CSeq: 139122385, CSeqMethod: OtherMethod,
		CallID: "intmeth.word%ZK-!.*_+'@word`~)(><:\\/\"][?}{", FromTag: "_token~1'+`*%!-.",
		Branch: "z9hG4bK-.!%66*_+`'~", SentBy: "host1.example.com", Transport: "TCP",
		MaxForwards: 255, Expires: -1, ContentLength: 0}},
	// RFC 4475 3.1.1.8: a second message after the first one's body is ignored.
	{"rfc4475/valid/dblreq.dat", summary{
		IsRequest: true, Method: Register, MethodBytes: "REGISTER", CSeq: 8, CSeqMethod: Register,
		CallID: "dblreq.0ha0isndaksdj99sdfafnl3lk233412", FromTag: "43251j3j324",
		Branch: "z9hG4bKkdjuw23492", SentBy: "192.0.2.125", Transport: "UDP",
		MaxForwards: 8, Expires: -1, ContentLength: 0, Kind: KindRegistration}},
	{"rfc4475/valid/noreason.dat", summary{
		StatusCode: 100, CSeq: 35, CSeqMethod: Invite,
		CallID: "noreason.asndj203insdf99223ndf", FromTag: "39ansfi3", HasToTag: true, ToTag: "902jndnke3",
		Branch: "z9hG4bK2398ndaoe", SentBy: "192.0.2.105", Transport: "UDP",
		MaxForwards: -1, Expires: -1, ContentLength: 0, Kind: KindCall}},
	// RFC 4475 3.1.2.11 (inv2543): an RFC 2543 request, no branch, no Max-Forwards.
	{"rfc4475/invalid/inv2543.dat", summary{
		IsRequest: true, Method: Invite, MethodBytes: "INVITE", CSeq: 56, CSeqMethod: Invite,
		CallID: "inv2543.1717@ift.client.example.com",
		SentBy: "iftgw.example.com", Transport: "UDP",
		MaxForwards: -1, Expires: -1, ContentLength: -1, Kind: KindCall}},
}

func TestScanMessages(t *testing.T) {
	t.Parallel()
	for _, tt := range messageTests {
		t.Run(tt.file, func(t *testing.T) {
			b := readMsg(t, tt.file)
			var m Msg
			if err := Scan(b, &m); err != nil {
				t.Fatalf("want no error, have %v at %d", err, m.ErrOffset)
			}
			if have := summarize(&m); have != tt.want {
				t.Errorf("want %+v,\nhave %+v", tt.want, have)
			}
			if tt.want.ContentLength >= 0 && len(m.Body) != tt.want.ContentLength {
				t.Errorf("body: want %v bytes, have %v", tt.want.ContentLength, len(m.Body))
			}
		})
	}
}

// TestScanBareLF reads every message again with bare LF line ends in the
// headers, which RFC 3261 7.5 asks receivers to tolerate.
func TestScanBareLF(t *testing.T) {
	t.Parallel()
	for _, tt := range messageTests {
		t.Run(tt.file, func(t *testing.T) {
			b := readMsg(t, tt.file)
			var m Msg
			if err := Scan(b, &m); err != nil {
				t.Fatal(err)
			}
			head := bytes.ReplaceAll(b[:m.HeaderEnd], []byte("\r\n"), []byte("\n"))
			lf := append(head, b[m.HeaderEnd:]...)
			var m2 Msg
			if err := Scan(lf, &m2); err != nil {
				t.Fatalf("want no error, have %v at %d", err, m2.ErrOffset)
			}
			if want, have := summarize(&m), summarize(&m2); want != have {
				t.Errorf("want %+v,\nhave %+v", want, have)
			}
			if !bytes.Equal(m.Body, m2.Body) {
				t.Errorf("body: want %q, have %q", m.Body, m2.Body)
			}
		})
	}
}

// TestScanRFC4475 runs the torture messages. The valid ones must scan; of the
// invalid ones, those broken where the front door looks must be refused for
// the right reason, and those only semantically wrong (unknown scheme, bad
// Date, missing From tag) pass through to the worker.
func TestScanRFC4475(t *testing.T) {
	t.Parallel()
	want := map[string]Error{
		"invalid/badaspec.dat":   ErrBadHeader,
		"invalid/badinv01.dat":   ErrBadVia,
		"invalid/badvers.dat":    ErrBadVersion,
		"invalid/bigcode.dat":    ErrBadStartLine,
		"invalid/clerr.dat":      ErrBodyTruncated,
		"invalid/insuf.dat":      ErrNoCallID,
		"invalid/ltgtruri.dat":   ErrBadStartLine,
		"invalid/lwsruri.dat":    ErrBadStartLine,
		"invalid/lwsstart.dat":   ErrBadStartLine,
		"invalid/mcl01.dat":      ErrDuplicate,
		"invalid/mismatch01.dat": ErrCSeqMethod,
		"invalid/mismatch02.dat": ErrCSeqMethod,
		"invalid/multi01.dat":    ErrDuplicate,
		"invalid/ncl.dat":        ErrBadContentLength,
		"invalid/quotbal.dat":    ErrBadHeader,
		"invalid/scalar02.dat":   ErrBadCSeq,
		"invalid/scalarlg.dat":   ErrBadCSeq,
		"invalid/test.dat":       ErrBadStartLine,
		"invalid/trws.dat":       ErrBadStartLine,
	}
	files, err := filepath.Glob("testdata/rfc4475/*/*.dat")
	if err != nil || len(files) < 40 {
		t.Fatalf("want the RFC 4475 messages, have %d files (%v)", len(files), err)
	}
	for _, f := range files {
		name := strings.TrimPrefix(filepath.ToSlash(f), "testdata/rfc4475/")
		t.Run(name, func(t *testing.T) {
			var m Msg
			err := Scan(readMsg(t, "rfc4475/"+name), &m)
			var have Error
			if err != nil && !errors.As(err, &have) {
				t.Fatalf("want an Error, have %T %v", err, err)
			}
			if have != want[name] {
				t.Errorf("want %v, have %v", want[name], have)
			}
		})
	}
}

func TestScanMalformed(t *testing.T) {
	t.Parallel()
	big := make([]byte, DefaultMaxDatagram+1)
	copy(big, readMsg(t, "msgs/rfc3261_invite.sip"))
	longLine := crlf(
		"OPTIONS sip:a@b SIP/2.0",
		"Via: SIP/2.0/UDP h;branch=z9hG4bK1",
		"X-Long: "+strings.Repeat("x", 64*1024-200),
		"Call-ID: c", "CSeq: 1 OPTIONS", "From: <sip:a@b>;tag=1", "To: <sip:b@c>")
	base := []string{
		"INVITE sip:bob@biloxi.com SIP/2.0",
		"Via: SIP/2.0/UDP pc33.atlanta.com;branch=z9hG4bK776",
		"To: Bob <sip:bob@biloxi.com>",
		"From: Alice <sip:alice@atlanta.com>;tag=1928",
		"Call-ID: a84b4c76e66710",
		"CSeq: 314159 INVITE",
	}
	with := func(extra ...string) []byte { return crlf(append(append([]string{}, base...), extra...)...) }
	without := func(prefix string) []byte {
		var ls []string
		for _, l := range base {
			if !strings.HasPrefix(l, prefix) {
				ls = append(ls, l)
			}
		}
		return crlf(ls...)
	}
	replace := func(prefix, line string) []byte {
		ls := append([]string{}, base...)
		for i, l := range ls {
			if strings.HasPrefix(l, prefix) {
				ls[i] = line
			}
		}
		return crlf(ls...)
	}

	tests := []struct {
		name string
		in   []byte
		want Error
		line int // of ErrOffset; 0 skips the check
	}{
		{"ok", with(), 0, 0},
		{"empty", nil, ErrEmpty, 0},
		{"keepalive", []byte("\r\n\r\n"), ErrEmpty, 0},
		{"garbage", []byte("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"), ErrNUL, 1},
		{"garbage without NUL", []byte("\x16\x03\x01\x02\x01\xfc\x03\x03"), ErrTruncated, 0},
		{"garbage line", []byte("\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03\r\n\r\n"), ErrNUL, 1},
		{"binary line", []byte("\xff\xfe\xfd\r\n\r\n"), ErrBadStartLine, 1},
		{"http", []byte("GET / HTTP/1.1\r\nHost: x\r\n\r\n"), ErrBadStartLine, 1},
		{"oversized datagram", big, ErrTooLong, 0},
		{"64 KiB header line", longLine, ErrTooLong, 3},
		{"start line only", []byte("INVITE sip:a@b SIP/2.0\r\n"), ErrTruncated, 0},
		{"no empty line", bytes.TrimSuffix(with(), []byte("\r\n")), ErrTruncated, 0},
		{"no Call-ID", without("Call-ID"), ErrNoCallID, 0},
		{"no CSeq", without("CSeq"), ErrNoCSeq, 0},
		{"no Via", without("Via"), ErrNoVia, 0},
		{"no From", without("From"), ErrNoFrom, 0},
		{"no To", without("To"), ErrNoTo, 0},
		{"empty Call-ID", replace("Call-ID", "Call-ID:   "), ErrBadCallID, 5},
		{"Call-ID with space", replace("Call-ID", "Call-ID: a b"), ErrBadCallID, 5},
		{"compact Call-ID any case", replace("Call-ID", "I :\t abc@def "), 0, 0},
		{"folded Call-ID", replace("Call-ID", "call-id:\r\n  abc@def"), 0, 0},
		{"two Call-IDs", with("i: other"), ErrDuplicate, 7},
		{"two Tos", with("t: <sip:x@y>"), ErrDuplicate, 7},
		{"NUL in value", replace("Call-ID", "Call-ID: a\x00b"), ErrNUL, 5},
		{"NUL in name", replace("Call-ID", "Call\x00ID: ab"), ErrNUL, 5},
		{"NUL in start line", replace("INVITE", "INVITE sip:a\x00b SIP/2.0"), ErrNUL, 1},
		{"escaped NUL in quotes", replace("To", "To: \"a\\\x00b\" <sip:bob@biloxi.com>"), 0, 0},
		{"NUL in body", append(with("Content-Length: 3"), 'a', 0, 'b'), 0, 0},
		{"header without colon", with("Foobar roobar"), ErrBadHeader, 7},
		{"lone CR", with("X-A: 1\rX-B: 2"), 0, 0},
		{"CR not ending a line", append(bytes.TrimSuffix(with(), []byte("\r\n")), '\r', 'x', '\r', '\n'), ErrBadHeader, 7},
		{"continuation first", []byte("INVITE sip:a@b SIP/2.0\r\n folded\r\n\r\n"), ErrBadHeader, 2},
		{"bad CSeq number", replace("CSeq", "CSeq: 2147483648 INVITE"), ErrBadCSeq, 6},
		{"CSeq without method", replace("CSeq", "CSeq: 1"), ErrBadCSeq, 6},
		{"CSeq without number", replace("CSeq", "CSeq: INVITE"), ErrBadCSeq, 6},
		{"CSeq folded", replace("CSeq", "CSeq: 7\r\n\tINVITE"), 0, 0},
		{"CSeq method mismatch", replace("CSeq", "CSeq: 1 BYE"), ErrCSeqMethod, 0},
		{"Max-Forwards 256", with("Max-Forwards: 256"), ErrBadMaxForwards, 7},
		{"Max-Forwards word", with("Max-Forwards: ten"), ErrBadMaxForwards, 7},
		{"Content-Length negative", with("l: -1"), ErrBadContentLength, 7},
		{"Content-Length huge", with("Content-Length: 99999999999999999999"), ErrBadContentLength, 7},
		{"body truncated", with("Content-Length: 10"), ErrBodyTruncated, 0},
		{"Via without sent-by", replace("Via", "Via: SIP/2.0/UDP"), ErrBadVia, 2},
		{"Via without transport", replace("Via", "Via: SIP/2.0 host"), ErrBadVia, 2},
		{"Via empty param", replace("Via", "Via: SIP/2.0/UDP host;;branch=z9hG4bK1"), ErrBadVia, 2},
		{"Via junk after host", replace("Via", "Via: SIP/2.0/UDP host junk"), ErrBadVia, 2},
		{"Via unclosed IPv6", replace("Via", "Via: SIP/2.0/UDP [::1;branch=z9hG4bK1"), ErrBadVia, 2},
		{"Via port", replace("Via", "Via: SIP/2.0/UDP h : 5060 ;branch=z9hG4bK1"), 0, 0},
		{"To unclosed bracket", replace("To", "To: <sip:bob@biloxi.com"), ErrBadHeader, 3},
		{"To empty brackets", replace("To", "To: <>"), ErrBadHeader, 3},
		{"To space in brackets", replace("To", "To: < sip:bob@biloxi.com>"), ErrBadHeader, 3},
		{"To empty", replace("To", "To:"), ErrBadHeader, 3},
		{"From unbalanced quote", replace("From", "From: \"Alice <sip:a@b>;tag=1"), ErrBadHeader, 4},
		{"To tag inside URI is no tag", replace("To", "To: <sip:bob@biloxi.com;tag=x>"), 0, 0},
		{"From tag with @", replace("From", "From: Alice <sip:alice@atlanta.com>;tag=abc@host"), 0, 0},
		{"From tag with /{}", replace("From", "From: <sip:alice@atlanta.com>;tag=a/{x}b"), 0, 0},
		// The workers' parser splits at the last '=' and would see no tag.
		{"From tag with =", replace("From", "From: <sip:alice@atlanta.com>;tag=a=b"), ErrBadHeader, 4},
		{"From tag with base64 padding", replace("From", "From: <sip:alice@atlanta.com>;tag=YWJj=="), ErrBadHeader, 4},
		{"From tag with <> in addr-spec", replace("From", "From: sip:alice@atlanta.com;tag=<x>"), 0, 0},
		{"From tag with high bytes", replace("From", "From: <sip:alice@atlanta.com>;tag=\xc3\xa9t\xc3\xa9"), 0, 0},
		{"From tag with space", replace("From", "From: <sip:alice@atlanta.com>;tag=ab cd"), ErrBadHeader, 4},
		{"From tag with comma", replace("From", "From: <sip:alice@atlanta.com>;tag=ab,cd"), ErrBadHeader, 4},
		{"From tag with quote", replace("From", "From: <sip:alice@atlanta.com>;tag=ab\"cd\""), ErrBadHeader, 4},
		{"From tag with tab", replace("From", "From: <sip:alice@atlanta.com>;tag=ab\tcd"), ErrBadHeader, 4},
		{"From tag with control byte", replace("From", "From: <sip:alice@atlanta.com>;tag=ab\x01cd"), ErrBadHeader, 4},
		{"From tag with DEL", replace("From", "From: <sip:alice@atlanta.com>;tag=ab\x7fcd"), ErrBadHeader, 4},
		{"From tag with NUL", replace("From", "From: <sip:alice@atlanta.com>;tag=ab\x00cd"), ErrNUL, 4},
		{"From empty tag", replace("From", "From: <sip:alice@atlanta.com>;tag="), ErrBadHeader, 4},
		{"display name with ;", replace("To", "To: Bob;x <sip:bob@biloxi.com>"), ErrBadHeader, 3},
		{"Via branch with @", replace("Via", "Via: SIP/2.0/UDP h;branch=z9hG4bK@h/1"), 0, 0},
		{"Via branch then next value", replace("Via", "Via: SIP/2.0/UDP h;branch=z9hG4bK@1,SIP/2.0/UDP h2"), 0, 0},
		{"Via branch with space", replace("Via", "Via: SIP/2.0/UDP h;branch=z9hG4bK 1"), ErrBadVia, 2},
		{"Via branch with quote", replace("Via", "Via: SIP/2.0/UDP h;branch=z9hG4bK\"1\""), ErrBadVia, 2},
		{"Via branch with control byte", replace("Via", "Via: SIP/2.0/UDP h;branch=z9hG4bK\x1b1"), ErrBadVia, 2},
		{"Via param name with @", replace("Via", "Via: SIP/2.0/UDP h;br@nch=z9hG4bK1"), ErrBadVia, 2},
		{"response bad code", []byte("SIP/2.0 20 OK\r\n\r\n"), ErrBadStartLine, 1},
		{"response code 700", []byte("SIP/2.0 700 Odd\r\n\r\n"), ErrBadStartLine, 1},
		{"response version", []byte("SIP/3.0 200 OK\r\n\r\n"), ErrBadVersion, 1},
		{"request version", replace("INVITE", "INVITE sip:a@b SIP/2.1"), ErrBadVersion, 1},
		{"request no version", replace("INVITE", "INVITE sip:a@b"), ErrBadStartLine, 1},
		{"request tab", replace("INVITE", "INVITE\tsip:a@b SIP/2.0"), ErrBadStartLine, 1},
		{"request empty method", replace("INVITE", " sip:a@b SIP/2.0"), ErrBadStartLine, 1},
		{"lower-case version", replace("INVITE", "INVITE sip:bob@biloxi.com sip/2.0"), 0, 0},
		{"leading CRLF", append([]byte("\r\n\r\n"), with()...), 0, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var m Msg
			err := Scan(tt.in, &m)
			var have Error
			if err != nil && !errors.As(err, &have) {
				t.Fatalf("want an Error, have %T %v", err, err)
			}
			if have != tt.want {
				t.Fatalf("want %v, have %v (at %d)", tt.want, have, m.ErrOffset)
			}
			if tt.line != 0 {
				if line, _ := Position(tt.in, m.ErrOffset); line != tt.line {
					t.Errorf("error line: want %v, have %v", tt.line, line)
				}
			}
		})
	}
}

func TestScanToTagCases(t *testing.T) {
	t.Parallel()
	tests := []struct {
		to     string
		hasTag bool
		tag    string
	}{
		{"To: <sip:bob@biloxi.com>", false, ""},
		{"To: <sip:bob@biloxi.com;tag=x>", false, ""},
		{"To: \"a;tag=q\" <sip:bob@biloxi.com>", false, ""},
		{"To: sip:bob@biloxi.com;tag=abc", true, "abc"},
		{"t: Bob <sip:bob@biloxi.com> ; TAG = abc ; x=1", true, "abc"},
		{"To: <sip:bob@biloxi.com>;x-tag=1;tag=2", true, "2"},
		{"To: <sip:bob@biloxi.com>;tag", false, ""},
		{"To: <sip:bob@biloxi.com>;tag=\"quoted\"", true, "\"quoted\""},
		{"To: <sip:bob@biloxi.com>;tag=abc@host", true, "abc@host"},
		{"To: <sip:bob@biloxi.com>;tag=a/b", true, "a/b"},
		{"To: <sip:bob@biloxi.com>;tag={x}", true, "{x}"},
		{"To: <sip:bob@biloxi.com>;tag=#$&^|<>", true, "#$&^|<>"},
		{"To: sip:bob@biloxi.com;tag=a<b>", true, "a<b>"},
		{"To: sip:bob@biloxi.com;x=<sip:c@d>;tag=2", true, "2"},
		{"To: <sip:bob@biloxi.com>;tag=a@b;x=1", true, "a@b"},
		{"To: <sip:bob@biloxi.com>;tag=a@b ;x=1", true, "a@b"},
		{"To: <sip:bob@biloxi.com>;tag=\"a;b\"", true, "\"a;b\""},
	}
	for _, tt := range tests {
		t.Run(tt.to, func(t *testing.T) {
			in := crlf("BYE sip:bob@biloxi.com SIP/2.0",
				"Via: SIP/2.0/UDP h;branch=z9hG4bK1",
				"From: <sip:a@b>;tag=1", tt.to, "Call-ID: c", "CSeq: 2 BYE")
			var m Msg
			if err := Scan(in, &m); err != nil {
				t.Fatal(err)
			}
			if m.HasToTag != tt.hasTag || string(m.ToTag) != tt.tag {
				t.Errorf("want %v %q, have %v %q", tt.hasTag, tt.tag, m.HasToTag, m.ToTag)
			}
		})
	}
}

// TestScanTruncatedEverywhere cuts each message at every byte: a datagram cut
// inside the headers is truncated, one cut inside the body is short of its
// Content-Length, and none may scan cleanly or panic.
func TestScanTruncatedEverywhere(t *testing.T) {
	t.Parallel()
	for _, tt := range messageTests {
		b := readMsg(t, tt.file)
		var m Msg
		if err := Scan(b, &m); err != nil {
			t.Fatal(err)
		}
		headerEnd, bodyEnd := m.HeaderEnd, m.HeaderEnd+len(m.Body)
		if m.ContentLength < 0 {
			bodyEnd = headerEnd
		}
		for n := 1; n < bodyEnd; n++ {
			want := ErrTruncated
			if n >= headerEnd {
				want = ErrBodyTruncated
			}
			if err := Scan(b[:n], &m); err != want {
				t.Fatalf("%s cut at %d: want %v, have %v", tt.file, n, want, err)
			}
		}
	}
}

// inside reports whether s is a sub-slice of b (or empty).
func inside(b, s []byte) bool {
	if len(s) == 0 {
		return true
	}
	off := cap(b) - cap(s)
	return off >= 0 && off+len(s) <= len(b) && &b[:cap(b)][off] == &s[0]
}

func TestScanAliasesInput(t *testing.T) {
	t.Parallel()
	for _, tt := range messageTests {
		b := readMsg(t, tt.file)
		var m Msg
		if err := Scan(b, &m); err != nil {
			t.Fatal(err)
		}
		for _, s := range [][]byte{m.MethodBytes, m.RequestURI, m.CSeqMethodBytes, m.CallID,
			m.FromTag, m.ToTag, m.Branch, m.SentBy, m.Transport, m.Body} {
			if !inside(b, s) {
				t.Errorf("%s: %q does not alias the input", tt.file, s)
			}
		}
	}
}

// Not parallel: it measures the process's allocations.
func TestScanDoesNotAllocate(t *testing.T) {
	var inputs [][]byte
	for _, tt := range messageTests {
		inputs = append(inputs, readMsg(t, tt.file))
	}
	inputs = append(inputs, []byte("\r\n\r\n"), []byte("SIP/3.0 200 OK\r\n\r\n"),
		[]byte("INVITE sip:a\x00b SIP/2.0\r\n\r\n"), make([]byte, DefaultMaxDatagram+1))
	var m Msg
	for _, in := range inputs {
		if n := testing.AllocsPerRun(20, func() { _ = Scan(in, &m) }); n != 0 {
			t.Errorf("%.40q: want 0 allocations, have %v", in, n)
		}
	}
}

func TestLimits(t *testing.T) {
	t.Parallel()
	b := readMsg(t, "msgs/rfc3261_invite.sip")
	tests := []struct {
		limits Limits
		want   error
	}{
		{Limits{}, nil},
		{Limits{MaxDatagram: len(b)}, nil},
		{Limits{MaxDatagram: len(b) - 1}, ErrTooLong},
		{Limits{MaxLine: 64}, nil},
		{Limits{MaxLine: 40}, ErrTooLong},
	}
	for _, tt := range tests {
		var m Msg
		if have := tt.limits.Scan(b, &m); have != tt.want {
			t.Errorf("%+v: want %v, have %v", tt.limits, tt.want, have)
		}
	}
}

func TestErrorNames(t *testing.T) {
	t.Parallel()
	names := map[string]bool{}
	for e := Error(1); e < NumErrors; e++ {
		if e.Error() == "" || e.Error() == "unknown scan error" || e.String() == "unknown" {
			t.Errorf("%d: want a text and a name, have %q %q", e, e.Error(), e.String())
		}
		if names[e.String()] {
			t.Errorf("%d: want a unique name, have %q twice", e, e.String())
		}
		names[e.String()] = true
	}
	if have := Error(0).String(); have != "none" {
		t.Errorf("want none, have %v", have)
	}
	if have := NumErrors.String(); have != "unknown" {
		t.Errorf("want unknown, have %v", have)
	}
}

func TestPosition(t *testing.T) {
	t.Parallel()
	b := []byte("ab\ncd\r\nef")
	tests := []struct{ off, line, col int }{
		{0, 1, 1}, {2, 1, 3}, {3, 2, 1}, {7, 3, 1}, {9, 3, 3}, {99, 3, 3}, {-1, 1, 1},
	}
	for _, tt := range tests {
		line, col := Position(b, tt.off)
		if line != tt.line || col != tt.col {
			t.Errorf("offset %d: want %v:%v, have %v:%v", tt.off, tt.line, tt.col, line, col)
		}
	}
}

func TestMethodAndKindNames(t *testing.T) {
	t.Parallel()
	for m := Invite; m < OtherMethod; m++ {
		if lookupMethod([]byte(m.String())) != m {
			t.Errorf("want %v to look up as itself, have %v", m, lookupMethod([]byte(m.String())))
		}
	}
	if have := lookupMethod([]byte("invite")); have != OtherMethod {
		t.Errorf("want %v, have %v", OtherMethod, have)
	}
	if have := Method(200).String(); have != "other" {
		t.Errorf("want other, have %v", have)
	}
	if have := Kind(9).String(); have != "other" {
		t.Errorf("want other, have %v", have)
	}
}
