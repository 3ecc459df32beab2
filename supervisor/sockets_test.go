package supervisor

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/ctl"
	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/listeners"
)

const port0Config = `
socket = udp:127.0.0.1:0
socket = tcp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 1
tcp_workers = 1
timer_workers = 1
location_store = "memory:"
route { exit; }
`

func getSockets(t *testing.T, addr string) []ctl.Socket {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/mi/sockets")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var ss []ctl.Socket
	if err := json.NewDecoder(resp.Body).Decode(&ss); err != nil {
		t.Fatalf("/mi/sockets: %v", err)
	}
	return ss
}

// Port 0 binds a port the kernel picks, and every report of the socket
// (the start-up log, /mi/sockets) gives that port; a reload keeps it.
func TestPort0SocketsReported(t *testing.T) {
	t.Parallel()
	logs := &testkit.SyncBuffer{}
	st := startSupervisor(t, cfgf(port0Config), costWorker(0), logs)

	ss := getSockets(t, st.s.HTTPAddr())
	if len(ss) != 3 {
		t.Fatalf("want 3 sockets (udp, tcp, http), have %v", ss)
	}
	for i, want := range []string{"udp", "tcp", "http"} {
		if ss[i].Proto != want {
			t.Errorf("socket %d: want proto %s, have %v", i, want, ss[i])
		}
		if strings.HasSuffix(ss[i].Address, ":0") || !strings.HasPrefix(ss[i].Address, "127.0.0.1:") {
			t.Errorf("socket %d: want 127.0.0.1 and the port bound, have %q", i, ss[i].Address)
		}
	}
	for i, a := range st.s.SIPAddrs() {
		if have := "127.0.0.1:" + strconv.Itoa(a.Port); ss[i].Address != have {
			t.Errorf("socket %d: /mi/sockets says %s, the supervisor bound %s", i, ss[i].Address, have)
		}
	}
	if ss[2].Address != st.s.HTTPAddr() {
		t.Errorf("http: /mi/sockets says %s, bound %s", ss[2].Address, st.s.HTTPAddr())
	}
	for _, so := range ss {
		line := " proto=" + so.Proto + " address=" + so.Address + " "
		testkit.WaitFor(t, 10*time.Second, "the start-up line with"+line, func() bool {
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, "msg=serving") && strings.Contains(l, line) {
					return true
				}
			}
			return false
		})
	}

	// A reload of the same file keeps the sockets bound, ports included.
	if _, err := st.s.Reload(); err != nil {
		t.Fatal(err)
	}
	if again := getSockets(t, st.s.HTTPAddr()); !equalSockets(again, ss) {
		t.Errorf("after a reload: want %v, have %v", ss, again)
	}
}

func equalSockets(a, b []ctl.Socket) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// A reload refused through the control API is logged by the server too,
// with where the problem is.
func TestReloadFailureLogged(t *testing.T) {
	t.Parallel()
	logs := &testkit.SyncBuffer{}
	st := startSupervisor(t, cfgf(port0Config), costWorker(0), logs)
	bad := strings.Replace(cfgf(port0Config), "udp_workers = 1", "udp_workers = 1\nmax_calls = many", 1)
	if err := os.WriteFile(st.path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if code := runCtl(t.Context(), []string{"-addr", st.s.HTTPAddr(), "reload"}, &out, &errb); code != 1 {
		t.Fatalf("ctl reload of a broken file: want exit 1, have %d (%s%s)", code, out.String(), errb.String())
	}
	log := logs.String()
	for _, want := range []string{"reload failed", `by="ctl reload"`, "at=" + st.path + ":5 ", "max_calls"} {
		if !strings.Contains(log, want) {
			t.Errorf("want %q in the log, have\n%s", want, log)
		}
	}
}

// TestSocketsPartCloses: the sockets part's close lets go of every socket,
// the descriptors passed to workers included, so that the same ports bind
// again at once (a UDP port stays taken while any descriptor of it is open).
func TestSocketsPartCloses(t *testing.T) {
	addrs := []listeners.Addr{{Proto: "udp", Host: "127.0.0.1"}, {Proto: "tcp", Host: "127.0.0.1"}}
	list, err := listeners.Bind(addrs)
	if err != nil {
		t.Fatal(err)
	}
	k := sockParts{list: list}
	if k.files, k.names, err = listeners.Files(list); err != nil {
		t.Fatal(err)
	}
	if len(k.files) == 0 {
		t.Fatal("no descriptor to pass: the test proves nothing")
	}
	again := make([]listeners.Addr, len(list))
	for i, sk := range list {
		again[i] = sk.Bound
	}
	k.close()
	list, err = listeners.Bind(again)
	if err != nil {
		t.Fatalf("ports still taken after close: %v", err)
	}
	listeners.Close(list)
}
