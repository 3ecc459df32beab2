package ticketkey

import (
	"bytes"
	"testing"
	"time"
)

func TestRatchet(t *testing.T) {
	t.Parallel()
	t0 := time.Unix(1_800_000_000, 0)
	a, err := New(t0)
	if err != nil {
		t.Fatal(err)
	}
	if ks := a.Keys(); len(ks) != 1 {
		t.Fatalf("a new ratchet: want one key, have %d", len(ks))
	}
	first := a.Keys()[0]

	// A copy made now (a worker spawned now) and one made a period later
	// (a worker spawned then) agree once both are at the same period.
	enc, _ := a.MarshalBinary()
	var b Ratchet
	if err := b.UnmarshalBinary(enc); err != nil {
		t.Fatal(err)
	}
	if a.Advance(t0.Add(time.Hour)) && periodOf(t0.Add(time.Hour)) == periodOf(t0) {
		t.Error("want no step within a period")
	}
	t1 := t0.Add(Period)
	if !a.Advance(t1) {
		t.Fatal("want a step a period on")
	}
	enc1, _ := a.MarshalBinary()
	var c Ratchet
	if err := c.UnmarshalBinary(enc1); err != nil {
		t.Fatal(err)
	}
	b.Advance(t1)
	ka, kb, kc := a.Keys(), b.Keys(), c.Keys()
	if len(ka) != 2 || ka[1] != first || ka[0] == first {
		t.Fatalf("a period on: want a new sealing key and the first one to open, have %x", ka)
	}
	for _, ks := range [][][32]byte{kb, kc} {
		if len(ks) != 2 || ks[0] != ka[0] || ks[1] != ka[1] {
			t.Errorf("copies disagree: %x against %x", ks, ka)
		}
	}
	// Three periods on, in one step: the first key is gone, and the keys
	// are those of stepping one period at a time.
	b.Advance(t1.Add(Period))
	b.Advance(t1.Add(3 * Period))
	a.Advance(t1.Add(3 * Period))
	if ka, kb := a.Keys(), b.Keys(); ka[0] != kb[0] || ka[1] != kb[1] || ka[1] == first || ka[0] == first {
		t.Errorf("want equal keys without the first, have %x and %x", ka, kb)
	}
	// The clock going back changes nothing.
	before := a.Keys()
	if a.Advance(t0) || a.Keys()[0] != before[0] {
		t.Error("a clock going back moved the ratchet")
	}
}

func TestUnmarshalBad(t *testing.T) {
	t.Parallel()
	var r Ratchet
	if err := r.UnmarshalBinary(make([]byte, Size)); err != ErrNone {
		t.Errorf("zeros: want ErrNone, have %v", err)
	}
	if err := r.UnmarshalBinary(make([]byte, Size-1)); err == nil {
		t.Error("short: want an error")
	}
	bad := bytes.Repeat([]byte{7}, Size)
	if err := r.UnmarshalBinary(bad); err == nil {
		t.Error("unknown format: want an error")
	}
}
