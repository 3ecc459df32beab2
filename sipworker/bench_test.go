package sipworker

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/pool"
)

// BenchmarkCall measures one proxied call through the handler with the
// built-in script: parse and handle INVITE, 180, 200, ACK, BYE and its 200
// (six messages in, eight out, with record-routing), then the end of its
// transactions. Allocations and bytes are per call. The peers are real UDP
// sockets that nobody reads.
func BenchmarkCall(b *testing.B) {
	proxySock, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	uacSock, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	uasSock, _ := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	for _, s := range []*net.UDPConn{proxySock, uacSock, uasSock} {
		defer s.Close()
	}
	pa := proxySock.LocalAddr().(*net.UDPAddr).AddrPort()
	uac := uacSock.LocalAddr().(*net.UDPAddr).AddrPort()
	uas := uasSock.LocalAddr().(*net.UDPAddr).AddrPort()
	w, err := NewWorker(Options{Script: config.Default().Script, Sockets: []net.PacketConn{proxySock}})
	if err != nil {
		b.Fatal(err)
	}
	crlf := func(s string) []byte { return []byte(strings.ReplaceAll(s, "\n", "\r\n")) }
	ruri := "sip:bob@" + uas.String()
	rr := "<sip:" + pa.String() + ";lr>"
	msg := func(from netip.AddrPort, data []byte) {
		w.HandleMessage(&pool.Message{Socket: 0, From: from, Data: data})
	}
	lastBranch := func() string { return w.branchPrefix + strconv.FormatUint(w.branchSeq, 36) }
	reply := func(code int, reason, branch, callID string, cseq int, method string) []byte {
		return crlf(fmt.Sprintf(`SIP/2.0 %d %s
Via: SIP/2.0/UDP %s;branch=%s
Via: SIP/2.0/UDP %s;branch=z9hG4bK-%s;rport=%d;received=127.0.0.1
Record-Route: %s
From: <sip:alice@example.com>;tag=alice-tag
To: <%s>;tag=bob-tag
Call-ID: %s
CSeq: %d %s
Contact: <%s>
Content-Length: 0

`, code, reason, pa, branch, uac, callID, uac.Port(), rr, ruri, callID, cseq, method, ruri))
	}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		callID := "bench-" + strconv.Itoa(i)
		msg(uac, crlf(invite(pa, uac, ruri, callID, "z9hG4bK-"+callID, 70)))
		br := lastBranch()
		msg(uas, reply(180, "Ringing", br, callID, 1, "INVITE"))
		msg(uas, reply(200, "OK", br, callID, 1, "INVITE"))
		msg(uac, crlf(inDialog("ACK", ruri, uac, "z9hG4bK-a"+callID, callID, 1, "bob-tag", []string{rr})))
		msg(uac, crlf(inDialog("BYE", ruri, uac, "z9hG4bK-"+callID, callID, 2, "bob-tag", []string{rr})))
		msg(uas, reply(200, "OK", lastBranch(), callID, 2, "BYE"))
		w.Tick(time.Now().Add(time.Hour))
	}
	if w.Held() != 0 {
		b.Fatalf("held after the calls: want %v, have %v", 0, w.Held())
	}
	if w.Stats.Malformed != 0 || w.Stats.Requests != 3*uint64(i) {
		b.Fatalf("requests: want %v, have %+v", 3*i, w.Stats)
	}
}

// BenchmarkParseInvite is the parser's share of the above.
func BenchmarkParseInvite(b *testing.B) {
	w, _ := NewWorker(Options{Script: config.Default().Script})
	data := []byte(strings.ReplaceAll(fixture, "\n", "\r\n"))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := w.parser.ParseSIP(data); err != nil {
			b.Fatal(err)
		}
	}
}
