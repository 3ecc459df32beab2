package registrar

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/icholy/digest"
	"golang.org/x/sys/unix"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// natNet is a home network behind a masquerading router, made of network
// namespaces the test creates: "home" (the phone, 192.168.N.2) routes by
// "router" (192.168.N.1 inside, 172.31.N.2 outside), which masquerades
// what leaves towards the server's side, a veth in this namespace at
// 172.31.N.1, onto ports 40000 to 40999 as home routers do (never the
// phone's own port). This namespace gets an unreachable route to 192.168.N.0/24,
// so that a packet sent to the phone's private address fails here rather
// than leaving the machine. Everything is removed when the test ends.
type natNet struct {
	home, router      string // namespace names
	server, routerWAN string // 172.31.N.1 (here) and 172.31.N.2 (the router's outside)
	phone, privateNet string // 192.168.N.2 and 192.168.N.0/24
}

func newNATNet(t *testing.T) *natNet {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the NAT test makes network namespaces: it needs root")
	}
	for _, tool := range []string{"ip", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("the NAT test needs %s (Debian packages iproute2, iptables)", tool)
		}
	}
	n := 20 + os.Getpid()%200
	id := strconv.Itoa(os.Getpid() % 100000)
	nn := &natNet{
		home: "svnat-home-" + id, router: "svnat-rtr-" + id,
		server: fmt.Sprintf("172.31.%d.1", n), routerWAN: fmt.Sprintf("172.31.%d.2", n),
		phone: fmt.Sprintf("192.168.%d.2", n), privateNet: fmt.Sprintf("192.168.%d.0/24", n),
	}
	wan := "svnw" + id // this namespace's end of the router's outside link
	run := func(args ...string) error {
		out, err := exec.Command(args[0], args[1:]...).CombinedOutput()
		if err != nil {
			return fmt.Errorf("%s: %v: %s", strings.Join(args, " "), err, out)
		}
		return nil
	}
	if err := run("ip", "netns", "add", nn.router); err != nil {
		t.Skipf("ip netns unavailable here: %v", err)
	}
	t.Cleanup(func() {
		// Deleting a namespace deletes the veths in it, and their peers.
		run("ip", "netns", "del", nn.home)
		run("ip", "netns", "del", nn.router)
		run("ip", "link", "del", wan)
		run("ip", "route", "del", "unreachable", nn.privateNet)
	})
	r := []string{"ip", "netns", "exec", nn.router}
	h := []string{"ip", "netns", "exec", nn.home}
	for _, step := range [][]string{
		{"ip", "netns", "add", nn.home},
		{"ip", "link", "add", wan, "type", "veth", "peer", "name", "w1", "netns", nn.router},
		{"ip", "addr", "add", nn.server + "/24", "dev", wan},
		{"ip", "link", "set", wan, "up"},
		{"ip", "route", "add", "unreachable", nn.privateNet},
		append(r, "ip", "link", "add", "l1", "type", "veth", "peer", "name", "h0", "netns", nn.home),
		append(r, "ip", "addr", "add", nn.routerWAN+"/24", "dev", "w1"),
		append(r, "ip", "addr", "add", strings.TrimSuffix(nn.phone, ".2")+".1/24", "dev", "l1"),
		append(r, "ip", "link", "set", "lo", "up"),
		append(r, "ip", "link", "set", "w1", "up"),
		append(r, "ip", "link", "set", "l1", "up"),
		append(r, "sysctl", "-qw", "net.ipv4.ip_forward=1"),
		append(r, "iptables", "-t", "nat", "-A", "POSTROUTING", "-o", "w1", "-p", "udp", "-j", "MASQUERADE", "--to-ports", "40000-40999"),
		append(r, "iptables", "-t", "nat", "-A", "POSTROUTING", "-o", "w1", "-p", "tcp", "-j", "MASQUERADE", "--to-ports", "40000-40999"),
		append(h, "ip", "addr", "add", nn.phone+"/24", "dev", "h0"),
		append(h, "ip", "link", "set", "lo", "up"),
		append(h, "ip", "link", "set", "h0", "up"),
		append(h, "ip", "route", "add", "default", "via", strings.TrimSuffix(nn.phone, ".2")+".1"),
	} {
		if err := run(step...); err != nil {
			t.Fatalf("setting up the NAT test's namespaces: %v", err)
		}
	}
	return nn
}

// inNamespace runs fn on a thread in namespace ns: a socket belongs to
// the namespace of the thread that made it, for good.
func inNamespace(t *testing.T, ns string, fn func()) {
	t.Helper()
	runtime.LockOSThread()
	back, err := os.Open("/proc/thread-self/ns/net")
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer back.Close()
	target, err := os.Open("/var/run/netns/" + ns)
	if err != nil {
		runtime.UnlockOSThread()
		t.Fatal(err)
	}
	defer target.Close()
	if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
		runtime.UnlockOSThread()
		t.Fatalf("setns %s: %v", ns, err)
	}
	fn()
	if err := unix.Setns(int(back.Fd()), unix.CLONE_NEWNET); err != nil {
		// This thread stays in the other namespace: locked, it ends with
		// the goroutine instead of running others.
		t.Fatalf("setns back: %v", err)
	}
	runtime.UnlockOSThread()
}

// listenIn opens a UDP socket inside namespace ns.
func listenIn(t *testing.T, ns string, addr *net.UDPAddr) *net.UDPConn {
	t.Helper()
	var c *net.UDPConn
	var err error
	inNamespace(t, ns, func() { c, err = net.ListenUDP("udp", addr) })
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// dialIn opens a TCP connection from local, inside namespace ns, to
// server: through the router, which masquerades it.
func dialIn(t *testing.T, ns string, local *net.TCPAddr, server string) net.Conn {
	t.Helper()
	var c net.Conn
	var err error
	inNamespace(t, ns, func() {
		d := net.Dialer{LocalAddr: local, Timeout: 10 * time.Second}
		c, err = d.Dial("tcp", server)
	})
	if err != nil {
		t.Fatalf("connecting from the home namespace to %s: %v", server, err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// natPhone is a phone in the home namespace: it registers with digest
// credentials and a Contact naming its private address, without rport (the
// script's force_rport has the answers follow the router's mapping), answers calls
// (180, 200 with that Contact; 200 to BYE) and OPTIONS keep-alives, and
// notes when each keep-alive came. Over UDP it answers where a request
// came from; over TCP, on the connection it opened (through the router),
// which is all it has: it accepts none.
type natPhone struct {
	user      string
	proto     string // udp or tcp
	local     string // ip:port, private
	send      func(string)
	responses chan harness.Msg
	mu        sync.Mutex
	pings     []time.Time
	invites   int
	byes      int
}

// contact is the phone's Contact URI: its private address.
func (p *natPhone) contact() string {
	u := "sip:" + p.user + "@" + p.local
	if p.proto != "udp" {
		u += ";transport=" + p.proto
	}
	return u
}

// handle takes one message: a response goes to the waiting register, a
// request is answered, its answers returned.
func (p *natPhone) handle(m harness.Msg) []string {
	if m.Status() != 0 {
		p.responses <- m
		return nil
	}
	contact := "Contact: <" + p.contact() + ">\r\nContent-Length: 0\r\n"
	p.mu.Lock()
	defer p.mu.Unlock()
	switch m.Method() {
	case "INVITE":
		p.invites++
		return []string{harness.ReplyTo(m, 180, "Ringing", "phone"),
			strings.Replace(harness.ReplyTo(m, 200, "OK", "phone"), "Content-Length: 0\r\n", contact, 1)}
	case "BYE":
		p.byes++
		return []string{harness.ReplyTo(m, 200, "OK", "")}
	case "OPTIONS":
		p.pings = append(p.pings, time.Now())
		return []string{harness.ReplyTo(m, 200, "OK", "phone")}
	}
	return nil
}

func startPhone(t *testing.T, c *net.UDPConn, server *net.UDPAddr) *natPhone {
	p := &natPhone{user: "alice", proto: "udp", local: c.LocalAddr().String(), responses: make(chan harness.Msg, 16),
		send: func(m string) { c.WriteToUDP([]byte(m), server) }}
	done := make(chan struct{})
	t.Cleanup(func() { c.Close(); <-done })
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			raw := string(buf[:n])
			first, _, _ := strings.Cut(raw, "\r\n")
			for _, r := range p.handle(harness.Msg{Raw: raw, First: first, From: from}) {
				c.WriteToUDP([]byte(r), from)
			}
		}
	}()
	return p
}

// startTCPPhone is user's phone on a TCP connection c opened from the home
// namespace: it reads SIP messages framed by Content-Length (skipping the
// CRLFs of keep-alives) and writes its answers on c.
func startTCPPhone(t *testing.T, user string, c net.Conn) *natPhone {
	var wmu sync.Mutex
	write := func(m string) {
		wmu.Lock()
		defer wmu.Unlock()
		c.Write([]byte(m))
	}
	p := &natPhone{user: user, proto: "tcp", local: c.LocalAddr().String(), responses: make(chan harness.Msg, 16), send: write}
	done := make(chan struct{})
	t.Cleanup(func() { c.Close(); <-done })
	go func() {
		defer close(done)
		r := bufio.NewReader(c)
		for {
			raw, err := readStreamMsg(r)
			if err != nil {
				return
			}
			first, _, _ := strings.Cut(raw, "\r\n")
			for _, out := range p.handle(harness.Msg{Raw: raw, First: first}) {
				write(out)
			}
		}
	}()
	return p
}

// readStreamMsg reads one SIP message from a stream: the header up to its
// blank line, then Content-Length bytes of body.
func readStreamMsg(r *bufio.Reader) (string, error) {
	var head strings.Builder
	n := 0
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return "", err
		}
		if line == "\r\n" || line == "\n" {
			if head.Len() == 0 {
				continue // a keep-alive's CRLF between messages
			}
			break
		}
		head.WriteString(line)
		name, value, _ := strings.Cut(line, ":")
		if k := strings.ToLower(strings.TrimSpace(name)); k == "content-length" || k == "l" {
			n, _ = strconv.Atoi(strings.TrimSpace(value))
		}
	}
	body := make([]byte, n)
	if _, err := io.ReadFull(r, body); err != nil {
		return "", err
	}
	return head.String() + "\r\n" + string(body), nil
}

func (p *natPhone) register(t *testing.T, domain, password string) {
	t.Helper()
	reg := func(cseq int, auth string) string {
		return fmt.Sprintf("REGISTER sip:%[1]s SIP/2.0\r\n"+
			"Via: SIP/2.0/%[6]s %[2]s;branch=z9hG4bK-natreg%[3]d\r\n"+
			"Max-Forwards: 70\r\n"+
			"From: <sip:%[7]s@%[1]s>;tag=natphone\r\n"+
			"To: <sip:%[7]s@%[1]s>\r\n"+
			"Call-ID: natreg@%[2]s\r\n"+
			"CSeq: %[3]d REGISTER\r\n"+
			"Contact: <%[5]s>\r\n"+
			"Expires: 600\r\n%[4]s"+
			"Content-Length: 0\r\n\r\n", domain, p.local, cseq, auth, p.contact(), strings.ToUpper(p.proto), p.user)
	}
	await := func(code int) harness.Msg {
		t.Helper()
		for {
			select {
			case m := <-p.responses:
				if m.Status() == code {
					return m
				}
				if m.Status() >= 200 {
					t.Fatalf("REGISTER over %s from the home namespace: want %d, have %s", p.proto, code, m.First)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("REGISTER over %s from the home namespace: no %d within 10s", p.proto, code)
			}
		}
	}
	p.send(reg(1, ""))
	ch, err := digest.ParseChallenge(await(401).Header("WWW-Authenticate"))
	if err != nil {
		t.Fatal(err)
	}
	cr, err := digest.Digest(ch, digest.Options{Method: "REGISTER", URI: "sip:" + domain, Username: p.user, Password: password, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	p.send(reg(2, "Authorization: "+cr.String()+"\r\n"))
	await(200)
}

// A phone behind NAT, with the built-in config: its Contact names its
// address in the home namespace, and it is reached at the address its
// REGISTER came from (the router's), its calls completed through the
// router's mapping, and keep-alives reach it at the configured interval.
// Over TCP, a phone behind the same router is reached over the connection
// it registered on (its flow), never at its Contact.
func TestPhoneBehindNAT(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("makes network namespaces and calls through them; skipped with -short")
	}
	nn := newNATNet(t)
	cfg := harness.DefaultCfg0(t)
	for old, new := range map[string]string{
		"socket = udp:127.0.0.1:0":     "socket = udp:" + nn.server + ":0",
		"socket = tcp:127.0.0.1:0":     "socket = tcp:" + nn.server + ":0",
		"nat_keepalive_interval = 30s": "nat_keepalive_interval = 1s",
	} {
		if !strings.Contains(cfg, old) {
			t.Fatalf("the built-in config has no line %q any more", old)
		}
		cfg = strings.Replace(cfg, old, new, 1)
	}
	s := harness.Start(t, cfg)
	for _, u := range []string{"alice", "carol"} {
		if out, err := s.Ctl("user", "add", u+"@"+nn.server, "s3cret"); err != nil {
			t.Fatalf("ctl user add %s: %v: %s", u, err, out)
		}
	}
	server := &net.UDPAddr{IP: net.ParseIP(nn.server), Port: s.SIPPort("udp")}

	phone := startPhone(t, listenIn(t, nn.home, &net.UDPAddr{IP: net.ParseIP(nn.phone), Port: 5060}), server)
	phone.register(t, nn.server, "s3cret")
	bs := s.Bindings("sip:alice@" + nn.server)
	if len(bs) != 1 || !strings.Contains(bs[0].Contact, nn.phone) || !strings.HasPrefix(bs[0].Source, "sip:"+nn.routerWAN+":4") {
		t.Fatalf("want alice's private contact, recorded as reached at the router's address sip:%s:4xxxx, have %+v", nn.routerWAN, bs)
	}

	ok, failed, out := harness.RunSipload(t, 60*time.Second, server.String(), "-sn", "uac", "-s", "alice", "-i", "127.0.0.1", "-r", "5", "-m", "3")
	if ok != 3 {
		t.Fatalf("calls to alice behind NAT: want 3 of 3 completed, have %d/%d\n%s", ok, failed, out)
	}
	phone.mu.Lock()
	byes := phone.byes
	phone.mu.Unlock()
	if byes != 3 {
		t.Errorf("want the phone to have answered 3 BYEs through the router, have %d", byes)
	}

	// Keep-alives every second, counted at the phone.
	var pings []time.Time
	harness.WaitFor(t, "3 keep-alives at the phone", 20*time.Second, func() bool {
		phone.mu.Lock()
		defer phone.mu.Unlock()
		pings = append(pings[:0], phone.pings...)
		return len(pings) >= 3
	})
	if gap := pings[2].Sub(pings[0]); gap < 1500*time.Millisecond {
		t.Errorf("want keep-alives a second apart, have 3 within %v", gap)
	}

	// Over TCP: carol's phone connects from the home namespace, the router
	// masquerading the connection, and registers her private Contact;
	// fix_nated_register files the connection's far end as a URI (with
	// ;transport=tcp), which is the flow the calls take.
	tcpServer := net.JoinHostPort(nn.server, strconv.Itoa(s.SIPPort("tcp")))
	carolConn := dialIn(t, nn.home, &net.TCPAddr{IP: net.ParseIP(nn.phone), Port: 5060}, tcpServer)
	carol := startTCPPhone(t, "carol", carolConn)
	carol.register(t, nn.server, "s3cret")
	bs = s.Bindings("sip:carol@" + nn.server)
	if len(bs) != 1 || !strings.Contains(bs[0].Contact, nn.phone) || !strings.HasPrefix(bs[0].Source, "sip:"+nn.routerWAN+":4") ||
		!strings.Contains(bs[0].Source, "transport=tcp") {
		t.Fatalf("want carol's private contact, recorded as reached at the router's address sip:%s:4xxxx;transport=tcp, have %+v", nn.routerWAN, bs)
	}
	t.Logf("carol's binding: %+v", bs[0])
	ok, failed, out = harness.RunSipload(t, 60*time.Second, server.String(), "-sn", "uac", "-s", "carol", "-i", "127.0.0.1", "-r", "5", "-m", "3")
	if ok != 3 {
		t.Fatalf("calls over UDP to carol behind NAT on TCP: want 3 of 3 completed, have %d/%d\n%s", ok, failed, out)
	}
	carol.mu.Lock()
	invites, byes := carol.invites, carol.byes
	carol.mu.Unlock()
	if invites != 3 || byes != 3 {
		t.Errorf("want carol's phone to have answered 3 INVITEs and 3 BYEs on its connection, have %d and %d", invites, byes)
	}

	// Its connection gone, a call to carol is answered 480 at once (her
	// phone asked for no outbound, so no 430), not sent elsewhere: her
	// private Contact is unreachable from here by the test's route.
	carolConn.Close()
	s.AwaitMetric(0, "sipvisor_frontdoor_connections")
	ok, failed, out = harness.RunSipload(t, 60*time.Second, server.String(), "-sn", "uac", "-s", "carol", "-i", "127.0.0.1", "-m", "1")
	if ok != 0 || failed != 1 || !strings.Contains(out, "480 Temporarily Unavailable 1") {
		t.Fatalf("a call to carol, her connection gone: want it failed by 480, have %d/%d\n%s", ok, failed, out)
	}
}
