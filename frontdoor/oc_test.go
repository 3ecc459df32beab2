package frontdoor

import (
	"bytes"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/overload"
	"github.com/sipvisor/sipvisor/overload/oc"
)

// A refusal carries the server's RFC 7339 feedback in the top Via of a
// sender that offered oc, and nothing for one that did not.
func TestRefusalCarriesFeedback(t *testing.T) {
	t.Parallel()
	var rec recorder
	refuse := func(*sipscan.Msg, int64) (overload.Refusal, int) { return overload.RefuseQueue, 5 }
	d := New(0, newWorkers(1).pick, refuse, rec.reply)
	d.Feedback = func() (oc.Feedback, bool) {
		return oc.Feedback{Loss: 70, Validity: time.Second, Seq: oc.Seq{Sec: 1700000000, Frac: 250000}}, true
	}
	now := time.Now().UnixNano()
	offer := bytes.Replace(invite("call-oc", ""), []byte("INVITE\r\n"), []byte("INVITE;oc;oc-algo=\"loss\"\r\n"), 1)
	d.Handle(frame(offer), src, now)
	d.Handle(frame(invite("call-plain", "")), src, now)
	if len(rec.replies) != 2 {
		t.Fatalf("want 2 refusals, have %d", len(rec.replies))
	}
	want := []byte(`INVITE;oc=70;oc-algo="loss";oc-validity=1000;oc-seq=1700000000.250` + "\r\n")
	if !bytes.Contains(rec.replies[0], want) || !bytes.HasPrefix(rec.replies[0], []byte("SIP/2.0 503")) {
		t.Errorf("refusal to a sender that offered oc:\n%s", rec.replies[0])
	}
	if bytes.Contains(rec.replies[1], []byte(";oc")) {
		t.Errorf("feedback to a sender that did not offer oc:\n%s", rec.replies[1])
	}
}
