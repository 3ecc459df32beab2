package wire

import (
	"maps"
	"net/netip"
	"slices"
	"testing"
)

func TestBansFrameRoundTrip(t *testing.T) {
	exempt := []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("2001:db8::/32")}
	bans := map[netip.Addr]int64{netip.MustParseAddr("192.0.2.1"): 1e18, netip.MustParseAddr("2001:db8::7"): 42}
	f := BansFrame(true, 2e9, 12, exempt, bans)
	reply, window, step, ex, bs, err := ParseBansFrame(f)
	if err != nil || !reply || window != 2e9 || step != 12 || !slices.Equal(ex, exempt) || !maps.Equal(bs, bans) {
		t.Fatalf("have %v %v %v %v %v %v", reply, window, step, ex, bs, err)
	}
	for _, cut := range []int{1, 10, len(f) - 1} {
		if _, _, _, _, _, err := ParseBansFrame(f[:cut]); err == nil {
			t.Errorf("a frame cut at %d parsed", cut)
		}
	}
}

func TestBanNotesRoundTrip(t *testing.T) {
	a := netip.MustParseAddr("192.0.2.1")
	if src, n, ok := ParsePikeNote(PikeNote(a, 12)); !ok || src != a || n != 12 {
		t.Fatalf("pike note: %v %v %v", src, n, ok)
	}
	if src, user, ok := ParseAuthFailNote(AuthFailNote(a, "alice")); !ok || src != a || user != "alice" {
		t.Fatalf("auth note: %v %v %v", src, user, ok)
	}
	if _, _, ok := ParsePikeNote(AuthFailNote(a, "x")); ok {
		t.Fatal("an auth note read as a pike note")
	}
}
