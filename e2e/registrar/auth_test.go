package registrar

import (
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/icholy/digest"
	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// authCfg is a registrar and proxy that authenticates REGISTERs (401) and
// new INVITEs (407) in realm example.test, as the default config does.
func authCfg() string {
	return `
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 2
tcp_workers = 1
domain = "example.test"
# SIPp 3.6 answers the first challenge whatever its algorithm.
auth_algorithms = "MD5"

route {
	if (!mf_process_maxfwd_header(10)) {
		sl_send_reply(483, "Too Many Hops");
		exit;
	}
	if (has_totag()) {
		# SIPp's UAS does not echo Record-Route: its in-dialog requests
		# come without Route, to the UAS's contact.
		if (!loose_route() && is_myself($ru)) {
			sl_send_reply(404, "Not Here");
			exit;
		}
		t_relay();
		exit;
	}
	t_check_trans();
	if (is_method("REGISTER")) {
		if (!www_authorize("example.test", "subscriber")) {
			www_challenge("example.test", "0");
			exit;
		}
		consume_credentials();
		save("location");
		exit;
	}
	if (is_method("INVITE")) {
		if (!proxy_authorize("example.test", "subscriber")) {
			proxy_challenge("example.test", "0");
			exit;
		}
		consume_credentials();
		record_route();
	}
	if (!lookup("location")) {
		sl_send_reply(404, "Not Found");
		exit;
	}
	t_relay();
}
`
}

// Digest authentication end to end: with SIPp's -au/-ap the right password
// registers and calls; a wrong password and an unknown user get the same
// answer; a replayed nonce-count is refused; an extension scan registers
// nothing.
func TestDigestAuthentication(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("SIPp registrations and calls; skipped with -short")
	}
	uas := harness.SIPpUAS(t).Port
	s := harness.Start(t, authCfg())
	if out, err := s.Ctl("user", "add", "alice@example.test", "right-pass"); err != nil {
		t.Fatalf("ctl user add: %v: %s", err, out)
	}
	if out, err := s.Ctl("user", "list"); err != nil || !strings.Contains(out, "alice@example.test") || strings.Contains(out, "right-pass") {
		t.Fatalf("ctl user list: want alice without her password, have %v: %s", err, out)
	}
	target := s.SIPAddr("udp")

	reg := func(pass string) harness.SIPpResult {
		return harness.RunSIPp(t, 30*time.Second, "-sf", harness.Testdata("register-auth.xml"), target, "-s", "alice", "-au", "alice", "-ap", pass,
			"-key", "contact_port", strconv.Itoa(uas), "-i", "127.0.0.1", "-m", "1", "-timeout", "10", "-timeout_error")
	}
	if r := reg("wrong-pass"); r.Successful != 0 {
		t.Fatalf("register with a wrong password: want it refused, have %d successful\n%s", r.Successful, harness.Tail(r.Out, 30))
	}
	if bs := s.Bindings(); len(bs) != 0 {
		t.Fatalf("after a wrong password: want nothing bound, have %+v", bs)
	}
	if r := reg("right-pass"); r.Successful != 1 {
		t.Fatalf("register with the right password: %d/%d\n%s\n%s", r.Successful, r.Failed, harness.Tail(r.Out, 30), harness.Tail(s.Log.String(), 20))
	}
	r := harness.RunSIPp(t, 30*time.Second, "-sf", harness.Testdata("uac-auth.xml"), target, "-s", "alice", "-au", "alice", "-ap", "right-pass",
		"-i", "127.0.0.1", "-m", "1", "-timeout", "20", "-timeout_error")
	if r.Successful != 1 {
		t.Fatalf("authenticated call to alice: %d/%d\n%s\n%s", r.Successful, r.Failed, harness.Tail(r.Out, 30), harness.Tail(s.Log.String(), 20))
	}

	// sipload answers the challenges too (-au/-ap): registrations of its
	// users load1 and load2, and a call to alice.
	for _, u := range []string{"load1", "load2"} {
		if out, err := s.Ctl("user", "add", u+"@example.test", "load-pass"); err != nil {
			t.Fatalf("ctl user add %s: %v: %s", u, err, out)
		}
	}
	for _, args := range [][]string{
		{"-sn", "register", "-s", "load", "-ap", "load-pass", "-m", "2"},
		{"-sn", "uac", "-s", "alice", "-au", "alice", "-ap", "right-pass", "-m", "1"},
		{"-sn", "register", "-s", "load", "-ap", "wrong-pass", "-m", "2"},
	} {
		cmd := exec.Command(harness.SiploadBin, append([]string{target, "-i", "127.0.0.1", "-r", "5", "-q", "-timeout", "20"}, args...)...)
		out, err := cmd.CombinedOutput()
		wrong := strings.Contains(strings.Join(args, " "), "wrong")
		if wrong {
			if err == nil || !strings.Contains(string(out), "4xx 2") || !strings.Contains(string(out), "challenged 2") {
				t.Errorf("sipload with a wrong password: want both registrations refused after answering the challenge, have %v\n%s", err, out)
			}
			continue
		}
		if err != nil || !strings.Contains(string(out), "challenged") {
			t.Fatalf("sipload %v: %v\n%s", args, err, out)
		}
	}
	if bs := s.Bindings("load1"); len(bs) != 1 {
		t.Errorf("load1 registered by sipload: want 1 binding, have %+v", bs)
	}

	// A Go client, to see every answer as it is sent.
	p := harness.NewPeer(t)
	to := harness.Local(s.SIPPort("udp"))
	seq := 0
	send := func(user, auth string) harness.Msg {
		t.Helper()
		seq++
		branch := "z9hG4bK-auth" + strconv.Itoa(seq)
		msg := "REGISTER sip:example.test SIP/2.0\r\n" +
			"Via: SIP/2.0/UDP 127.0.0.1:" + strconv.Itoa(p.Port()) + ";branch=" + branch + "\r\n" +
			"Max-Forwards: 70\r\nFrom: <sip:" + user + "@example.test>;tag=t\r\nTo: <sip:" + user + "@example.test>\r\n" +
			"Call-ID: auth-" + user + "@test\r\nCSeq: " + strconv.Itoa(seq) + " REGISTER\r\n" +
			"Contact: <sip:" + user + "@127.0.0.1:" + strconv.Itoa(p.Port()) + ">\r\nExpires: 600\r\n"
		if auth != "" {
			msg += "Authorization: " + auth + "\r\n"
		}
		p.Send(to, msg+"Content-Length: 0\r\n\r\n")
		m, _ := p.Expect(5*time.Second, "an answer to REGISTER "+user, func(m harness.Msg) bool { return m.Status() >= 200 })
		return m
	}
	answer := func(m harness.Msg, user, pass string, nc int) string {
		t.Helper()
		ch, err := digest.ParseChallenge(m.Header("WWW-Authenticate"))
		if err != nil {
			t.Fatalf("challenge %q: %v", m.Header("WWW-Authenticate"), err)
		}
		cr, err := digest.Digest(ch, digest.Options{Method: "REGISTER", URI: "sip:example.test", Username: user, Password: pass, Count: nc})
		if err != nil {
			t.Fatal(err)
		}
		return cr.String()
	}
	// shape is an answer without what must differ between two: the nonce.
	shape := func(m harness.Msg) string {
		var out []string
		for _, l := range m.Lines() {
			name, _, _ := strings.Cut(l, ":")
			switch strings.ToLower(name) {
			case "via", "from", "to", "call-id", "cseq", "content-length":
				continue
			case "www-authenticate":
				ch, _ := digest.ParseChallenge(strings.TrimSpace(l[len(name)+1:]))
				ch.Nonce = ""
				l = name + ": " + ch.String()
			}
			out = append(out, l)
		}
		return strings.Join(out, "\n")
	}
	wrong := send("alice", answer(send("alice", ""), "alice", "guess", 1))
	unknown := send("mallory", answer(send("mallory", ""), "mallory", "guess", 1))
	if wrong.Status() != 401 || shape(wrong) != shape(unknown) {
		t.Errorf("wrong password and unknown user: want the same 401, have\n%s\n---\n%s", shape(wrong), shape(unknown))
	}

	ch := send("alice", "")
	good := answer(ch, "alice", "right-pass", 1)
	if m := send("alice", good); m.Status() != 200 {
		t.Fatalf("right password: want 200, have %q", m.First)
	}
	if m := send("alice", good); m.Status() != 401 {
		t.Errorf("the same credentials again (a replayed nonce-count): want 401, have %q", m.First)
	}
	if m := send("alice", answer(ch, "alice", "right-pass", 2)); m.Status() != 200 {
		t.Errorf("the next nonce-count of the same nonce: want 200, have %q", m.First)
	}

	// An extension scan, as sipvicious svwar -e100-110 does it: every
	// extension challenged alike, none registered.
	first := ""
	for ext := 100; ext <= 110; ext++ {
		user := strconv.Itoa(ext)
		m := send(user, "")
		if first == "" {
			first = shape(m)
		}
		if m.Status() != 401 || shape(m) != first {
			t.Errorf("extension %s: want the same 401 as every other, have %q", user, m.First)
		}
		send(user, answer(m, user, "password", 1))
	}
	for _, b := range s.Bindings() {
		if u := harness.UserOf(b.AOR); u != "alice" && !strings.HasPrefix(u, "load") {
			t.Errorf("the scan registered %s", b.AOR)
		}
	}
}
