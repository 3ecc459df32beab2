package lifecycle

import (
	"bufio"
	"fmt"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// oldSideHold is how long an INVITE to user "slow" holds its worker: longer
// than an upgrade takes to hand over, so that what the worker read behind
// it is handled once the old generation has handed the node over.
const oldSideHold = 8 * time.Second

// oldSideCfg answers every INVITE itself (486) and every other request
// 200. One to "slow" holds its worker for oldSideHold first, one to "wait"
// for half a second, so that datagrams pile up in the worker's own socket
// behind it. UDP workers read their own sockets. The guards that read a
// busy worker as overload are off: the workers are held on purpose.
var oldSideCfg = fmt.Sprintf(`
socket = udp:127.0.0.1:0
socket = tcp:127.0.0.1:0
http_listen = 127.0.0.1:0
udp_workers = 1
tcp_workers = 1
udp_direct_reads = yes
throttle_enable = no
%s
route {
	if (is_method("INVITE")) {
		if ($rU == "slow") usleep(%d);
		if ($rU == "wait") usleep(500000);
		sl_send_reply(486, "Busy Here");
		exit;
	}
	sl_send_reply(200, "OK");
	exit;
}
`, handledLate, oldSideHold.Microseconds())

// oldSideRequest is a request outside a dialog of Call-ID id to user at
// the server to, sent from local over transport; an OPTIONS to the server
// itself (no user) when user is "".
func oldSideRequest(method, user, id, transport string, local net.Addr, to string) string {
	ruri := "sip:" + to
	if user != "" {
		ruri = "sip:" + user + "@" + to
	}
	return fmt.Sprintf("%s %s SIP/2.0\r\n"+
		"Via: SIP/2.0/%s %s;branch=z9hG4bK-%s;rport\r\n"+
		"Max-Forwards: 70\r\nFrom: <sip:caller@127.0.0.1>;tag=t-%s\r\nTo: <%s>\r\n"+
		"Call-ID: %s\r\nCSeq: 1 %s\r\nContact: <sip:caller@%s>\r\nContent-Length: 0\r\n\r\n",
		method, ruri, transport, local, id, id, ruri, id, method, local)
}

// finals collects the final answers by Call-ID.
type finals struct {
	mu  sync.Mutex
	got map[string]int
	at  map[string]time.Time
}

func (f *finals) note(raw string) {
	first, _, _ := strings.Cut(raw, "\r\n")
	m := harness.Msg{Raw: raw, First: first}
	if m.Status() < 200 {
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	id := m.Header("Call-ID")
	if _, ok := f.got[id]; !ok {
		f.got[id], f.at[id] = m.Status(), time.Now()
	}
}

func (f *finals) has(ids []string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, id := range ids {
		if _, ok := f.got[id]; !ok {
			return false
		}
	}
	return true
}

// After an upgrade has handed over, an old TCP worker still handles the
// requests it read before it learnt of its drain: new sessions pipelined on
// a connection not yet moved, behind an INVITE that holds the worker, and
// a probe of the server among them. None is refused because the old
// generation is leaving: each INVITE gets its 486 and the probe its 200,
// where the old supervisor's admission, stopping, answered the worker's ask
// with 503.
func TestUpgradeOldTCPWorkerRefusesNoNewSession(t *testing.T) {
	t.Parallel()
	oldSideUpgrade(t, "tcp")
}

// After an upgrade has handed over, an old worker reading its own socket
// of the shared UDP port (udp_direct_reads) still reads what the socket
// held: new sessions behind an INVITE that holds the worker, and a probe.
// None is refused because the old generation is leaving, where the gate
// the old supervisor wrote into the worker's page at the hand-over said
// "refuse every new session" until the worker handled its drain.
func TestUpgradeOldDirectWorkerRefusesNoNewSession(t *testing.T) {
	t.Parallel()
	oldSideUpgrade(t, "udp")
}

// oldSideUpgrade holds the worker of transport with a slow INVITE, new
// sessions and a probe read behind it, upgrades meanwhile, and checks each
// request's final answer.
func oldSideUpgrade(t *testing.T, transport string) {
	if testing.Short() {
		t.Skip("an upgrade with a held worker")
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "sipvisor")
	install(t, harness.SipvisorBin, path)
	s := harness.StartBin(t, path, oldSideCfg)
	g := followGenerations(t, s)
	s.WaitLog(`msg="direct reads"`, 30*time.Second)
	run := fmt.Sprintf("%s-%d", transport, time.Now().UnixNano())
	fin := &finals{got: map[string]int{}, at: map[string]time.Time{}}
	slow := "slow-" + run
	ids := []string{slow}
	var reqs []string
	var send func()
	if transport == "tcp" {
		// One write, so that the worker reads the pipelined requests
		// behind the held INVITE before it learns of the drain.
		to := s.SIPAddr("tcp")
		c, err := net.Dial("tcp", to)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		reqs = append(reqs, oldSideRequest("INVITE", "slow", slow, "TCP", c.LocalAddr(), to))
		for i := range 3 {
			id := fmt.Sprintf("new%d-%s", i, run)
			ids = append(ids, id)
			reqs = append(reqs, oldSideRequest("INVITE", "new", id, "TCP", c.LocalAddr(), to))
		}
		ids = append(ids, "probe-"+run)
		reqs = append(reqs, oldSideRequest("OPTIONS", "", "probe-"+run, "TCP", c.LocalAddr(), to))
		go func() {
			r := bufio.NewReader(c)
			for {
				var head strings.Builder
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					head.WriteString(line)
					if line == "\r\n" {
						break
					}
				}
				if head.Len() > 2 { // a keepalive's CRLF otherwise
					fin.note(head.String())
				}
			}
		}()
		send = func() {
			if _, err := c.Write([]byte(strings.Join(reqs, ""))); err != nil {
				t.Fatal(err)
			}
		}
	} else {
		// A "wait" INVITE holds the worker while the rest pile up in its
		// socket, to be read in one batch: the held INVITE first, the new
		// sessions and the probe behind it.
		peer := harness.NewPeer(t)
		to := harness.Local(s.SIPPort("udp"))
		local := peer.C.LocalAddr()
		ids = append(ids, "wait-"+run)
		reqs = append(reqs, oldSideRequest("INVITE", "wait", "wait-"+run, "UDP", local, to.String()),
			oldSideRequest("INVITE", "slow", slow, "UDP", local, to.String()))
		for i := range 5 {
			id := fmt.Sprintf("new%d-%s", i, run)
			ids = append(ids, id)
			reqs = append(reqs, oldSideRequest("INVITE", "new", id, "UDP", local, to.String()))
		}
		ids = append(ids, "probe-"+run)
		reqs = append(reqs, oldSideRequest("OPTIONS", "", "probe-"+run, "UDP", local, to.String()))
		go func() {
			buf := make([]byte, 65536)
			for {
				n, _, err := peer.C.ReadFromUDP(buf)
				if err != nil {
					return
				}
				fin.note(string(buf[:n]))
			}
		}()
		send = func() {
			for _, m := range reqs {
				peer.Send(to, m)
			}
		}
	}
	send()
	prev := g.upgrade(2, "dev")
	handed := time.Now()
	harness.WaitFor(t, "a final answer to every request", oldSideHold+30*time.Second, func() bool { return fin.has(ids) })
	waitPidGone(t, prev, 60*time.Second)
	fin.mu.Lock()
	defer fin.mu.Unlock()
	if !fin.at[slow].After(handed) {
		t.Fatalf("the held INVITE was answered (%d) before the upgrade handed over: the upgrade took longer than %v, and the test saw nothing", fin.got[slow], oldSideHold)
	}
	for _, id := range ids {
		want := 486
		if strings.HasPrefix(id, "probe") {
			want = 200
		}
		if got := fin.got[id]; got != want {
			t.Errorf("%s: want %d, have %d", id, want, got)
		}
	}
	if t.Failed() {
		t.Logf("sipvisor's log:\n%s", harness.Tail(s.Log.String(), 60))
	}
}
