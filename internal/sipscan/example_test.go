package sipscan_test

import (
	"errors"
	"fmt"
	"strings"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/overload"
)

// The front door's path for one datagram when admission control says no:
// scan, see that it would start a session, answer 503 from the raw bytes.
func Example() {
	datagram := []byte(strings.ReplaceAll(`INVITE sip:bob@biloxi.com SIP/2.0
Via: SIP/2.0/UDP pc33.atlanta.com;branch=z9hG4bK776asdhds
Max-Forwards: 70
To: Bob <sip:bob@biloxi.com>
From: Alice <sip:alice@atlanta.com>;tag=1928301774
Call-ID: a84b4c76e66710@pc33.atlanta.com
CSeq: 314159 INVITE
Content-Length: 0

`, "\n", "\r\n"))

	var m sipscan.Msg
	if err := sipscan.Scan(datagram, &m); err != nil {
		fmt.Println("drop:", err)
		return
	}
	class, _ := overload.Classify(overload.RequestOf(&m))
	fmt.Println(m.Method, m.Kind(), string(m.CallID), class)

	reply := sipscan.AppendReply(make([]byte, 0, 1024), datagram, &m, 503, "", 30)
	fmt.Print(strings.ReplaceAll(string(reply), "\r\n", "\n"))
	// Output:
	// INVITE call a84b4c76e66710@pc33.atlanta.com new_session
	// SIP/2.0 503 Service Unavailable
	// Via: SIP/2.0/UDP pc33.atlanta.com;branch=z9hG4bK776asdhds
	// To: Bob <sip:bob@biloxi.com>;tag=818c4362f9f154bb
	// From: Alice <sip:alice@atlanta.com>;tag=1928301774
	// Call-ID: a84b4c76e66710@pc33.atlanta.com
	// CSeq: 314159 INVITE
	// Retry-After: 30
	// Content-Length: 0
}

// Errors are small values: count them in an array, label them with String.
func ExampleError() {
	var counts [sipscan.NumErrors]int
	var m sipscan.Msg
	for _, d := range []string{"\r\n\r\n", "GET / HTTP/1.1\r\n\r\n", "INVITE sip:a@b SIP/2.0\r\n"} {
		var e sipscan.Error
		if errors.As(sipscan.Scan([]byte(d), &m), &e) {
			counts[e]++
		}
	}
	for e := sipscan.Error(1); e < sipscan.NumErrors; e++ {
		if counts[e] > 0 {
			fmt.Println(e.String(), counts[e])
		}
	}
	// Output:
	// empty 1
	// truncated 1
	// bad_start_line 1
}
