package wire

import (
	"bytes"
	"testing"
)

func TestSessionNoteRoundTrip(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		method  byte
		toTag   bool
		expires int32
		branch  string
		callID  string
	}{
		{1, false, -1, "z9hG4bK-1", "a@b"},
		{7, true, 3600, "", "only-call-id"},
		{3, true, 0, "z9hG4bK-" + string(bytes.Repeat([]byte("x"), 300)), ""},
	} {
		note := SessionNote(c.method, c.toTag, c.expires, []byte(c.branch), []byte(c.callID))
		m, tt, e, br, id, ok := ParseSessionNote(note)
		if !ok || m != c.method || tt != c.toTag || e != c.expires || string(br) != c.branch || string(id) != c.callID {
			t.Fatalf("round trip of %+v: have %d %v %d %q %q %v", c, m, tt, e, br, id, ok)
		}
		// Every truncation is refused or parses to a prefix, never panics.
		for i := range note {
			if _, _, _, br, _, ok := ParseSessionNote(note[:i]); ok && len(br) != len(c.branch) {
				t.Fatalf("truncated at %d: a branch of %d bytes read as %d", i, len(c.branch), len(br))
			}
		}
	}
	if _, _, _, _, _, ok := ParseSessionNote(AdmitRequest(1, []byte("x"))); ok {
		t.Fatal("an admission request read as a session note")
	}
}

func TestConnClosedNote(t *testing.T) {
	t.Parallel()
	r, a, ok := ParseConnClosedNote(ConnClosedNote("idle", "127.0.0.1:5060"))
	if !ok || r != "idle" || a != "127.0.0.1:5060" {
		t.Fatalf("round trip: have %q %q %v", r, a, ok)
	}
	if _, _, ok := ParseConnClosedNote(SessionNote(1, false, -1, nil, []byte("x"))); ok {
		t.Fatal("a session note read as a closed connection's")
	}
	if _, _, ok := ParseConnClosedNote([]byte("CLS1idle")); ok {
		t.Fatal("a note without its separator read as whole")
	}
}

func TestForwardNote(t *testing.T) {
	t.Parallel()
	pid, from, msg, ok := ParseForwardNote(ForwardNote(4242, "127.0.0.1:5070", []byte("SIP/2.0 200 OK\r\n\r\n")))
	if !ok || pid != 4242 || from != "127.0.0.1:5070" || string(msg) != "SIP/2.0 200 OK\r\n\r\n" {
		t.Fatalf("round trip: have %d %q %q %v", pid, from, msg, ok)
	}
	for _, bad := range [][]byte{[]byte("FWD1"), []byte("FWD1\x05127.0.0.1"), HandOffNote("x", nil)} {
		if _, _, _, ok := ParseForwardNote(bad); ok {
			t.Errorf("%q read as a forward note", bad)
		}
	}
}

// Several notes in one CtlNotes message come out whole and in order.
func TestNotesRoundTrip(t *testing.T) {
	notes := [][]byte{SessionNote(1, false, -1, []byte("z9hG4bK-1"), []byte("call-1")), {}, SessionNote(2, true, 60, nil, []byte("call-2"))}
	b := []byte{CtlNotes}
	for _, n := range notes {
		b = AppendNote(b, n)
	}
	var have [][]byte
	if !EachNote(b[1:], func(n []byte) { have = append(have, n) }) || len(have) != len(notes) {
		t.Fatalf("want %d notes, have %d", len(notes), len(have))
	}
	for i := range notes {
		if string(have[i]) != string(notes[i]) {
			t.Errorf("note %d: want %q, have %q", i, notes[i], have[i])
		}
	}
	if EachNote(b[1:len(b)-1], func([]byte) {}) {
		t.Error("a message cut short reads whole")
	}
}
