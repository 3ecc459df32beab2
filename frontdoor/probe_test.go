package frontdoor

import (
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/overload"
)

func options(ruri, toTag string) []byte {
	to := "<sip:10.0.0.1>"
	if toTag != "" {
		to += ";tag=" + toTag
	}
	return []byte("OPTIONS " + ruri + " SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bKprobe" + token(ruri) + "\r\n" +
		"Max-Forwards: 70\r\n" +
		"From: <sip:dispatcher@127.0.0.1>;tag=77\r\n" +
		"To: " + to + "\r\n" +
		"Call-ID: probe-" + token(ruri) + "\r\n" +
		"CSeq: 10 OPTIONS\r\n" +
		"Content-Length: 0\r\n\r\n")
}

func TestIsProbe(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		msg  []byte
		want bool
	}{
		{options("sip:10.0.0.1:5060", ""), true},
		{options("sip:10.0.0.1", ""), true},
		{options("SIP:10.0.0.1;transport=udp", ""), true},
		{options("sips:proxy.example.com", ""), true},
		{options("sip:alice@10.0.0.1", ""), false},
		{options("sip:10.0.0.1", "abc"), false}, // in a dialog
		{options("tel:+123456", ""), false},
		{invite("c1", ""), false},
	} {
		var m sipscan.Msg
		if err := sipscan.Scan(c.msg, &m); err != nil {
			t.Fatal(err)
		}
		if have := IsProbe(&m); have != c.want {
			t.Errorf("%s: want %v, have %v", strings.SplitN(string(c.msg), "\r\n", 2)[0], c.want, have)
		}
	}
}

// A probe of the server is answered 503 by the door while Probe refuses,
// and goes to a worker (the script answers it) otherwise; an OPTIONS to a
// user is never the door's to answer.
func TestProbeAnsweredByTheDoor(t *testing.T) {
	t.Parallel()
	ws := newWorkers(1)
	rec := &recorder{}
	refuse := true
	d := New(0, ws.pick, nil, rec.reply)
	d.Probe = func(int64) (bool, int) { return refuse, 7 }
	now := time.Now().UnixNano()
	d.Handle(frame(options("sip:127.0.0.1:5060", "")), src, now)
	d.Handle(frame(options("sip:alice@127.0.0.1:5060", "")), src, now)
	refuse = false
	d.Handle(frame(options("sip:127.0.0.1", "")), src, now)
	if n := ws.received(); n != 2 {
		t.Fatalf("want the OPTIONS to a user and the probe not refused handed to the worker, have %d", n)
	}
	if len(rec.replies) != 1 {
		t.Fatalf("want 1 stateless reply, have %d", len(rec.replies))
	}
	r := string(rec.replies[0])
	if !strings.HasPrefix(r, "SIP/2.0 503 ") || !strings.Contains(r, "\r\nRetry-After: 7\r\n") || !strings.Contains(r, "CSeq: 10 OPTIONS\r\n") {
		t.Fatalf("want a 503 with Retry-After 7 for the probe, have %q", r)
	}
	if v := d.Stats.ProbesRefused.Load(); v != 1 {
		t.Fatalf("want 1 probe refused, have %d", v)
	}
	for r := range d.Stats.Refused {
		if v := d.Stats.Refused[r].Load(); v != 0 {
			t.Fatalf("want no session counted as refused (%s), have %d", overload.Refusal(r), v)
		}
	}
}
