package oc

import (
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

func TestParseVia(t *testing.T) {
	for _, c := range []struct {
		via     string
		want    Via
		fb      bool
		wantErr string
	}{
		{via: "SIP/2.0/UDP 10.0.0.1:5060;branch=z9hG4bK1", want: Via{}},
		{via: "SIP/2.0/UDP 10.0.0.1;branch=z9hG4bK1;oc", want: Via{OC: true}},
		{via: `SIP/2.0/UDP 10.0.0.1;oc;oc-algo="loss,rate";branch=z`, want: Via{OC: true, Algos: "loss,rate"}},
		{via: `SIP/2.0/UDP 10.0.0.1;branch=z;OC=20;Oc-Algo="loss";oc-validity=500;oc-seq=1282321615.782`,
			want: Via{OC: true, Algos: "loss", HasLoss: true, Loss: 20, HasValidity: true, Validity: 500 * time.Millisecond, HasSeq: true, Seq: Seq{1282321615, 782000}}, fb: true},
		{via: "SIP/2.0/UDP h;oc=0;oc-validity=0;oc-seq=5", want: Via{OC: true, HasLoss: true, HasValidity: true, HasSeq: true, Seq: Seq{5, 0}}, fb: true},
		// No oc-seq: no feedback to take.
		{via: "SIP/2.0/UDP h;oc=30", want: Via{OC: true, HasLoss: true, Loss: 30}},
		// Another algorithm than loss: not ours to apply.
		{via: `SIP/2.0/UDP h;oc=30;oc-algo="rate";oc-seq=1.1`, want: Via{OC: true, HasLoss: true, Loss: 30, Algos: "rate", HasSeq: true, Seq: Seq{1, 100000}}},
		{via: "SIP/2.0/UDP h;oc=101;oc-seq=1", wantErr: "want a percent"},
		{via: "SIP/2.0/UDP h;oc=-1", wantErr: "want a percent"},
		{via: "SIP/2.0/UDP h;oc=5;oc-validity=x", wantErr: "want milliseconds"},
		{via: "SIP/2.0/UDP h;oc=5;oc-seq=12a", wantErr: "oc-seq"},
		{via: "SIP/2.0/UDP h;oc=5;oc-seq=1.", wantErr: "oc-seq"},
	} {
		v, err := ParseVia([]byte(c.via))
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: want error with %q, have %v", c.via, c.wantErr, err)
			}
			continue
		}
		if err != nil || v != c.want {
			t.Errorf("%s: want %+v, have %+v (%v)", c.via, c.want, v, err)
		}
		if _, ok := v.Feedback(); ok != c.fb {
			t.Errorf("%s: want feedback %v, have %v", c.via, c.fb, ok)
		}
	}
}

func TestFeedbackDefaultValidity(t *testing.T) {
	v, _ := ParseVia([]byte("SIP/2.0/UDP h;oc=10;oc-seq=3"))
	if fb, ok := v.Feedback(); !ok || fb.Validity != DefaultValidity || fb.Loss != 10 {
		t.Fatalf("want 10%% for %v, have %+v %v", DefaultValidity, fb, ok)
	}
}

func TestSeq(t *testing.T) {
	at := time.UnixMilli(1282321615782)
	if s := SeqAt(at).String(); s != "1282321615.782" {
		t.Fatalf("want 1282321615.782, have %s", s)
	}
	a, _ := ParseSeq("10.5")
	b, _ := ParseSeq("10.49")
	if !a.After(b) || b.After(a) || a.After(a) {
		t.Fatalf("10.5 after 10.49: want true; have %v, %v", a.After(b), b.After(a))
	}
	if n := (Seq{9, 999000}).Next(); n != (Seq{10, 0}) {
		t.Fatalf("want 10.000, have %v", n)
	}
}

func TestStampResponse(t *testing.T) {
	fb := Feedback{Loss: 20, Validity: 500 * time.Millisecond, Seq: Seq{1282321615, 782000}}
	const tail = ";oc=20;oc-algo=\"loss\";oc-validity=500;oc-seq=1282321615.782"
	for _, c := range []struct{ name, msg, want string }{
		{"asked", "SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 10.0.0.1;branch=z1;oc;received=10.0.0.2\r\nTo: <sip:a@b>\r\n\r\n",
			"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP 10.0.0.1;branch=z1;received=10.0.0.2" + tail + "\r\nTo: <sip:a@b>\r\n\r\n"},
		{"compact, two values, algorithms offered", "SIP/2.0 503 Busy\r\nCall-ID: x\r\nv: SIP/2.0/UDP h;oc;oc-algo=\"loss,rate\";branch=z, SIP/2.0/UDP g;branch=y\r\n\r\n",
			"SIP/2.0 503 Busy\r\nCall-ID: x\r\nv: SIP/2.0/UDP h;branch=z" + tail + ", SIP/2.0/UDP g;branch=y\r\n\r\n"},
		{"not asked", "SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP h;branch=z\r\nVia: SIP/2.0/UDP g;oc\r\n\r\n", ""},
		{"oc only in the body", "SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP h;branch=z\r\n\r\na=x;oc\r\n", ""},
		{"other algorithm only", "SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP h;oc;oc-algo=\"rate\"\r\n\r\n", ""},
		{"restamped", "SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP h;oc=5;oc-algo=\"loss\";oc-validity=100;oc-seq=1.000;branch=z\r\n\r\n",
			"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP h;branch=z" + tail + "\r\n\r\n"},
	} {
		out, ok := StampResponse([]byte(c.msg), fb)
		if c.want == "" {
			if ok || string(out) != c.msg {
				t.Errorf("%s: want unchanged, have %q", c.name, out)
			}
			continue
		}
		if !ok || string(out) != c.want {
			t.Errorf("%s:\nwant %q\nhave %q", c.name, c.want, out)
		}
		got, ok := ResponseFeedback(out)
		if !ok || got != fb {
			t.Errorf("%s: read back %+v %v, want %+v", c.name, got, ok, fb)
		}
	}
}

// TestController: the loss follows the server's refusals, rows as the
// intervals come.
func TestController(t *testing.T) {
	t0 := time.Unix(1000, 0)
	var c Controller
	steps := []struct {
		s    Sample
		want int
	}{
		{Sample{Admitted: 100}, 0},
		// Offered three times what it takes: two thirds refused, a
		// quarter of the way to 67%.
		{Sample{Admitted: 100, Refused: 200}, 17},
		// Clients shed 17%: the rest is still too much, on towards 67%.
		{Sample{Admitted: 100, Refused: 150}, 29},
		{Sample{Admitted: 100, Refused: 112}, 39},
		{Sample{Admitted: 100, Refused: 84}, 46},
		// No refusal: the loss steps down.
		{Sample{Admitted: 100}, 41},
		{Sample{Admitted: 100, Refused: 10}, 42},
		// Suspended: everything.
		{Sample{RefuseAll: true}, 100},
		// Nothing arrives while everything is shed: the loss steps down
		// so that some comes again.
		{Sample{}, 95},
		{Sample{}, 90},
		// A few refused of too few offered: no measure.
		{Sample{Admitted: 2, Refused: 1}, 85},
		// All of a few refused: a measure.
		{Sample{Refused: 3}, 89},
	}
	var last Seq
	for i, st := range steps {
		fb := c.Observe(st.s, t0.Add(time.Duration(i)*250*time.Millisecond))
		if fb.Loss != st.want {
			t.Errorf("interval %d %+v: want %d%%, have %d%%", i, st.s, st.want, fb.Loss)
		}
		if !fb.Seq.After(last) {
			t.Errorf("interval %d: oc-seq %v not after %v", i, fb.Seq, last)
		}
		last = fb.Seq
	}
	// Two intervals within one millisecond still get two oc-seqs.
	a := c.Observe(Sample{}, t0.Add(time.Hour))
	b := c.Observe(Sample{}, t0.Add(time.Hour))
	if !b.Seq.After(a.Seq) {
		t.Errorf("want a newer oc-seq in the same millisecond, have %v then %v", a.Seq, b.Seq)
	}
}

// TestState holds a client's feedback to RFC 7339's rules: oc-seq order,
// expiry after oc-validity, oc-validity 0 ending it at once.
func TestState(t *testing.T) {
	t0 := time.Unix(2000, 0)
	ms := func(n int) time.Duration { return time.Duration(n) * time.Millisecond }
	seq := func(n uint64) Seq { return Seq{Sec: n} }
	var s State
	rows := []struct {
		at    time.Duration
		fb    *Feedback // nil: only read the share
		taken bool
		share int
	}{
		{0, nil, false, 0},
		{0, &Feedback{Loss: 30, Validity: ms(500), Seq: seq(10)}, true, 30},
		{ms(100), &Feedback{Loss: 60, Validity: ms(500), Seq: seq(9)}, false, 30},  // older
		{ms(200), &Feedback{Loss: 60, Validity: ms(500), Seq: seq(10)}, false, 30}, // the same
		{ms(499), nil, false, 30},
		{ms(500), nil, false, 0}, // expired
		{ms(600), &Feedback{Loss: 60, Validity: ms(500), Seq: seq(11)}, true, 60},
		{ms(700), &Feedback{Loss: 60, Validity: 0, Seq: seq(12)}, true, 0}, // validity 0 ends it
		{ms(800), &Feedback{Loss: 40, Validity: ms(500), Seq: seq(11)}, false, 0},
		{ms(900), &Feedback{Loss: 140, Validity: ms(500), Seq: seq(13)}, true, 100},
	}
	for i, r := range rows {
		now := t0.Add(r.at)
		if r.fb != nil {
			if got := s.Take(*r.fb, now); got != r.taken {
				t.Errorf("row %d: taken: want %v, have %v", i, r.taken, got)
			}
		}
		if got := s.Share(now); got != r.share {
			t.Errorf("row %d: share: want %d, have %d", i, r.share, got)
		}
	}
}

// TestShed: the share shed follows the loss under a seeded source;
// requests within a dialog are never shed.
func TestShed(t *testing.T) {
	for _, loss := range []int{0, 10, 33, 50, 90, 100} {
		r := rand.New(rand.NewPCG(1, uint64(loss)))
		const n = 20000
		shed, inDialog := 0, 0
		for range n {
			if Shed(loss, false, r.Float64) {
				shed++
			}
			if Shed(loss, true, r.Float64) {
				inDialog++
			}
		}
		if got := float64(shed) / n * 100; got < float64(loss)-1.5 || got > float64(loss)+1.5 {
			t.Errorf("loss %d%%: shed %.1f%%", loss, got)
		}
		if inDialog != 0 {
			t.Errorf("loss %d%%: %d requests within dialogs shed", loss, inDialog)
		}
	}
}

func TestAddOffer(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h:5;branch=z9\r\nTo: <sip:a@b>\r\n\r\n",
			"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h:5;branch=z9;oc;oc-algo=\"loss\"\r\nTo: <sip:a@b>\r\n\r\n"},
		{"INVITE sip:a@b SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9;oc\r\n\r\n", ""},
		{"SIP/2.0 200 OK\r\nVia: SIP/2.0/UDP h;branch=z9\r\n\r\n", ""},
	} {
		got := string(AddOffer([]byte(c.in)))
		want := c.want
		if want == "" {
			want = c.in
		}
		if got != want {
			t.Errorf("want %q, have %q", want, got)
		}
	}
}
