package engine

import (
	"context"
	"os/exec"
	"strconv"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/testkit"
)

// sippCfg relays in-dialog requests even without a Route: SIPp's built-in
// uac scenario ignores Record-Route and sends its ACK and BYE to the
// Request-URI through the proxy it was pointed at (-rsa).
const sippCfg = `
route {
	if (!mf_process_maxfwd_header(10)) { sl_send_reply(483, "Too Many Hops"); exit; }
	if (has_totag()) {
		loose_route();
		t_relay();
		exit;
	}
	if (is_method("CANCEL")) { t_relay(); exit; }
	t_check_trans();
	if (is_method("INVITE")) record_route();
	if (!t_relay()) sl_send_reply(500, "Relay Failed");
}
`

// TestSIPpThroughProxy: sipp -sn uac → this worker → sipp -sn uas; every
// call must complete (both exit 0: no failed call).
func TestSIPpThroughProxy(t *testing.T) {
	t.Parallel()
	sipp, err := exec.LookPath("sipp")
	if err != nil {
		t.Skip("sipp not installed (Debian package sip-tester)")
	}
	// RFC 3261's timers, as SIPp uses them: the harness's short ones would
	// end a transaction that a slow machine's SIPp still retransmits into.
	p := startProxy(t, sippCfg, func(o *Options) { o.T1, o.Linger = 500*time.Millisecond, 5*time.Second })
	uasPort, uacPort := testkit.FreePort(t), testkit.FreePort(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	const calls = "20"
	uas := exec.CommandContext(ctx, sipp, "-sn", "uas", "-i", "127.0.0.1", "-p", strconv.Itoa(uasPort),
		"-m", calls, "-timeout", "40s", "-timeout_error", "-nostdin", "-buff_size", "4194304")
	uasOut := &testkit.SyncBuffer{}
	uas.Stdout, uas.Stderr = uasOut, uasOut
	if err := uas.Start(); err != nil {
		t.Fatal(err)
	}
	uasDone := make(chan error, 1)
	go func() { uasDone <- uas.Wait() }()

	uac := exec.CommandContext(ctx, sipp, "-sn", "uac", "-i", "127.0.0.1", "-p", strconv.Itoa(uacPort),
		"-rsa", p.addr().String(), "127.0.0.1:"+strconv.Itoa(uasPort),
		"-m", calls, "-r", "10", "-d", "100", "-timeout", "40s", "-timeout_error", "-nostdin", "-buff_size", "4194304")
	out, err := uac.CombinedOutput()
	if err != nil {
		t.Fatalf("sipp uac: %v\n%s", err, tail(out))
	}
	select {
	case err := <-uasDone:
		if err != nil {
			t.Fatalf("sipp uas: %v\n%s", err, tail([]byte(uasOut.String())))
		}
	case <-ctx.Done():
		t.Fatal("sipp uas did not finish")
	}
	if s := p.stats(); s.Requests < 20*3 {
		t.Fatalf("requests through the proxy: want at least %v, have %v", 60, s.Requests)
	}
	p.waitHeld0()
}

func tail(b []byte) []byte {
	if len(b) > 3000 {
		return b[len(b)-3000:]
	}
	return b
}
