package txn

import "testing"

// A key is the same whether written from strings or bytes; an ACK's is
// its INVITE's. Not parallel: it counts allocations.
func TestKeys(t *testing.T) {
	s := string(AppendServerKey(nil, "z9hG4bK-1", "10.0.0.1", 5070, "ACK"))
	b := string(AppendServerKey(nil, []byte("z9hG4bK-1"), []byte("10.0.0.1"), 5070, []byte("INVITE")))
	if want := "z9hG4bK-1|10.0.0.1:5070|INVITE"; s != want || b != want {
		t.Fatalf("server key: want %q, have %q and %q", want, s, b)
	}
	if s, b := string(AppendDialogKey(nil, "c1", "ft", 7)), string(AppendDialogKey(nil, []byte("c1"), []byte("ft"), 7)); s != "c1|ft|7" || b != s {
		t.Fatalf("dialog key: want %q, have %q and %q", "c1|ft|7", s, b)
	}
	if LocalTag("c", "f", "b") != LocalTag([]byte("c"), []byte("f"), []byte("b")) || LocalTag("c", "f", "b") == LocalTag("c", "f", "x") {
		t.Fatal("local tag: want the same of the same fields, another of others")
	}
	var buf [32]byte
	if n := testing.AllocsPerRun(100, func() { AppendServerKey(buf[:0], []byte("b"), []byte("h"), 1, []byte("BYE")) }); n != 0 {
		t.Fatalf("want 0 allocations, have %v", n)
	}
}
