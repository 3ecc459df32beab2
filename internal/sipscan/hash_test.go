package sipscan

import (
	"fmt"
	"testing"
)

// TestCallIDHashFixed pins values: the hash must not change between releases
// or processes, since every process that sees a Call-ID must agree on it.
func TestCallIDHashFixed(t *testing.T) {
	t.Parallel()
	tests := []struct {
		in   string
		want uint64
	}{
		{"", 0x399c5c40f80652d6},
		{"a", 0x24bf99edf7c72949},
		{"a84b4c76e66710@pc33.atlanta.com", 0xbfd486895f104ffd},
	}
	for _, tt := range tests {
		if have := CallIDHash([]byte(tt.in)); have != tt.want {
			t.Errorf("%q: want %#x, have %#x", tt.in, tt.want, have)
		}
	}
}

// TestCallIDHashSpread feeds Call-IDs as SIPp makes them (a counter, a pid
// and an address, differing in a few digits) and wants no collision and an
// even spread over buckets picked by the low bits.
func TestCallIDHashSpread(t *testing.T) {
	t.Parallel()
	const n, buckets = 100000, 64
	seen := make(map[uint64]string, n)
	var count [buckets]int
	for i := range n {
		id := fmt.Sprintf("%d-12550@127.0.0.1", i)
		h := CallIDHash([]byte(id))
		if prev, ok := seen[h]; ok {
			t.Fatalf("want no collision, have %q and %q", prev, id)
		}
		seen[h] = id
		count[h%buckets]++
	}
	for i, c := range count {
		if c < n/buckets*8/10 || c > n/buckets*12/10 {
			t.Errorf("bucket %d: want %d ± 20%%, have %d", i, n/buckets, c)
		}
	}
}

// Not parallel: it measures the process's allocations.
func TestCallIDHashTail(t *testing.T) {
	// The length takes part, so trailing zero bytes do not collide.
	a, b := CallIDHash([]byte("abc")), CallIDHash([]byte("abc\x00"))
	if a == b {
		t.Errorf("want different hashes, have %#x twice", a)
	}
	if n := testing.AllocsPerRun(100, func() { CallIDHash([]byte("x")) }); n != 0 {
		t.Errorf("want 0 allocations, have %v", n)
	}
}
