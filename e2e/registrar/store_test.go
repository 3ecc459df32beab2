package registrar

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
	"github.com/sipvisor/sipvisor/location/redistest"
)

// callOnce makes one SIPp call to user through the server's UDP socket
// and reports whether it completed.
func callOnce(t *testing.T, s *harness.Server, user string) harness.SIPpResult {
	t.Helper()
	return harness.RunSIPp(t, 30*time.Second, "-sn", "uac", s.SIPAddr("udp"), "-s", user,
		"-i", "127.0.0.1", "-m", "1", "-d", "100", "-timeout", "20", "-timeout_error")
}

// With the default store (an SQLite file beside the config), a restart of
// sipvisor keeps every binding: ul show lists them all, and calls to them
// are routed to their contacts.
func TestRegistrationsSurviveRestart(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("restarts sipvisor; skipped with -short")
	}
	dir := t.TempDir()
	uas := harness.SIPpUAS(t).Port
	s := harness.StartIn(t, dir, harness.RegistrarCfg())
	const users = 20
	r := harness.RunSIPp(t, 30*time.Second, "-sf", harness.Testdata("register-users.xml"), s.SIPAddr("udp"),
		"-key", "contact_port", strconv.Itoa(uas), "-i", "127.0.0.1",
		"-r", "50", "-m", strconv.Itoa(users), "-timeout", "20", "-timeout_error")
	if r.Exit != 0 || r.Successful != users {
		t.Fatalf("want %d registrations, have %d/%d (exit %d)\n%s", users, r.Successful, r.Failed, r.Exit, harness.Tail(r.Out, 30))
	}
	before := s.Bindings()
	s.StopDrained()
	// A clean stop closes the database in every process: SQLite's -wal and
	// -shm files go with the last, and the database alone stays.
	for _, f := range []string{"location.db-wal", "location.db-shm"} {
		if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("after SIGTERM: want %s removed, have %v", f, err)
		}
	}

	// Restarted on the ports it had, so that SIPp calls the same address.
	s = harness.StartIn(t, dir, s.Pinned(harness.RegistrarCfg()))
	after := s.Bindings()
	if len(before) != users || len(after) != users {
		t.Fatalf("want %d bindings before and after the restart, have %d and %d:\n%v", users, len(before), len(after), after)
	}
	for i := range before {
		if before[i].AOR != after[i].AOR || before[i].Contact != after[i].Contact || !before[i].Expires.Equal(after[i].Expires) {
			t.Errorf("binding %d: before the restart %+v, after %+v", i, before[i], after[i])
		}
	}
	for _, user := range []string{"user1", "user7", "user20"} {
		if r := callOnce(t, s, user); r.Successful != 1 {
			t.Errorf("call to %s after the restart: want it completed, have %d/%d\n%s\n%s", user, r.Successful, r.Failed, harness.Tail(r.Out, 30), harness.Tail(s.Log.String(), 20))
		}
	}
}

// clusterCfg is registrarCfg for one node of a cluster sharing store.
func clusterCfg(store string) string {
	return harness.RegistrarCfg() + fmt.Sprintf("\nlocation_store = %q\ndomain = \"example.test\"\n", store)
}

// Two nodes share registrations through Redis: a phone registered through
// node A is called through node B, also once A is gone. With Redis gone
// too, B answers REGISTERs and calls 503 with Retry-After and says why in
// its log and metrics, without crashing; once Redis is back (with its
// data), B routes again.
func TestClusterSharesRegistrationsInRedis(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("runs two sipvisor nodes and a Redis; skipped with -short")
	}
	rd := redistest.Start(t)
	uas := harness.SIPpUAS(t).Port
	a := harness.Start(t, clusterCfg(rd.URL()))
	b := harness.Start(t, clusterCfg(rd.URL()))
	sipB := b.SIPPort("udp")

	r := harness.RunSIPp(t, 30*time.Second, "-sf", harness.Testdata("register.xml"), a.SIPAddr("udp"), "-s", "alice",
		"-key", "contact_port", strconv.Itoa(uas), "-i", "127.0.0.1",
		"-m", "1", "-timeout", "20", "-timeout_error")
	if r.Successful != 1 {
		t.Fatalf("register through A: %d/%d\n%s", r.Successful, r.Failed, harness.Tail(r.Out, 30))
	}
	// Registered at A's address, filed under the domain: B finds it by the
	// full AOR.
	if bs := b.Bindings("sip:alice@example.test"); len(bs) != 1 || bs[0].Contact != "sip:alice@127.0.0.1:"+strconv.Itoa(uas) {
		t.Fatalf("ul show on B: want alice's binding made through A, have %+v", bs)
	}
	if r := callOnce(t, b, "alice"); r.Successful != 1 {
		t.Fatalf("call through B to alice registered through A: %d/%d\n%s\n%s", r.Successful, r.Failed, harness.Tail(r.Out, 30), harness.Tail(b.Log.String(), 20))
	}

	a.StopDrained()
	if r := callOnce(t, b, "alice"); r.Successful != 1 {
		t.Fatalf("call through B with A stopped: %d/%d\n%s", r.Successful, r.Failed, harness.Tail(r.Out, 30))
	}

	rd.Stop()
	p := harness.NewPeer(t)
	m := harness.Register(t, p, sipB, "bob", "sip:bob@127.0.0.1:"+strconv.Itoa(p.Port()))
	if m.Status() != 503 || m.Header("Retry-After") == "" {
		t.Fatalf("REGISTER with Redis down: want 503 with Retry-After, have %q\n%s", m.First, m.Raw)
	}
	if r := callOnce(t, b, "alice"); r.Successful != 0 || !strings.Contains(r.Out, "503") {
		t.Errorf("call with Redis down: want a 503 (not a 404), have %d successful\n%s", r.Successful, harness.Tail(r.Out, 40))
	}
	b.WaitLog("location store call failed", 10*time.Second)
	b.AwaitMetricAtLeast(1, 10*time.Second, "sipvisor_location_store_errors_total", `process="worker"`)
	if !b.Ready() {
		t.Fatalf("B not ready with Redis down (it should still serve calls that need no store)\n%s", harness.Tail(b.Log.String(), 20))
	}

	rd.Start()
	harness.WaitFor(t, "B routing to alice again", 20*time.Second, func() bool { return callOnce(t, b, "alice").Successful == 1 })
	// Each worker finds the store back by itself, within its pause.
	harness.WaitFor(t, "REGISTERs through B answered 200 again", 10*time.Second, func() bool {
		return harness.Register(t, p, sipB, "bob", "sip:bob@127.0.0.1:"+strconv.Itoa(p.Port())).Status() == 200
	})
	if bs := b.Bindings("sip:bob@example.test"); len(bs) != 1 {
		t.Fatalf("bob's binding after Redis returned: want 1, have %+v", bs)
	}
}
