package transport

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

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// startCallee runs a callee scenario on 127.0.0.1 over tr (udp, tcp or
// tls): SIPp for UDP and TCP, sipload for TLS, which Debian's SIPp is
// built without. It returns once its port, Proc.Port, is bound.
func startCallee(t *testing.T, pki *harness.PKI, tr, scenario string) *harness.Proc {
	t.Helper()
	args := []string{"-sf", scenario, "-i", "127.0.0.1", "-t", sippTransport[tr]}
	if tr == "tls" {
		return harness.SiploadServe(t, append(args, "-q", "-tls_cert", pki.Path("callee.pem"), "-tls_key", pki.Path("callee.key"))...)
	}
	return harness.SIPpServe(t, args...)
}

var sippTransport = map[string]string{"udp": "u1", "tcp": "t1", "tls": "l1"}

// runCaller runs a caller scenario over tr to target and returns the calls
// that succeeded and failed, and what the tool printed.
func runCaller(t *testing.T, pki *harness.PKI, tr, target string, args ...string) (ok, failed int, out string) {
	t.Helper()
	args = append(args, "-i", "127.0.0.1", "-t", sippTransport[tr], "-timeout", "25")
	if tr == "tls" {
		return harness.RunSipload(t, 40*time.Second, append(append([]string{target}, args...),
			"-tls_cert", pki.Path("caller.pem"), "-tls_key", pki.Path("caller.key"), "-tls_ca", pki.Path("ca.pem"))...)
	}
	r := harness.RunSIPp(t, 40*time.Second, append(append([]string{target}, args...), "-timeout_error")...)
	return r.Successful, r.Failed, r.Out
}

// Calls through the registrar script for each of the nine pairs of caller
// and callee transports (UDP, TCP, TLS), with Record-Route on both sides of
// a transport change (RFC 5658): each callee registers over its own
// transport, and each pair places calls that the caller ends and calls
// that the callee ends, so in-dialog requests cross sipvisor both ways.
// SIPp plays the UDP and TCP ends; sipload plays the TLS ones.
func TestCallsAcrossTransportPairs(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs SIPp and sipload 27 times")
	}
	if _, err := exec.LookPath("sipp"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("sipp not installed")
		}
		t.Skip("sipp not installed (apt-get install -y sip-tester)")
	}
	pki := harness.NewPKI(t)
	pki.Issue("server", "sipvisor", 2)
	pki.Issue("callee", "tls callee", 3)
	pki.Issue("caller", "tls caller", 4)
	// Two TCP workers: a connection and the requests that belong with it
	// may land in different workers.
	s := harness.Start(t, strings.Replace(harness.TLSConfig(pki, ""), "tcp_workers = 1", "tcp_workers = 2", 1))
	targets := map[string]string{"udp": s.SIPAddr("udp"), "tcp": s.SIPAddr("tcp"), "tls": s.SIPAddr("tls")}
	transports := []string{"udp", "tcp", "tls"}

	// bob-X answers and waits for the caller's BYE; carol-X hangs up.
	callees := map[string]*harness.Proc{}
	for _, tr := range transports {
		for user, sc := range map[string]string{"bob": harness.Path("loadgen/scenarios/uas.xml"), "carol": harness.Testdata("uas_bye.xml")} {
			callees[user+"-"+tr] = startCallee(t, pki, tr, sc)
			port := callees[user+"-"+tr].Port
			ok, failed, out := runCaller(t, pki, tr, targets[tr], "-sf", harness.Testdata("register_transport.xml"), "-s", user+"-"+tr,
				"-key", "contact_port", strconv.Itoa(port), "-key", "contact_transport", tr, "-m", "1")
			if ok != 1 || failed != 0 {
				t.Fatalf("register %s-%s over %s: have %d/%d\n%s", user, tr, tr, ok, failed, harness.Tail(out, 30))
			}
		}
	}
	// dave-udp hangs up as RFC 3261 has it: its BYE goes to the first
	// Route, sipvisor's UDP socket, not back to where the INVITE came from
	// as SIPp's does. A UDP worker then gets it, one that holds no
	// connection to a TCP or TLS caller.
	dave := startRouteFollowingCallee(t)
	if ok, failed, out := runCaller(t, pki, "udp", targets["udp"], "-sf", harness.Testdata("register_transport.xml"), "-s", "dave-udp",
		"-key", "contact_port", strconv.Itoa(dave.Port()), "-key", "contact_transport", "udp", "-m", "1"); ok != 1 || failed != 0 {
		t.Fatalf("register dave-udp: have %d/%d\n%s", ok, failed, harness.Tail(out, 30))
	}

	t.Run("pairs", func(t *testing.T) {
		for _, from := range transports {
			for _, to := range transports {
				t.Run(from+"-to-"+to, func(t *testing.T) {
					t.Parallel()
					for _, c := range []struct{ user, scenario, who string }{
						{"bob", harness.Path("loadgen/scenarios/uac.xml"), "caller"},
						{"carol", harness.Testdata("uac_callee_bye.xml"), "callee"},
					} {
						ok, failed, out := runCaller(t, pki, from, targets[from], "-sf", c.scenario, "-s", c.user+"-"+to,
							"-m", "2", "-r", "10", "-d", "50")
						t.Logf("%s → %s, BYE from the %s: %d successful, %d failed", from, to, c.who, ok, failed)
						if ok != 2 || failed != 0 {
							t.Errorf("%s caller → %s callee, BYE from the %s: want 2 calls completed, have %d successful, %d failed\n%s\ncallee:\n%s\nsipvisor:\n%s",
								from, to, c.who, ok, failed, harness.Tail(out, 40), harness.Tail(callees[c.user+"-"+to].Out.String(), 20), harness.Tail(s.Log.String(), 20))
						}
					}
					if to != "udp" {
						return
					}
					ok, failed, out := runCaller(t, pki, from, targets[from], "-sf", harness.Testdata("uac_callee_bye.xml"), "-s", "dave-udp",
						"-m", "2", "-r", "10")
					t.Logf("%s → udp, BYE from the callee to its Route: %d successful, %d failed", from, ok, failed)
					if ok != 2 || failed != 0 {
						t.Errorf("%s caller → udp callee, BYE from the callee to its Route: want 2 calls completed, have %d successful, %d failed\n%s\nsipvisor:\n%s",
							from, ok, failed, harness.Tail(out, 40), harness.Tail(s.Log.String(), 20))
					}
				})
			}
		}
	})
	// The UDP workers that got dave's BYEs for the TCP and TLS callers
	// passed them to the TCP worker reading the caller's connection.
	if n := s.Metric("sipvisor_frontdoor_requests_passed_total", `outcome="passed"`); n < 4 {
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

func (r *routeCallee) Port() int { return r.c.LocalAddr().(*net.UDPAddr).Port }

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
		invites := map[string]harness.Msg{} // by Call-ID
		byes := map[string]string{}         // BYEs not yet answered, by Call-ID
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
			m := harness.Msg{Raw: raw, First: first, From: from}
			id := m.Header("Call-ID")
			switch m.Method() {
			case "INVITE":
				invites[id] = m
				resp := harness.ReplyTo(m, 200, "OK", "dave")
				resp = strings.Replace(resp, "Content-Length:", "Contact: <sip:dave@"+c.LocalAddr().String()+">\r\nContent-Length:", 1)
				c.WriteToUDP([]byte(resp), from)
			case "ACK":
				inv, ok := invites[id]
				if !ok || byes[id] != "" {
					continue
				}
				var routes []string
				for _, l := range inv.Lines()[1:] {
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
				contact := strings.Trim(inv.Header("Contact"), "<>")
				var b strings.Builder
				fmt.Fprintf(&b, "BYE %s SIP/2.0\r\nVia: SIP/2.0/UDP %s;branch=z9hG4bK-dave-%d;rport\r\n", contact, c.LocalAddr(), n)
				for _, r := range routes {
					b.WriteString("Route: " + r + "\r\n")
				}
				fmt.Fprintf(&b, "Max-Forwards: 70\r\nFrom: %s;tag=dave\r\nTo: %s\r\nCall-ID: %s\r\nCSeq: 1 BYE\r\nContent-Length: 0\r\n\r\n",
					inv.Header("To"), inv.Header("From"), id)
				byes[id], byeTo[id] = b.String(), to
				c.WriteToUDP([]byte(b.String()), to)
			case "":
				if strings.HasSuffix(m.Header("CSeq"), "BYE") && m.Status() >= 200 {
					delete(byes, id)
					delete(invites, id)
				}
			default:
				c.WriteToUDP([]byte(harness.ReplyTo(m, 200, "OK", "")), from)
			}
		}
	}()
	return r
}
