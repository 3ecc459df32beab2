package e2e

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"
)

// peerProc is a SIPp or sipload process serving as a callee for the whole
// test, ended with it.
type peerProc struct {
	cmd *exec.Cmd
	out *syncBuffer
}

// startCallee runs a callee scenario on 127.0.0.1:port over tr (udp, tcp
// or tls): SIPp for UDP and TCP, sipload for TLS, which Debian's SIPp is
// built without. It returns once the port is bound.
func startCallee(t *testing.T, pki *testPKI, tr, scenario string, port int) *peerProc {
	t.Helper()
	args := []string{"-sf", scenario, "-i", "127.0.0.1", "-p", strconv.Itoa(port), "-t", sippTransport[tr]}
	bin := "sipp"
	if tr == "tls" {
		bin = sipploadBin
		args = append(args, "-q", "-tls_cert", pki.path("callee.pem"), "-tls_key", pki.path("callee.key"))
	} else {
		args = append(args, "-nostdin", "-buff_size", "4194304")
	}
	p := &peerProc{cmd: exec.Command(bin, args...), out: &syncBuffer{}}
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.cmd.Process.Kill()
		p.cmd.Wait()
	})
	if tr == "udp" {
		waitUDPBound(t, port)
		return p
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", "127.0.0.1:"+strconv.Itoa(port), time.Second)
		if err == nil {
			c.Close()
			return p
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s %v: not listening within 10s\n%s", bin, args, p.out.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

var sippTransport = map[string]string{"udp": "u1", "tcp": "t1", "tls": "l1"}

// runCaller runs a caller scenario over tr to target and returns the calls
// that succeeded and failed, and what the tool printed.
func runCaller(t *testing.T, pki *testPKI, tr, target string, args ...string) (ok, failed int, out string) {
	t.Helper()
	args = append(args, "-i", "127.0.0.1", "-t", sippTransport[tr], "-timeout", "25")
	if tr == "tls" {
		return runSipload(t, 40*time.Second, append(append([]string{target}, args...),
			"-tls_cert", pki.path("caller.pem"), "-tls_key", pki.path("caller.key"), "-tls_ca", pki.path("ca.pem"))...)
	}
	r := runSIPp(t, 40*time.Second, append(append([]string{target}, args...), "-p", strconv.Itoa(freePort(t)), "-timeout_error")...)
	return r.Successful, r.Failed, r.Out
}

// Calls through the registrar script for each of the nine pairs of caller
// and callee transports (UDP, TCP, TLS), with Record-Route on both sides of
// a transport change (RFC 5658): each callee registers over its own
// transport, and each pair places calls that the caller ends and calls
// that the callee ends, so in-dialog requests cross sipvisor both ways.
// SIPp plays the UDP and TCP ends; sipload plays the TLS ones.
func TestCallsAcrossTransportPairs(t *testing.T) {
	if testing.Short() {
		t.Skip("runs SIPp and sipload 27 times")
	}
	if _, err := exec.LookPath("sipp"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("sipp not installed")
		}
		t.Skip("sipp not installed (apt-get install -y sip-tester)")
	}
	pki := newTestPKI(t)
	pki.issue("server", "sipvisor", 2)
	pki.issue("callee", "tls callee", 3)
	pki.issue("caller", "tls caller", 4)
	sip, tlsPort := freePort(t), freePort(t)
	// Two TCP workers: a connection and the requests that belong with it
	// may land in different workers.
	s := startServer(t, strings.Replace(tlsConfig(pki, sip, tlsPort, ""), "tcp_workers = 1", "tcp_workers = 2", 1))
	targets := map[string]string{"udp": "127.0.0.1:" + strconv.Itoa(sip), "tcp": "127.0.0.1:" + strconv.Itoa(sip),
		"tls": "127.0.0.1:" + strconv.Itoa(tlsPort)}
	transports := []string{"udp", "tcp", "tls"}

	// bob-X answers and waits for the caller's BYE; carol-X hangs up.
	callees := map[string]*peerProc{}
	for _, tr := range transports {
		for user, sc := range map[string]string{"bob": "../loadgen/scenarios/uas.xml", "carol": "testdata/uas_bye.xml"} {
			port := freePort(t)
			callees[user+"-"+tr] = startCallee(t, pki, tr, sc, port)
			ok, failed, out := runCaller(t, pki, tr, targets[tr], "-sf", "testdata/register_transport.xml", "-s", user+"-"+tr,
				"-key", "contact_port", strconv.Itoa(port), "-key", "contact_transport", tr, "-m", "1")
			if ok != 1 || failed != 0 {
				t.Fatalf("register %s-%s over %s: have %d/%d\n%s", user, tr, tr, ok, failed, tail(out, 30))
			}
		}
	}
	// dave-udp hangs up as RFC 3261 has it: its BYE goes to the first
	// Route, sipvisor's UDP socket, not back to where the INVITE came from
	// as SIPp's does (there, a TCP worker's reply socket). A UDP worker then
	// gets it, one that holds no connection to a TCP or TLS caller.
	dave := startRouteFollowingCallee(t)
	if ok, failed, out := runCaller(t, pki, "udp", targets["udp"], "-sf", "testdata/register_transport.xml", "-s", "dave-udp",
		"-key", "contact_port", strconv.Itoa(dave.port()), "-key", "contact_transport", "udp", "-m", "1"); ok != 1 || failed != 0 {
		t.Fatalf("register dave-udp: have %d/%d\n%s", ok, failed, tail(out, 30))
	}

	t.Run("pairs", func(t *testing.T) {
		for _, from := range transports {
			for _, to := range transports {
				t.Run(from+"-to-"+to, func(t *testing.T) {
					t.Parallel()
					for _, c := range []struct{ user, scenario, who string }{
						{"bob", "../loadgen/scenarios/uac.xml", "caller"},
						{"carol", "testdata/uac_callee_bye.xml", "callee"},
					} {
						ok, failed, out := runCaller(t, pki, from, targets[from], "-sf", c.scenario, "-s", c.user+"-"+to,
							"-m", "2", "-r", "10", "-d", "50")
						t.Logf("%s → %s, BYE from the %s: %d successful, %d failed", from, to, c.who, ok, failed)
						if ok != 2 || failed != 0 {
							t.Errorf("%s caller → %s callee, BYE from the %s: want 2 calls completed, have %d successful, %d failed\n%s\ncallee:\n%s\nsipvisor:\n%s",
								from, to, c.who, ok, failed, tail(out, 40), tail(callees[c.user+"-"+to].out.String(), 20), tail(s.log.String(), 20))
						}
					}
					if to != "udp" {
						return
					}
					ok, failed, out := runCaller(t, pki, from, targets[from], "-sf", "testdata/uac_callee_bye.xml", "-s", "dave-udp",
						"-m", "2", "-r", "10")
					t.Logf("%s → udp, BYE from the callee to its Route: %d successful, %d failed", from, ok, failed)
					if ok != 2 || failed != 0 {
						t.Errorf("%s caller → udp callee, BYE from the callee to its Route: want 2 calls completed, have %d successful, %d failed\n%s\nsipvisor:\n%s",
							from, ok, failed, tail(out, 40), tail(s.log.String(), 20))
					}
				})
			}
		}
	})
	// The UDP workers that got dave's BYEs for the TCP and TLS callers
	// passed them to the TCP worker reading the caller's connection.
	if n := s.metric("sipvisor_frontdoor_requests_passed_total", `outcome="passed"`); n < 4 {
		t.Errorf("want at least 4 requests passed to the worker holding the caller's connection, have %v", n)
	}
}

// routeCallee is a UDP callee written in Go that hangs up each call after
// its ACK, sending the BYE to the first Route of the route set the INVITE
// recorded (RFC 3261 12.2.1.1), with the caller's Contact as the
// Request-URI; its responses go where the INVITE came from (RFC 3581).
type routeCallee struct {
	c *net.UDPConn
}

func (r *routeCallee) port() int { return r.c.LocalAddr().(*net.UDPAddr).Port }

func startRouteFollowingCallee(t *testing.T) *routeCallee {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	r := &routeCallee{c: c}
	done := make(chan struct{})
	t.Cleanup(func() {
		c.Close()
		<-done
	})
	go func() {
		defer close(done)
		invites := map[string]sipMsg{} // by Call-ID
		byes := map[string]string{}    // BYEs not yet answered, by Call-ID
		byeTo := map[string]*net.UDPAddr{}
		buf := make([]byte, 65536)
		for n := 0; ; n++ {
			c.SetReadDeadline(time.Now().Add(500 * time.Millisecond))
			k, from, err := c.ReadFromUDP(buf)
			if errors.Is(err, os.ErrDeadlineExceeded) {
				for id, b := range byes { // UDP: the BYE again until its answer
					c.WriteToUDP([]byte(b), byeTo[id])
				}
				continue
			}
			if err != nil {
				return
			}
			raw := string(buf[:k])
			first, _, _ := strings.Cut(raw, "\r\n")
			m := sipMsg{raw: raw, first: first, from: from}
			id := m.header("Call-ID")
			switch m.method() {
			case "INVITE":
				invites[id] = m
				resp := replyTo(m, 200, "OK", "dave")
				resp = strings.Replace(resp, "Content-Length:", "Contact: <sip:dave@"+c.LocalAddr().String()+">\r\nContent-Length:", 1)
				c.WriteToUDP([]byte(resp), from)
			case "ACK":
				inv, ok := invites[id]
				if !ok || byes[id] != "" {
					continue
				}
				var routes []string
				for _, l := range inv.lines()[1:] {
					if name, v, ok := strings.Cut(l, ":"); ok && strings.EqualFold(strings.TrimSpace(name), "Record-Route") {
						for _, r := range strings.Split(v, ",") {
							routes = append(routes, strings.TrimSpace(r))
						}
					}
				}
				if len(routes) == 0 {
					continue
				}
				hp := strings.TrimPrefix(strings.Trim(strings.SplitN(routes[0], ";", 2)[0], "<>"), "sip:")
				to, err := net.ResolveUDPAddr("udp", hp)
				if err != nil {
					continue
				}
				contact := strings.Trim(inv.header("Contact"), "<>")
				var b strings.Builder
				fmt.Fprintf(&b, "BYE %s SIP/2.0\r\nVia: SIP/2.0/UDP %s;branch=z9hG4bK-dave-%d;rport\r\n", contact, c.LocalAddr(), n)
				for _, r := range routes {
					b.WriteString("Route: " + r + "\r\n")
				}
				fmt.Fprintf(&b, "Max-Forwards: 70\r\nFrom: %s;tag=dave\r\nTo: %s\r\nCall-ID: %s\r\nCSeq: 1 BYE\r\nContent-Length: 0\r\n\r\n",
					inv.header("To"), inv.header("From"), id)
				byes[id], byeTo[id] = b.String(), to
				c.WriteToUDP([]byte(b.String()), to)
			case "":
				if strings.HasSuffix(m.header("CSeq"), "BYE") && m.status() >= 200 {
					delete(byes, id)
					delete(invites, id)
				}
			default:
				c.WriteToUDP([]byte(replyTo(m, 200, "OK", "")), from)
			}
		}
	}()
	return r
}
