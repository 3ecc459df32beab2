package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/dispatcher"
	"github.com/sipvisor/sipvisor/internal/wire"
)

const ocCfg = `
ds_list_file = "%s"
route {
	if (!ds_select_dst(1, 4)) { sl_send_reply(503, "No Backend"); exit; }
	t_relay();
}
`

// TestOverloadControl follows RFC 7339 through a worker relaying to two
// backends round-robin: the Via it adds offers oc; a backend's feedback
// (oc=100) sheds every new call it would get to the other; that one's 503
// with Retry-After and no oc holds it; a new call then finds every
// destination shed or held and is refused 503 with Retry-After by the
// worker itself, but a request within a dialog is still relayed. As a
// server, the worker's own responses carry the feedback it is given to a
// caller whose Via offered oc, and nothing to one whose Via did not.
func TestOverloadControl(t *testing.T) {
	t.Parallel()
	b1, b2, alice := newUA(t), newUA(t), newUA(t)
	list := filepath.Join(t.TempDir(), "backends.list")
	uri := func(u *ua) string { return "sip:" + u.addr().String() }
	key := func(u *ua) string { return "1 " + uri(u) }
	os.WriteFile(list, []byte(fmt.Sprintf("1 %s\n1 %s\n", uri(b1), uri(b2))), 0o644)
	cfgText := fmt.Sprintf(ocCfg, list)
	c, err := config.Load("test.cfg", []byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	seqMs := time.Now().UnixMilli()
	var mu sync.Mutex
	var reports []dispatcher.Report
	p := startProxy(t, cfgText, func(o *Options) {
		o.Dispatcher = c.Dispatcher.Dests
		o.DispatchOC = true
		o.OverloadControl = func() uint64 { return wire.OCWord(40, 1500*time.Millisecond, seqMs) }
		o.ReportDispatch = func(b []byte) {
			r, err := dispatcher.DecodeReport(b)
			if err != nil {
				t.Errorf("report: %v", err)
			}
			mu.Lock()
			reports = append(reports, r)
			mu.Unlock()
		}
	})
	offer := func(msg string) string { return strings.Replace(msg, ";rport", ";rport;oc;oc-algo=\"loss\"", 1) }
	// answer builds a backend's response from the request's bytes (a
	// parser of its own could change its Via): fb replaces the oc offer
	// in the top Via.
	answer := func(b *ua, raw string, code int, extra, fb string) {
		t.Helper()
		var out []string
		out = append(out, fmt.Sprintf("SIP/2.0 %d X", code))
		for _, l := range strings.Split(raw, "\r\n")[1:] {
			name, _, _ := strings.Cut(l, ":")
			switch strings.ToLower(name) {
			case "via", "from", "call-id", "cseq":
				out = append(out, l)
			case "to":
				if !strings.Contains(l, "tag=") {
					l += ";tag=uas"
				}
				out = append(out, l)
			}
		}
		if extra != "" {
			out = append(out, "Retry-After: "+extra)
		}
		msg := strings.Join(append(out, "Content-Length: 0", "", ""), "\r\n")
		if fb != "" {
			at := strings.Index(msg, `;oc;oc-algo="loss"`)
			if at < 0 {
				t.Fatalf("the relayed request's Via offers no oc: %s", raw)
			}
			msg = msg[:at] + fb + msg[at+len(`;oc;oc-algo="loss"`):]
		}
		b.send(p.addr(), msg)
	}

	// c1 to b1, whose Via offered oc; b1 answers: shed everything, for 10 s.
	alice.send(p.addr(), offer(invite(p.addr(), alice.addr(), "sip:svc@"+p.addr().String(), "c1", "z9hG4bK-c1", 70)))
	_, trying := alice.recvResponse(100)
	if !strings.Contains(trying, `;oc=40;oc-algo="loss";oc-validity=1500;oc-seq=`+strconv.FormatInt(seqMs/1000, 10)) {
		t.Errorf("the worker's 100 Trying to a caller that offered oc carries no feedback:\n%s", trying)
	}
	inv, raw := b1.recvRequest(sip.INVITE)
	if inv.Via() == nil || !strings.Contains(raw, `;oc;oc-algo="loss"`) {
		t.Fatalf("the Via toward a destination offers no oc:\n%s", raw)
	}
	answer(b1, raw, 200, "", fmt.Sprintf(`;oc=100;oc-algo="loss";oc-validity=10000;oc-seq=%d.5`, time.Now().Unix()))
	alice.recvResponse(200)

	// c2, c3: round-robin would give b2 then b1; b1's share goes to b2.
	for _, id := range []string{"c2", "c3"} {
		alice.send(p.addr(), invite(p.addr(), alice.addr(), "sip:svc@"+p.addr().String(), id, "z9hG4bK-"+id, 70))
		_, trying := alice.recvResponse(100)
		if strings.Contains(trying, "oc=") {
			t.Errorf("feedback to a caller that did not offer oc:\n%s", trying)
		}
		_, raw := b2.recvRequest(sip.INVITE)
		code, extra := 200, ""
		if id == "c3" {
			code, extra = 503, "30"
		}
		answer(b2, raw, code, extra, "")
		if code == 200 {
			alice.recvResponse(200)
		} else {
			alice.recvResponse(503)
			if _, ack := b2.recvRequest(sip.ACK); !strings.Contains(ack, `;oc;oc-algo="loss"`+"\r\n") {
				t.Errorf("the hop's ACK has another Via than its INVITE:\n%s", ack)
			}
		}
	}
	b1.quiet(50 * time.Millisecond)

	// c4: b1 sheds it, b2 is held: refused here, with Retry-After.
	alice.send(p.addr(), invite(p.addr(), alice.addr(), "sip:svc@"+p.addr().String(), "c4", "z9hG4bK-c4", 70))
	if res, raw := alice.recvResponse(503); res.GetHeader("Retry-After") == nil {
		t.Errorf("a shed call's 503 has no Retry-After:\n%s", raw)
	}
	// Its retransmission gets the same answer, not another draw.
	alice.send(p.addr(), invite(p.addr(), alice.addr(), "sip:svc@"+p.addr().String(), "c4", "z9hG4bK-c4", 70))
	res, _ := alice.recvResponse(503)
	tag, _ := res.To().Params.Get("tag")
	alice.send(p.addr(), inDialog("ACK", "sip:svc@"+p.addr().String(), alice.addr(), "z9hG4bK-c4", "c4", 1, tag, nil))

	// Within a dialog: never shed, so b1 (b2 is held) gets it.
	alice.send(p.addr(), inDialog("INFO", "sip:svc@"+p.addr().String(), alice.addr(), "z9hG4bK-i1", "c1", 2, "uas", nil))
	info, _ := b1.recvRequest("INFO")
	b1.respond(p.addr(), info, 200, "OK")
	for {
		// The 503's retransmissions may still be on their way.
		if m, raw := alice.recv(); m.(*sip.Response).StatusCode == 200 {
			break
		} else if !strings.Contains(raw, "503") {
			t.Fatalf("want INFO's 200, have:\n%s", raw)
		}
	}
	b2.quiet(50 * time.Millisecond)

	// The worker told the supervisor of b1's feedback, b2's hold, and of
	// the calls it shed.
	deadline := time.Now().Add(5 * time.Second)
	for {
		var fb, hold bool
		var shed uint64
		mu.Lock()
		for _, r := range reports {
			fb = fb || r.OC[key(b1)].Loss == 100
			hold = hold || r.Hold[key(b2)] > time.Now().Add(20*time.Second).UnixMilli()
			shed += r.Shed[key(b1)]
		}
		mu.Unlock()
		if fb && hold && shed >= 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("reports: want b1's feedback, b2's hold and 2 shed; have %v %v %d", fb, hold, shed)
		}
		p.do(func() { p.w.Tick(time.Now()) })
		time.Sleep(20 * time.Millisecond)
	}
}

// TestRepairVias: a Via with RFC 7339's quoted oc-algo, wherever it
// stands, comes out of the parser and back into bytes as it went in.
func TestRepairVias(t *testing.T) {
	for _, v := range []string{
		`SIP/2.0/UDP h;branch=z;oc;oc-algo="loss"`,
		`SIP/2.0/UDP h;branch=z;oc-algo="loss";oc`,
		`SIP/2.0/UDP h;branch=z;oc-algo="loss";oc;rport=5`,
		`SIP/2.0/UDP h;branch=z;oc=20;oc-algo="loss";oc-validity=500;oc-seq=1.5`,
	} {
		m, err := sip.NewParser().ParseSIP([]byte("OPTIONS sip:a@b SIP/2.0\r\nVia: " + v + "\r\nFrom: <sip:a@b>;tag=1\r\nTo: <sip:a@b>\r\nCall-ID: x\r\nCSeq: 1 OPTIONS\r\nContent-Length: 0\r\n\r\n"))
		if err != nil {
			t.Fatal(err)
		}
		repairVias(m)
		if got := m.Via().Value(); got != v {
			t.Errorf("want %s\nhave %s", v, got)
		}
	}
}
