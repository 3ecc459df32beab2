package engine

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/dispatcher"
)

const dispatchCfg = `
ds_list_file = "%s"
route {
	if (is_method("OPTIONS")) {
		if (ds_is_from_list(1)) { sl_send_reply(200, "From A Backend"); }
		else { sl_send_reply(403, "Not A Backend"); }
		exit;
	}
	if (!ds_select_dst(1, 4)) { sl_send_reply(503, "No Backend"); exit; }
	t_set_fr(0, 150);
	t_on_failure("next");
	t_relay();
}
failure_route[next] {
	ds_mark_dst();
	if (ds_next_dst()) { xlog("failover to $du after $rs"); t_on_failure("next"); t_relay(); }
}
`

// Round-robin over three backends, one inactive by the supervisor's word:
// it is never chosen; a backend that does not answer within t_set_fr's
// 150 ms fails over to the next, is marked inactive for this worker (and
// reported), and is skipped from then on.
func TestDispatchSelectAndFailover(t *testing.T) {
	t.Parallel()
	b1, b2, b3, alice := newUA(t), newUA(t), newUA(t), newUA(t)
	list := filepath.Join(t.TempDir(), "backends.list")
	uri := func(u *ua) string { return "sip:" + u.addr().String() }
	os.WriteFile(list, []byte(fmt.Sprintf("1 %s\n1 %s\n1 %s\n", uri(b1), uri(b2), uri(b3))), 0o644)
	cfgText := fmt.Sprintf(dispatchCfg, list)
	c, err := config.Load("test.cfg", []byte(cfgText))
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var reports []dispatcher.Report
	p := startProxy(t, cfgText, func(o *Options) {
		o.Dispatcher = c.Dispatcher.Dests
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
	key := func(u *ua) string { return "1 " + uri(u) }
	p.do(func() {
		p.w.DispatchStates(dispatcher.EncodeStates(dispatcher.States{Gen: 1, Status: map[string]dispatcher.Status{key(b3): dispatcher.Inactive}}))
	})

	call := func(id string, answer *ua, silent ...*ua) {
		t.Helper()
		alice.send(p.addr(), invite(p.addr(), alice.addr(), "sip:service@"+p.addr().String(), id, "z9hG4bK-"+id, 70))
		alice.recvResponse(100)
		for _, s := range silent {
			s.recvRequest(sip.INVITE) // and no answer
		}
		inv, _ := answer.recvRequest(sip.INVITE)
		answer.respond(p.addr(), inv, 200, "OK")
		alice.recvResponse(200)
	}
	call("c1", b1)     // round-robin starts at b1
	call("c2", b2)     // then b2; b3 is inactive
	call("c3", b2, b1) // b1 silent: after 150 ms, the next usable, b2
	call("c4", b2)     // b1 marked inactive: b2 again, b3 still out
	b1.quiet(50 * time.Millisecond)
	b3.quiet(50 * time.Millisecond)

	// The supervisor brings b1 and b3 back; a newer frame wins, an older one
	// is ignored.
	active := map[string]dispatcher.Status{key(b1): dispatcher.Active, key(b2): dispatcher.Active, key(b3): dispatcher.Active}
	p.do(func() {
		p.w.DispatchStates(dispatcher.EncodeStates(dispatcher.States{Gen: 3, Status: active}))
		p.w.DispatchStates(dispatcher.EncodeStates(dispatcher.States{Gen: 2, Status: map[string]dispatcher.Status{key(b1): dispatcher.Drain}}))
	})
	// The round-robin counter went on through c3 and c4: b2, b3, b1.
	call("c5", b2)
	call("c6", b3)
	call("c7", b1)
	if !strings.Contains(p.logs.String(), "failover to "+uri(b2)+" after 408") {
		t.Errorf("no failover to b2 in the log")
	}

	mu.Lock()
	var marked bool
	for _, r := range reports {
		marked = marked || r.Mark[key(b1)] == dispatcher.Inactive && len(r.Mark) == 1
	}
	mu.Unlock()
	if !marked {
		t.Errorf("ds_mark_dst: no report of b1 inactive in %+v", reports)
	}

	// ds_is_from_list: a backend's OPTIONS is known, another's is not.
	opts := func(from *ua) string {
		return strings.Join([]string{
			"OPTIONS sip:" + p.addr().String() + " SIP/2.0",
			"Via: SIP/2.0/UDP " + from.addr().String() + ";branch=z9hG4bK-o" + from.addr().String(),
			"From: <sip:x@example.com>;tag=1", "To: <sip:" + p.addr().String() + ">",
			"Call-ID: o-" + from.addr().String(), "CSeq: 1 OPTIONS", "Max-Forwards: 70", "Content-Length: 0", "", ""}, "\n")
	}
	b2.send(p.addr(), opts(b2))
	if res, raw := b2.recvResponse(200); res.Reason != "From A Backend" {
		t.Errorf("a backend's OPTIONS: %s", raw)
	}
	alice.send(p.addr(), opts(alice))
	alice.recvResponse(403)
}
