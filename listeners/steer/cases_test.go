package steer

import (
	"strings"
	"testing"
)

// The datagrams of the named cases, SIPp's wording.
const (
	sippCallID = "1-12550@127.0.0.1"

	sippInvite = "INVITE sip:service@127.0.0.1:47170 SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:47171;branch=z9hG4bK-12550-1-0\r\n" +
		"From: sipp <sip:sipp@127.0.0.1:47171>;tag=12550SIPpTag001\r\n" +
		"To: service <sip:service@127.0.0.1:47170>\r\n" +
		"Call-ID: " + sippCallID + "\r\n" +
		"CSeq: 1 INVITE\r\n" +
		"Contact: sip:sipp@127.0.0.1:47171\r\n" +
		"Max-Forwards: 70\r\n" +
		"Subject: Performance Test\r\n" +
		"Content-Type: application/sdp\r\n" +
		"Content-Length:   129\r\n" +
		"\r\n" +
		sdp

	sdp = "v=0\r\n" +
		"o=user1 53655765 2353687637 IN IP4 127.0.0.1\r\n" +
		"s=-\r\n" +
		"c=IN IP4 127.0.0.1\r\n" +
		"t=0 0\r\n" +
		"m=audio 6004 RTP/AVP 0\r\n" +
		"a=rtpmap:0 PCMU/8000\r\n"

	// response200 is the INVITE's 200 OK up to its Call-ID line, which
	// each case writes its own way.
	response200 = "SIP/2.0 200 OK\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:47171;branch=z9hG4bK-12550-1-0\r\n" +
		"From: sipp <sip:sipp@127.0.0.1:47171>;tag=12550SIPpTag001\r\n" +
		"To: service <sip:service@127.0.0.1:47170>;tag=12515SIPpTag011\r\n"
	response200Tail = "CSeq: 1 INVITE\r\n" +
		"Contact: <sip:127.0.0.1:47170;transport=UDP>\r\n" +
		"Content-Type: application/sdp\r\n" +
		"Content-Length:   129\r\n" +
		"\r\n" + sdp

	options = "OPTIONS sip:service@127.0.0.1:5060 SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5061;branch=z9hG4bK-1\r\n" +
		"From: <sip:probe@127.0.0.1>;tag=1\r\n" +
		"To: <sip:service@127.0.0.1>\r\n"

	longPrefix = "0123456789abcdefghijklmnopqrstuvwxyz" // longer than MaxHashed
)

type namedCase struct {
	name    string
	payload string
	want    string // the hashed value Locate must find; "" for the door
	// sameAs names a case that must reach the same socket (same call).
	sameAs string
}

// padTo returns an OPTIONS whose Call-ID line's '\n' is at offset pos.
func padTo(pos int, callID string) string {
	head := "OPTIONS sip:service@127.0.0.1 SIP/2.0\r\nX-Pad: "
	n := pos - len(head) - 1 // the '\r' before the '\n'
	return head + strings.Repeat("a", n) + "\r\nCall-ID: " + callID + "\r\n\r\n"
}

func namedCases() []namedCase {
	return []namedCase{
		{name: "invite", payload: sippInvite, want: sippCallID},
		{name: "200 compact", payload: response200 + "i:" + sippCallID + "\r\n" + response200Tail, want: sippCallID, sameAs: "invite"},
		{name: "200 compact upper", payload: response200 + "I: " + sippCallID + "\r\n" + response200Tail, want: sippCallID, sameAs: "invite"},
		{name: "200 two spaces", payload: response200 + "Call-ID:  " + sippCallID + "\r\n" + response200Tail, want: sippCallID, sameAs: "invite"},
		{name: "200 tab", payload: response200 + "Call-ID:\t" + sippCallID + "\r\n" + response200Tail, want: sippCallID, sameAs: "invite"},
		{name: "bare LF", payload: strings.ReplaceAll(sippInvite, "\r\n", "\n"), want: sippCallID, sameAs: "invite"},
		{name: "lower case", payload: options + "call-id: lower-7@host\r\n\r\n", want: "lower-7@host"},
		{name: "upper case", payload: options + "CALL-ID: lower-7@host\r\n\r\n", want: "lower-7@host", sameAs: "lower case"},
		{name: "call-info first", payload: options + "Call-Info: <http://www.example.com/alice/photo.jpg>;purpose=icon\r\nCall-ID: info-1@host\r\n\r\n"},
		{name: "no call-id", payload: options + "Content-Length: 0\r\n\r\n"},
		{name: "space before colon", payload: options + "Call-ID : sp-1@host\r\n\r\n"},
		{name: "three spaces", payload: options + "Call-ID:   sp-1@host\r\n\r\n"},
		{name: "empty value", payload: options + "Call-ID:\r\n\r\n"},
		{name: "compact control byte", payload: options + "i\x1asp-1@host\r\nCall-ID: sp-1@host\r\n\r\n"},
		{name: "first line", payload: "Call-ID: first@host\r\n\r\n"},
		{name: "at window", payload: padTo(Window, "window-1@host")},
		{name: "at window-1", payload: padTo(Window-1, "window-1@host"), want: "window-1@host"},
		{name: "keepalive", payload: "\r\n\r\n"},
		{name: "empty datagram", payload: ""},
		{name: "long 1", payload: options + "Call-ID: " + longPrefix + "-tail-one@host\r\n\r\n", want: longPrefix[:MaxHashed]},
		{name: "long 2", payload: options + "Call-ID: " + longPrefix + "-2@other\r\n\r\n", want: longPrefix[:MaxHashed], sameAs: "long 1"},
		{name: "value to the end", payload: options + "Call-ID: end-1@host"},
		{name: "long value to the end", payload: options + "Call-ID: " + longPrefix, want: longPrefix[:MaxHashed], sameAs: "long 1"},
		{name: "body names another", payload: strings.Replace(sippInvite, "a=rtpmap", "Call-ID: body-2@host\r\na=rtpmap", 1), want: sippCallID, sameAs: "invite"},
	}
}

// injective maps bucket i to socket i+1, so a program's return value names
// the bucket it computed (0: the door).
func injective() *Table {
	var t Table
	for i := range t {
		t[i] = uint8(i + 1)
	}
	return &t
}

// predict is where the program sends payload, by Locate.
func predict(t *Table, payload []byte) int {
	v, ok := Locate(payload)
	if !ok {
		return 0
	}
	return int(t[Bucket(v)])
}

func TestLocateCases(t *testing.T) {
	prog := Program(injective())
	for _, c := range namedCases() {
		t.Run(c.name, func(t *testing.T) {
			v, ok := Locate([]byte(c.payload))
			if c.want == "" {
				if ok {
					t.Fatalf("Locate = %q, want the door", v)
				}
			} else if !ok || string(v) != c.want {
				t.Fatalf("Locate = %q, %v, want %q", v, ok, c.want)
			}
			got, err := run(prog, []byte(c.payload))
			if err != nil {
				t.Fatal(err)
			}
			if want := predict(injective(), []byte(c.payload)); int(got) != want {
				t.Fatalf("program returns %d, Locate predicts %d", got, want)
			}
		})
	}
}

func TestHash(t *testing.T) {
	// h = h*31 + b, as Java's String.hashCode: "abc" = 96354.
	if h := Hash([]byte("abc")); h != 96354 {
		t.Fatalf("Hash(abc) = %d", h)
	}
	if Hash([]byte(longPrefix)) != Hash([]byte(longPrefix[:MaxHashed])) {
		t.Fatal("Hash reads past MaxHashed")
	}
	if Hash(nil) != 0 || Bucket([]byte("abc")) != int(uint32(96354*0x9E3779B9%(1<<32))>>26) {
		t.Fatal("Bucket")
	}
}

// TestProgramSize: the program fits BPF_MAXINSNS whatever the table, and
// Window is the widest scan that does.
func TestProgramSize(t *testing.T) {
	var zero, full Table
	for i := range full {
		full[i] = 255
	}
	n := len(Program(&zero))
	if n != len(Program(&full)) {
		t.Fatal("the program's length depends on the table")
	}
	if n > 4096 {
		t.Fatalf("%d instructions, over BPF_MAXINSNS", n)
	}
	for _, w := range []int{1, positionsPerHop, positionsPerHop + 1, Window} {
		if err := checkMemory(program(&full, w)); err != nil {
			t.Fatalf("window %d: %v", w, err)
		}
	}
	if wider := len(program(&full, Window+1)); wider <= 4096 {
		t.Fatalf("Window could be %d (%d instructions)", Window+1, wider)
	}
	t.Logf("%d instructions, Window %d", n, Window)
}
