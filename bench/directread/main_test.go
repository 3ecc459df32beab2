package main

import (
	"math"
	"os"
	"testing"

	"github.com/sipvisor/sipvisor/internal/sipscan"
)

// TestMain lets the test binary be the receivers its runs start, as the
// command is its own.
func TestMain(m *testing.M) {
	if role := os.Getenv(envRole); role != "" {
		if err := runReceiver(role); err != nil {
			os.Stderr.WriteString(err.Error() + "\n")
			os.Exit(1)
		}
		return
	}
	os.Exit(m.Run())
}

// The messages must be what the receivers read back: each one parses, and
// its Call-ID and method give the call and the kind it was made for.
func TestMessagesReadBack(t *testing.T) {
	var m sipscan.Msg
	buf := make([]byte, 0, 1500)
	for k := 0; k < 200; k++ {
		call, kind, ok := slotMessage(k)
		if !ok {
			continue
		}
		if !sent(call, kind, k+1) || sent(call, kind, k) {
			t.Fatalf("slot %d: sent() disagrees with slotMessage", k)
		}
		buf = message(buf, call, kind)
		if err := sipscan.Scan(buf, &m); err != nil {
			t.Fatalf("slot %d: %v\n%s", k, err, buf)
		}
		got, ok := callIndex(m.CallID)
		if !ok || got != call || kindOf(m.Method) != kind {
			t.Fatalf("slot %d: read back call %d kind %d, made call %d kind %d", k, got, kindOf(m.Method), call, kind)
		}
		if kind == kindInvite && (len(buf) < 550 || len(buf) > 700) {
			t.Errorf("INVITE of %d bytes, meant to be about 600", len(buf))
		}
	}
}

// Every design runs end to end with real processes and sockets, and what
// its children count adds up.
func TestDesignsRun(t *testing.T) {
	c := config{secs: 0.3, warmup: 0.1}
	for _, d := range []string{designA, designBPoll, designBExcl, designBBlock, designCRand, designCHash, designD} {
		t.Run(d, func(t *testing.T) {
			res, err := c.run(point{design: d, n: 2, rate: 1000, rep: 1})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.children) != 2 || (d == designA) != (res.reader != nil) {
				t.Fatalf("%d children, reader %v", len(res.children), res.reader != nil)
			}
			if res.recv() == 0 || res.dups != 0 || res.bad != 0 {
				t.Fatalf("received %d, %d twice, %d unreadable", res.recv(), res.dups, res.bad)
			}
			if res.lost+int(res.recv()) > res.snd.sent {
				t.Fatalf("%d lost and %d received in the window of %d sent", res.lost, res.recv(), res.snd.sent)
			}
			switch d {
			case designCHash:
				// One source 4-tuple, one hash: one socket gets all.
				if !math.IsInf(res.fairness(), 1) {
					t.Errorf("4-tuple hash spread one peer: %s", res.line())
				}
			case designCRand, designD, designA:
				if math.IsInf(res.fairness(), 1) {
					t.Errorf("a child got nothing: %s", res.line())
				}
			}
			if d == designA && res.passed != 0 {
				t.Errorf("Call-ID affinity broken: %d passed on", res.passed)
			}
		})
	}
}
