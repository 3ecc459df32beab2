package registrar

import (
	"errors"
	"fmt"
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

// listenIn opens a UDP socket inside namespace ns: a socket belongs to the
// namespace of the thread that made it, for good.
func listenIn(t *testing.T, ns string, addr *net.UDPAddr) *net.UDPConn {
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
	c, lerr := net.ListenUDP("udp", addr)
	if err := unix.Setns(int(back.Fd()), unix.CLONE_NEWNET); err != nil {
		// This thread stays in the other namespace: locked, it ends with
		// the goroutine instead of running others.
		t.Fatalf("setns back: %v", err)
	}
	runtime.UnlockOSThread()
	if lerr != nil {
		t.Fatal(lerr)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

// natPhone is a phone in the home namespace: it registers with digest
// credentials and a Contact naming its private address, without rport (the
// script's force_rport has the answers follow the router's mapping), answers calls
// (180, 200 with that Contact; 200 to BYE) and OPTIONS keep-alives, and
// notes when each keep-alive came.
type natPhone struct {
	c         *net.UDPConn
	local     string // ip:port, private
	responses chan harness.Msg
	mu        sync.Mutex
	pings     []time.Time
	byes      int
}

func startPhone(t *testing.T, c *net.UDPConn) *natPhone {
	p := &natPhone{c: c, local: c.LocalAddr().String(), responses: make(chan harness.Msg, 16)}
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
			m := harness.Msg{Raw: raw, First: first, From: from}
			if m.Status() != 0 {
				p.responses <- m
				continue
			}
			contact := "Contact: <sip:alice@" + p.local + ">\r\nContent-Length: 0\r\n"
			var out []string
			switch m.Method() {
			case "INVITE":
				out = []string{harness.ReplyTo(m, 180, "Ringing", "phone"),
					strings.Replace(harness.ReplyTo(m, 200, "OK", "phone"), "Content-Length: 0\r\n", contact, 1)}
			case "BYE":
				p.mu.Lock()
				p.byes++
				p.mu.Unlock()
				out = []string{harness.ReplyTo(m, 200, "OK", "")}
			case "OPTIONS":
				p.mu.Lock()
				p.pings = append(p.pings, time.Now())
				p.mu.Unlock()
				out = []string{harness.ReplyTo(m, 200, "OK", "phone")}
			}
			for _, r := range out {
				c.WriteToUDP([]byte(r), from)
			}
		}
	}()
	return p
}

func (p *natPhone) register(t *testing.T, server *net.UDPAddr, domain, password string) {
	t.Helper()
	reg := func(cseq int, auth string) string {
		return fmt.Sprintf("REGISTER sip:%[1]s SIP/2.0\r\n"+
			"Via: SIP/2.0/UDP %[2]s;branch=z9hG4bK-natreg%[3]d\r\n"+
			"Max-Forwards: 70\r\n"+
			"From: <sip:alice@%[1]s>;tag=natphone\r\n"+
			"To: <sip:alice@%[1]s>\r\n"+
			"Call-ID: natreg@%[2]s\r\n"+
			"CSeq: %[3]d REGISTER\r\n"+
			"Contact: <sip:alice@%[2]s>\r\n"+
			"Expires: 600\r\n%[4]s"+
			"Content-Length: 0\r\n\r\n", domain, p.local, cseq, auth)
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
					t.Fatalf("REGISTER from the home namespace: want %d, have %s", code, m.First)
				}
			case <-time.After(10 * time.Second):
				t.Fatalf("REGISTER from the home namespace: no %d within 10s", code)
			}
		}
	}
	p.c.WriteToUDP([]byte(reg(1, "")), server)
	ch, err := digest.ParseChallenge(await(401).Header("WWW-Authenticate"))
	if err != nil {
		t.Fatal(err)
	}
	cr, err := digest.Digest(ch, digest.Options{Method: "REGISTER", URI: "sip:" + domain, Username: "alice", Password: password, Count: 1})
	if err != nil {
		t.Fatal(err)
	}
	p.c.WriteToUDP([]byte(reg(2, "Authorization: "+cr.String()+"\r\n")), server)
	await(200)
}

// A phone behind NAT, with the built-in config: its Contact names its
// address in the home namespace, and it is reached at the address its
// REGISTER came from (the router's), its calls completed through the
// router's mapping, and keep-alives reach it at the configured interval.
func TestPhoneBehindNAT(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("makes network namespaces and calls through them; skipped with -short")
	}
	nn := newNATNet(t)
	cfg := harness.DefaultCfg0(t)
	for old, new := range map[string]string{
		"socket = udp:127.0.0.1:0":     "socket = udp:" + nn.server + ":0",
		"nat_keepalive_interval = 30s": "nat_keepalive_interval = 1s",
	} {
		if !strings.Contains(cfg, old) {
			t.Fatalf("the built-in config has no line %q any more", old)
		}
		cfg = strings.Replace(cfg, old, new, 1)
	}
	s := harness.Start(t, cfg)
	if out, err := s.Ctl("user", "add", "alice@"+nn.server, "s3cret"); err != nil {
		t.Fatalf("ctl user add: %v: %s", err, out)
	}
	server := &net.UDPAddr{IP: net.ParseIP(nn.server), Port: s.SIPPort("udp")}

	phone := startPhone(t, listenIn(t, nn.home, &net.UDPAddr{IP: net.ParseIP(nn.phone), Port: 5060}))
	phone.register(t, server, nn.server, "s3cret")
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
}
