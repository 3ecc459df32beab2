package supervisor

import (
	"bytes"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil/promlint"

	"github.com/sipvisor/sipvisor/internal/testkit"
)

// probedBackend answers OPTIONS on 127.0.0.1 with the code in code (0:
// silence), as a backend does.
func probedBackend(t *testing.T, code *atomic.Int32) *net.UDPConn {
	t.Helper()
	c, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	go func() {
		buf := make([]byte, 65535)
		for {
			n, from, err := c.ReadFromUDP(buf)
			if err != nil {
				return
			}
			k := code.Load()
			if k == 0 || !bytes.HasPrefix(buf[:n], []byte("OPTIONS ")) {
				continue
			}
			var res strings.Builder
			res.WriteString("SIP/2.0 " + map[int32]string{200: "200 OK", 503: "503 Service Unavailable"}[k] + "\r\n")
			for _, line := range strings.Split(string(buf[:n]), "\r\n")[1:] {
				for _, h := range []string{"Via:", "From:", "To:", "Call-ID:", "CSeq:"} {
					if strings.HasPrefix(line, h) {
						res.WriteString(line + "\r\n")
					}
				}
			}
			res.WriteString("Content-Length: 0\r\n\r\n")
			c.WriteToUDP([]byte(res.String()), from)
		}
	}()
	return c
}

// tcpBackend answers every OPTIONS on a TCP connection with 200.
func tcpBackend(t *testing.T) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 65535)
				n, _ := c.Read(buf)
				var res strings.Builder
				res.WriteString("SIP/2.0 100 Trying\r\n\r\nSIP/2.0 200 OK\r\n")
				for _, line := range strings.Split(string(buf[:n]), "\r\n")[1:] {
					if strings.HasPrefix(line, "Via:") || strings.HasPrefix(line, "CSeq:") {
						res.WriteString(line + "\r\n")
					}
				}
				res.WriteString("Content-Length: 0\r\n\r\n")
				c.Write([]byte(res.String()))
			}()
		}
	}()
	return ln
}

// The supervisor probes the list's destinations: every one has its series
// from the start; one that stops answering, or answers 503, goes inactive
// within ds_ping_interval × (ds_probing_threshold + 1), and comes back with
// its first 200; a state set by hand holds over the probes.
func TestDispatcherProbes(t *testing.T) {
	t.Parallel()
	var code atomic.Int32
	code.Store(200)
	be := probedBackend(t, &code)
	uri := "sip:" + be.LocalAddr().String()
	list := filepath.Join(t.TempDir(), "ds.list")
	tcpURI := "sip:" + tcpBackend(t).Addr().String() + ";transport=tcp"
	closed, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closedURI := "sip:" + closed.Addr().String() + ";transport=tcp"
	closed.Close() // a port where nothing listens: every connection refused
	os.WriteFile(list, []byte("1 "+uri+"\n1 sip:127.0.0.1:9 4\n2 "+tcpURI+"\n2 "+closedURI+"\n"), 0o644)
	st := startSupervisor(t, cfgf(`
socket = udp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 1
ds_list_file = %q
ds_ping_interval = 100ms
ds_probing_threshold = 2
route { exit; }
`, list), costWorker(0), nil)
	for _, u := range []string{uri, "sip:127.0.0.1:9"} {
		for _, state := range []string{"active", "probing", "inactive", "disabled", "drain"} {
			if _, ok := st.lookup(t, "sipvisor_dispatcher_destination_state", `set="1"`, `uri="`+u+`"`, `state="`+state+`"`); !ok {
				t.Errorf("no series for %s in state %s", u, state)
			}
		}
	}
	stateOf := func(u string) string {
		for _, d := range st.s.ds.list(time.Now()) {
			if d.URI == u {
				return d.State
			}
		}
		return "missing"
	}
	state := func() string { return stateOf(uri) }
	// Over TCP, a connection a probe: one answered, one refused.
	testkit.WaitFor(t, patience, "the TCP destinations probed", func() bool {
		answered := false
		for _, d := range st.s.ds.list(time.Now()) {
			answered = answered || d.URI == tcpURI && d.RTT > 0 && d.LastCode == 200
		}
		return answered && stateOf(tcpURI) == "active" && stateOf(closedURI) == "inactive"
	})
	testkit.WaitFor(t, patience, "the destination answering", func() bool {
		v, _ := st.lookup(t, "sipvisor_dispatcher_destination_rtt_seconds", `set="1"`, `uri="`+uri+`"`)
		return v > 0 && state() == "active"
	})
	if v := st.metric(t, "sipvisor_dispatcher_destination_state", `set="1"`, `uri="sip:127.0.0.1:9"`, `state="disabled"`); v != 1 {
		t.Errorf("a disabled destination: state{disabled} = %v", v)
	}
	problems, err := promlint.NewWithMetricFamilies(mustGather(t, st.s)).Lint()
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		if strings.HasPrefix(p.Metric, "sipvisor_dispatcher") {
			t.Errorf("%s: %s", p.Metric, p.Text)
		}
	}

	for _, tc := range []struct {
		code int32
		want string
	}{{0, "inactive"}, {200, "active"}, {503, "inactive"}, {200, "active"}} {
		code.Store(tc.code)
		start := time.Now()
		testkit.WaitFor(t, patience, "state "+tc.want, func() bool { return state() == tc.want })
		// The bound of the docs, with room for a loaded machine.
		if d := time.Since(start); d > 300*time.Millisecond+2*time.Second {
			t.Errorf("answering %d: %s after %v", tc.code, tc.want, d)
		}
	}

	b := backend{st.s}
	if err := b.SetDestination(1, uri, "drain"); err != nil {
		t.Fatal(err)
	}
	code.Store(0) // probes fail meanwhile: by hand wins
	testkit.WaitFor(t, patience, "probes failing", func() bool {
		for _, d := range b.Destinations() {
			if d.URI == uri {
				return d.ProbeFailures >= 3
			}
		}
		return false
	})
	if s := state(); s != "drain" {
		t.Errorf("drained by hand, then probes failed: %s", s)
	}
	for _, bad := range []struct {
		set       int
		uri, to   string
		wantError string
	}{
		{1, uri, "up", "want active, inactive or drain"},
		{1, uri, "disabled", "want active, inactive or drain"},
		{1, "sip:127.0.0.1:9", "active", "disabled in the list"},
		{3, uri, "active", "no destination"},
	} {
		if err := b.SetDestination(bad.set, bad.uri, bad.to); err == nil || !strings.Contains(err.Error(), bad.wantError) {
			t.Errorf("set %d %s %s: %v, want %q", bad.set, bad.uri, bad.to, err, bad.wantError)
		}
	}
	code.Store(200)
	if err := b.SetDestination(1, uri, "active"); err != nil {
		t.Fatal(err)
	}
	testkit.WaitFor(t, patience, "back to its probes", func() bool { return state() == "active" })
}

func TestProbeReply(t *testing.T) {
	for _, tc := range []struct {
		in     string
		code   int
		branch string
		ok     bool
	}{
		{"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 127.0.0.1:5;branch=z9hG4bK-ds-a-1;rport=5\r\n\r\n", 200, "z9hG4bK-ds-a-1", true},
		{"SIP/2.0 404 Not Found\r\nVia: SIP/2.0/UDP h;received=1.2.3.4;branch=b2\r\n\r\n", 404, "b2", true},
		{"OPTIONS sip:x SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=b\r\n\r\n", 0, "", false},
		{"SIP/2.0 2x0 OK\r\n", 0, "", false},
		{"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP h\r\n\r\n", 0, "", false},
		{"SIP/2.0", 0, "", false},
	} {
		code, branch, ok := probeReply([]byte(tc.in))
		if code != tc.code || branch != tc.branch || ok != tc.ok {
			t.Errorf("%q: %d %q %v, want %d %q %v", tc.in, code, branch, ok, tc.code, tc.branch, tc.ok)
		}
	}
}
