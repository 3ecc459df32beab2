package engine

import (
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/location"
	"github.com/sipvisor/sipvisor/worker"
)

// TestMalformed: bad datagrams are counted and dropped, and the worker
// goes on serving.
func TestMalformed(t *testing.T) {
	t.Parallel()
	p := startProxy(t, config.DefaultText, nil)
	alice := newUA(t)
	good := invite(p.addr(), alice.addr(), "sip:nobody@"+p.addr().String(), "ok@test", "z9hG4bK-ok", 70)
	bad := []string{
		"garbage \x00\x01\x02",
		"",
		"INVITE sip:x@y SIP/2.0\r\nVia: SIP/2.0/UDP 1.2.3.4\r\n", // truncated, no blank line
		strings.Replace(good, "Call-ID: ok@test\r\n", "", 1),     // no Call-ID
		strings.Replace(good, "CSeq: 1 INVITE", "CSeq: one INVITE", 1),
		"INVITE sip:x@y SIP/2.0\r\nX-Long: " + strings.Repeat("a", 64<<10-100) + "\r\n\r\n",
		"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 9.9.9.9;branch=z9hG4bKx\r\nCall-ID: a\r\nCSeq: 1 INVITE\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:a@b>\r\n\r\n", // a reply for no one
	}
	for _, b := range bad {
		alice.send(p.addr(), b)
	}
	alice.send(p.addr(), good)
	alice.recvResponse(404)
	if s := p.stats(); s.Malformed < 5 {
		t.Fatalf("malformed: want at least %v, have %v", 5, s.Malformed)
	}
}

// FuzzHandle feeds arbitrary bytes through the whole handler: parse, script,
// transaction table. Sends go to a socket nobody reads.
func FuzzHandle(f *testing.F) {
	f.Add([]byte(strings.ReplaceAll(fixture, "\n", "\r\n")))
	f.Add([]byte("SIP/2.0 180 Ringing\r\nVia: SIP/2.0/UDP 127.0.0.1:5060;branch=z9hG4bKx\r\nVia: SIP/2.0/UDP 10.0.0.1\r\nCall-ID: a\r\nCSeq: 1 INVITE\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:a@b>\r\n\r\n"))
	f.Add([]byte("REGISTER sip:127.0.0.1 SIP/2.0\r\nVia: SIP/2.0/UDP 1.2.3.4;rport\r\nCall-ID: r\r\nCSeq: 1 REGISTER\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:a@b>\r\nContact: *\r\nExpires: 0\r\n\r\n"))
	conf := config.Default()
	sock, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		f.Fatal(err)
	}
	defer sock.Close()
	w, err := NewWorker(Options{Script: conf.Script, Sockets: []net.PacketConn{sock}, Listen: conf.Sockets})
	if err != nil {
		f.Fatal(err)
	}
	from := sock.LocalAddr().(*net.UDPAddr).AddrPort()
	f.Fuzz(func(t *testing.T, b []byte) {
		// Datagrams go to the worker's own socket, which nobody reads.
		w.HandleMessage(&worker.Message{Socket: 0, From: from, Data: b})
	})
}

const replyRouteCfg = `
route {
	t_check_trans();
	t_on_reply("quiet");
	t_relay();
}
onreply_route[quiet] {
	if ($rs == 180) drop;
	append_hf("X-Seen: $rs");
}
timer_route[tick, 1] {
	xlog("timer job ran");
}
`

// TestOnReplyRoute: t_on_reply's route sees each reply; drop stops a
// provisional one.
func TestOnReplyRoute(t *testing.T) {
	t.Parallel()
	p := startProxy(t, replyRouteCfg, nil)
	alice, bob := newUA(t), newUA(t)
	alice.send(p.addr(), invite(p.addr(), alice.addr(), "sip:bob@"+bob.addr().String(), "orr@test", "z9hG4bK-orr", 70))
	alice.recvResponse(100)
	inv, _ := bob.recvRequest(sip.INVITE)
	bob.respond(p.addr(), inv, 180, "Ringing")
	bob.respond(p.addr(), inv, 183, "Session Progress")
	res, raw := alice.recvResponse(183) // the 180 was dropped
	if headerValue(res, "X-Seen") != "183" {
		t.Fatalf("want X-Seen: 183 added by onreply_route, have:\n%s", raw)
	}

	p.do(func() { p.w.HandleJob("tick") })
	if !strings.Contains(p.logs.String(), "timer job ran") {
		t.Fatalf("timer_route did not run:\n%s", p.logs.String())
	}
}

// TestTCPDownstream relays to a next hop named with transport=tcp: the
// worker opens the connection, and the reply comes back on it.
func TestTCPDownstream(t *testing.T) {
	t.Parallel()
	p := startProxy(t, openProxyCfg(t), nil)
	alice := newUA(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	alice.send(p.addr(), invite(p.addr(), alice.addr(), "sip:bob@"+ln.Addr().String()+";transport=tcp", "tcpd@test", "z9hG4bK-tcpd", 70))
	alice.recvResponse(100)
	conn, err := ln.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	m := newStreamReader(conn).next(t)
	inv, ok := m.(*sip.Request)
	if !ok || inv.Method != sip.INVITE || inv.Via().Transport != "TCP" {
		t.Fatalf("want an INVITE with a TCP Via, have %v", m)
	}
	if rr := recordRoutes(inv); len(rr) != 2 || !strings.Contains(rr[0], "transport=tcp") {
		t.Fatalf("want double Record-Route, the TCP one on top, have %v", rr)
	}
	inv.To().Params.Add("tag", "b")
	res := sip.NewResponseFromRequest(inv, 486, "Busy Here", nil)
	conn.Write([]byte(res.String()))
	ack := newStreamReader(conn).next(t) // hop-by-hop ACK on the same connection
	if r, ok := ack.(*sip.Request); !ok || r.Method != sip.ACK {
		t.Fatalf("want the ACK of the 486, have %v", ack)
	}
	alice.recvResponse(486)
}

// TestNewUsesSupervisorStore: a worker made by New keeps registrations in
// the store behind env.Call, so they outlive it.
func TestNewUsesSupervisorStore(t *testing.T) {
	t.Parallel()
	sock, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer sock.Close()
	kept := location.NewMemory()
	cfg := filepath.Join(t.TempDir(), "sipvisor.cfg")
	if err := os.WriteFile(cfg, []byte("socket = udp:127.0.0.1:5060\nlocation_store = memory\ndomain = \"example.com\"\nroute { save(\"location\"); exit; }\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	env := &worker.Env{
		Config:      cfg,
		Sockets:     []net.PacketConn{sock},
		SocketNames: []string{"udp:" + sock.LocalAddr().String()},
		Call:        func(req []byte) ([]byte, error) { return location.Serve(kept, req), nil },
	}
	h, err := New(env)
	if err != nil {
		t.Fatal(err)
	}
	reg := testkit.Register("sip:carol@127.0.0.1", "sip:carol@127.0.0.1:5999", "127.0.0.1:5999", "n@x", 3600)
	h.HandleMessage(&worker.Message{Socket: 0, From: netip.MustParseAddrPort("127.0.0.1:5999"), Data: reg.Bytes()})
	// As worker.Run's loop does when nothing more waits to be read.
	h.(worker.TurnEnder).EndTurn()
	// Registered at this server's address, filed under its domain.
	if bs, _ := kept.List(); len(bs) != 1 || bs[0].AOR != "sip:carol@example.com" {
		t.Fatalf("want carol's binding in the supervisor's store, have %+v", bs)
	}
}

// TestOnReplyRouteForEveryReply: the unnamed onreply_route sees every
// reply to a relayed request, the ones a worker otherwise relays as they
// came included.
func TestOnReplyRouteForEveryReply(t *testing.T) {
	t.Parallel()
	p := startProxy(t, `
route {
	t_relay();
}
onreply_route {
	append_hf("X-Seen: $rs");
}
`, nil)
	alice, bob := newUA(t), newUA(t)
	alice.send(p.addr(), invite(p.addr(), alice.addr(), "sip:bob@"+bob.addr().String(), "every@test", "z9hG4bK-every", 70))
	alice.recvResponse(100)
	inv, _ := bob.recvRequest(sip.INVITE)
	for _, code := range []int{180, 200} {
		bob.respond(p.addr(), inv, code, "Whatever")
		res, raw := alice.recvResponse(code)
		if want := strconv.Itoa(code); headerValue(res, "X-Seen") != want {
			t.Fatalf("want X-Seen: %s added by onreply_route, have:\n%s", want, raw)
		}
	}
}
