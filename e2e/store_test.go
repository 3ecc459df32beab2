package e2e

import (
	"encoding/json"
	"fmt"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/ctl"
	"github.com/sipvisor/sipvisor/location/redistest"
)

// bindingsOf is `ctl ul show [AOR] --json`.
func bindingsOf(t *testing.T, s *server, aor ...string) []ctl.Binding {
	t.Helper()
	out, err := s.ctl(append(append([]string{"ul", "show"}, aor...), "--json")...)
	if err != nil {
		t.Fatalf("ctl ul show: %v: %s", err, out)
	}
	var bs []ctl.Binding
	if err := json.Unmarshal([]byte(out), &bs); err != nil {
		t.Fatalf("ctl ul show --json: %v: %s", err, out)
	}
	return bs
}

// callOnce makes one SIPp call to user through the server at sip and
// reports whether it completed.
func callOnce(t *testing.T, sip int, user string) sippResult {
	t.Helper()
	return runSIPp(t, 30*time.Second, "-sn", "uac", "127.0.0.1:"+strconv.Itoa(sip), "-s", user,
		"-i", "127.0.0.1", "-p", strconv.Itoa(freePort(t)), "-m", "1", "-d", "100", "-timeout", "20", "-timeout_error")
}

// With the default store (an SQLite file beside the config), a restart of
// sipvisor keeps every binding: ul show lists them all, and calls to them
// are routed to their contacts.
func TestRegistrationsSurviveRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("restarts sipvisor; skipped with -short")
	}
	dir := t.TempDir()
	sip, uas := freePort(t), freePort(t)
	sippUAS(t, uas)
	s := startServerIn(t, dir, registrarCfg(sip))
	const users = 20
	r := runSIPp(t, 30*time.Second, "-sf", "testdata/register-users.xml", "127.0.0.1:"+strconv.Itoa(sip),
		"-key", "contact_port", strconv.Itoa(uas), "-i", "127.0.0.1", "-p", strconv.Itoa(freePort(t)),
		"-r", "50", "-m", strconv.Itoa(users), "-timeout", "20", "-timeout_error")
	if r.Exit != 0 || r.Successful != users {
		t.Fatalf("want %d registrations, have %d/%d (exit %d)\n%s", users, r.Successful, r.Failed, r.Exit, tail(r.Out, 30))
	}
	before := bindingsOf(t, s)
	s.stopDrained()

	s = startServerIn(t, dir, registrarCfg(sip))
	after := bindingsOf(t, s)
	if len(before) != users || len(after) != users {
		t.Fatalf("want %d bindings before and after the restart, have %d and %d:\n%v", users, len(before), len(after), after)
	}
	for i := range before {
		if before[i].AOR != after[i].AOR || before[i].Contact != after[i].Contact || !before[i].Expires.Equal(after[i].Expires) {
			t.Errorf("binding %d: before the restart %+v, after %+v", i, before[i], after[i])
		}
	}
	for _, user := range []string{"user1", "user7", "user20"} {
		if r := callOnce(t, sip, user); r.Successful != 1 {
			t.Errorf("call to %s after the restart: want it completed, have %d/%d\n%s\n%s", user, r.Successful, r.Failed, tail(r.Out, 30), tail(s.log.String(), 20))
		}
	}
}

// clusterCfg is registrarCfg for one node of a cluster sharing store.
func clusterCfg(sip int, store string) string {
	return registrarCfg(sip) + fmt.Sprintf("\nlocation_store = %q\ndomain = \"example.test\"\n", store)
}

// register sends one REGISTER of user with contact from p to the server at
// sip and returns the answer.
func register(t *testing.T, p *peer, sip int, user, contact string) sipMsg {
	t.Helper()
	to := &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: sip}
	branch := "z9hG4bK-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	p.send(to, "REGISTER sip:example.test SIP/2.0\r\n"+
		"Via: SIP/2.0/UDP 127.0.0.1:"+strconv.Itoa(p.port())+";branch="+branch+"\r\n"+
		"Max-Forwards: 70\r\n"+
		"From: <sip:"+user+"@example.test>;tag=r1\r\n"+
		"To: <sip:"+user+"@example.test>\r\n"+
		"Call-ID: "+branch+"@test\r\n"+
		"CSeq: 1 REGISTER\r\n"+
		"Contact: <"+contact+">\r\n"+
		"Expires: 600\r\n"+
		"Content-Length: 0\r\n\r\n")
	m, _ := p.expect(5*time.Second, "a final answer to the REGISTER", func(m sipMsg) bool { return m.status() >= 200 })
	return m
}

// Two nodes share registrations through Redis: a phone registered through
// node A is called through node B, also once A is gone. With Redis gone
// too, B answers REGISTERs and calls 503 with Retry-After and says why in
// its log and metrics, without crashing; once Redis is back (with its
// data), B routes again.
func TestClusterSharesRegistrationsInRedis(t *testing.T) {
	if testing.Short() {
		t.Skip("runs two sipvisor nodes and a Redis; skipped with -short")
	}
	rd := redistest.Start(t)
	sipA, sipB, uas := freePort(t), freePort(t), freePort(t)
	sippUAS(t, uas)
	a := startServer(t, clusterCfg(sipA, rd.URL()))
	b := startServer(t, clusterCfg(sipB, rd.URL()))

	r := runSIPp(t, 30*time.Second, "-sf", "testdata/register.xml", "127.0.0.1:"+strconv.Itoa(sipA), "-s", "alice",
		"-key", "contact_port", strconv.Itoa(uas), "-i", "127.0.0.1", "-p", strconv.Itoa(freePort(t)),
		"-m", "1", "-timeout", "20", "-timeout_error")
	if r.Successful != 1 {
		t.Fatalf("register through A: %d/%d\n%s", r.Successful, r.Failed, tail(r.Out, 30))
	}
	// Registered at A's address, filed under the domain: B finds it by the
	// full AOR.
	if bs := bindingsOf(t, b, "sip:alice@example.test"); len(bs) != 1 || bs[0].Contact != "sip:alice@127.0.0.1:"+strconv.Itoa(uas) {
		t.Fatalf("ul show on B: want alice's binding made through A, have %+v", bs)
	}
	if r := callOnce(t, sipB, "alice"); r.Successful != 1 {
		t.Fatalf("call through B to alice registered through A: %d/%d\n%s\n%s", r.Successful, r.Failed, tail(r.Out, 30), tail(b.log.String(), 20))
	}

	a.stopDrained()
	if r := callOnce(t, sipB, "alice"); r.Successful != 1 {
		t.Fatalf("call through B with A stopped: %d/%d\n%s", r.Successful, r.Failed, tail(r.Out, 30))
	}

	rd.Stop()
	p := newPeer(t)
	m := register(t, p, sipB, "bob", "sip:bob@127.0.0.1:"+strconv.Itoa(p.port()))
	if m.status() != 503 || m.header("Retry-After") == "" {
		t.Fatalf("REGISTER with Redis down: want 503 with Retry-After, have %q\n%s", m.first, m.raw)
	}
	if r := callOnce(t, sipB, "alice"); r.Successful != 0 || !strings.Contains(r.Out, "503") {
		t.Errorf("call with Redis down: want a 503 (not a 404), have %d successful\n%s", r.Successful, tail(r.Out, 40))
	}
	waitFor(t, "the store failures in B's log and metrics", 10*time.Second, func() bool {
		return strings.Contains(b.log.String(), "location store call failed") &&
			b.metric("sipvisor_location_store_errors_total", "process", "worker") > 0
	})
	if !b.ready() {
		t.Fatalf("B not ready with Redis down (it should still serve calls that need no store)\n%s", tail(b.log.String(), 20))
	}

	rd.Start()
	waitFor(t, "B routing to alice again", 20*time.Second, func() bool { return callOnce(t, sipB, "alice").Successful == 1 })
	// Each worker finds the store back by itself, within its pause.
	waitFor(t, "REGISTERs through B answered 200 again", 10*time.Second, func() bool {
		return register(t, p, sipB, "bob", "sip:bob@127.0.0.1:"+strconv.Itoa(p.port())).status() == 200
	})
	if bs := bindingsOf(t, b, "sip:bob@example.test"); len(bs) != 1 {
		t.Fatalf("bob's binding after Redis returned: want 1, have %+v", bs)
	}
}

// waitFor polls cond until it holds, failing the test at the deadline.
func waitFor(t *testing.T, what string, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("want %s within %v", what, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
