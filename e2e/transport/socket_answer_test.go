package transport

import (
	"errors"
	"net"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// socketCallee is a callee that sends every response to the server's SIP
// socket, to, rather than to the address in the top Via, as a phone does
// that always sends to its outbound proxy (or one behind a NAT that knows
// only the registrar's address). It answers each INVITE 180 then 200,
// resends the 200 for a retransmitted INVITE, and answers BYE 200. It
// counts the BYEs it answered. It listens on port of 127.0.0.1.
func socketCallee(t *testing.T, port int, to *net.UDPAddr) (byes *atomic.Int64) {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: port})
	if err != nil {
		t.Fatal(err)
	}
	byes = &atomic.Int64{}
	done := make(chan struct{})
	t.Cleanup(func() { c.Close(); <-done })
	contact := "Contact: <sip:callee@127.0.0.1:" + strconv.Itoa(port) + ">\r\n"
	go func() {
		defer close(done)
		buf := make([]byte, 65536)
		for {
			n, _, err := c.ReadFromUDP(buf)
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if err != nil {
				continue
			}
			raw := string(buf[:n])
			first, _, _ := strings.Cut(raw, "\r\n")
			req := harness.Msg{Raw: raw, First: first}
			var out []string
			switch req.Method() {
			case "INVITE":
				tag := "callee-" + strconv.Itoa(n)
				out = []string{harness.ReplyTo(req, 180, "Ringing", tag),
					strings.Replace(harness.ReplyTo(req, 200, "OK", tag), "Content-Length: 0\r\n", contact+"Content-Length: 0\r\n", 1)}
			case "BYE":
				out = []string{harness.ReplyTo(req, 200, "OK", "")}
				byes.Add(1)
			}
			for _, m := range out {
				c.WriteToUDP([]byte(m), to)
			}
		}
	}()
	return byes
}

// A callee that answers to the SIP socket instead of the Via's address gets
// its calls completed: where the Via names a UDP worker's reply socket, or
// where a TCP worker relayed a TCP caller's call over UDP, the answer
// reaches whichever UDP worker the kernel (or the door) places its Call-ID
// on, which passes it to the worker whose pid its branch names.
func TestCalleeAnsweringToTheSIPSocket(t *testing.T) {
	t.Parallel()
	harness.NeedSIPp(t)
	for _, c := range []struct {
		name, extra, proto string
	}{
		{"reply sockets", "udp_workers = 2\ntcp_workers = 1\nworker_reply_sockets = yes", "udp"},
		{"TCP caller", "udp_workers = 2\ntcp_workers = 1", "tcp"},
		{"built-in config", "", "builtin"},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			// The callee learns the server's port after the server starts
			// with the callee's: a port picked up front.
			callee := harness.FreePort(t)
			cfg := harness.ProxyCfg(callee, c.extra)
			if c.proto == "builtin" {
				cfg = harness.DefaultCfg0(t)
			}
			s := harness.Start(t, cfg)
			proto := c.proto
			if proto == "builtin" {
				proto = "udp"
			}
			args := []string{"-sn", "uac", s.SIPAddr(proto), "-s", "callee", "-i", "127.0.0.1",
				"-r", "10", "-m", "10", "-d", "100", "-timeout", "30", "-timeout_error"}
			if c.proto == "tcp" {
				args = append(args, "-t", "t1")
			}
			if c.proto == "builtin" {
				// The built-in config: the callee registers, and sipload
				// (which follows Record-Route) calls it with credentials.
				for _, u := range []string{"callee1", "caller"} {
					if out, err := s.Ctl("user", "add", u+"@127.0.0.1", "s3cret"); err != nil {
						t.Fatalf("ctl user add: %v: %s", err, out)
					}
				}
				target := s.SIPAddr("udp")
				out, err := exec.Command(harness.SiploadBin, target, "-sn", "register", "-s", "callee", "-m", "1", "-ap", "s3cret",
					"-i", "127.0.0.1", "-p", strconv.Itoa(callee), "-q").CombinedOutput()
				if err != nil {
					t.Fatalf("register callee1: %v\n%s", err, out)
				}
				socketCallee(t, callee, harness.Local(s.SIPPort("udp")))
				ok, failed, text := harness.RunSipload(t, 60*time.Second, target, "-sn", "uac", "-s", "callee1", "-au", "caller", "-ap", "s3cret", "-r", "10", "-m", "20")
				if ok != 20 {
					t.Fatalf("want 20 of 20 calls completed, have %d/%d (door mode %q)\n%s", ok, failed, os.Getenv("SIPVISOR_E2E_DIRECT_READS"), text)
				}
				return
			}
			byes := socketCallee(t, callee, harness.Local(s.SIPPort("udp")))
			r := harness.RunSIPp(t, 60*time.Second, args...)
			if r.Exit != 0 || r.Successful != 10 {
				t.Fatalf("want 10 of 10 calls completed, have %d/%d (exit %d, door mode %q)\n%s", r.Successful, r.Failed, r.Exit, os.Getenv("SIPVISOR_E2E_DIRECT_READS"), harness.Tail(r.Out, 30))
			}
			if n := byes.Load(); n < 10 {
				t.Errorf("want the callee to have answered 10 BYEs, have %d", n)
			}
			if c.proto == "tcp" {
				// Every answer reached a UDP worker, which passed it to
				// the TCP worker that relayed the request.
				// Straight, or through the supervisor for the first
				// answers, if they came before the UDP worker was linked.
				passed := s.MetricAbsentAs0("sipvisor_pool_responses_passed_total", `outcome="passed"`)
				direct := s.Metric("sipvisor_pool_responses_passed_directly_total", "")
				if passed+direct < 20 {
					t.Errorf("want the answers passed to the TCP worker, have %v passed through the supervisor and %v straight", passed, direct)
				}
				if direct == 0 {
					t.Errorf("want the UDP worker linked to the TCP worker, have %v answers passed straight", direct)
				}
				if n := s.MetricAbsentAs0("sipvisor_pool_responses_passed_total", `outcome="no_holder"`); n != 0 {
					t.Errorf("want no answer without its worker, have %v", n)
				}
			}
		})
	}
}
