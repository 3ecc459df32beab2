package sipscan

import (
	"bytes"
	"path/filepath"
	"testing"
)

// FuzzScan checks that Scan and AppendReply never panic, that what Scan
// returns aliases the input, and that a reply built for a cleanly scanned
// request scans again as a response to the same Call-ID and CSeq.
func FuzzScan(f *testing.F) {
	for _, glob := range []string{"testdata/msgs/*.sip", "testdata/rfc4475/*/*.dat"} {
		files, err := filepath.Glob(glob)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			f.Add(readMsg(f, file[len("testdata/"):]))
		}
	}
	f.Add([]byte("\r\n\r\n"))
	f.Add([]byte("OPTIONS sip:a@b SIP/2.0\nv:SIP/2.0/UDP h\ni:x\nCSeq:1 OPTIONS\nf:<sip:a@b>\nt:<sip:b@c>\n\n"))
	dst := make([]byte, 0, 1024)
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Msg
		err := Scan(b, &m)
		for _, s := range [][]byte{m.MethodBytes, m.RequestURI, m.CSeqMethodBytes, m.CallID,
			m.FromTag, m.ToTag, m.Branch, m.SentBy, m.Transport, m.Body} {
			if !inside(b, s) {
				t.Fatalf("%q does not alias the input", s)
			}
		}
		reply := AppendReply(dst[:0], b, &m, 503, "", 5)
		if err != nil || len(reply) == 0 {
			return
		}
		var r Msg
		if err := Scan(reply, &r); err != nil {
			t.Fatalf("reply does not scan: %v at %d\n%q\nfor\n%q", err, r.ErrOffset, reply, b)
		}
		if r.IsRequest || r.StatusCode != 503 {
			t.Fatalf("want a 503, have request %v status %d", r.IsRequest, r.StatusCode)
		}
		if !bytes.Equal(r.CallID, m.CallID) || r.CSeq != m.CSeq || !bytes.Equal(r.CSeqMethodBytes, m.CSeqMethodBytes) {
			t.Fatalf("want Call-ID %q CSeq %d %q, have %q %d %q", m.CallID, m.CSeq, m.CSeqMethodBytes, r.CallID, r.CSeq, r.CSeqMethodBytes)
		}
		if !bytes.Equal(r.Branch, m.Branch) || !r.HasToTag || m.HasToTag && !bytes.Equal(r.ToTag, m.ToTag) {
			t.Fatalf("want branch %q and a To tag, have %q %q", m.Branch, r.Branch, r.ToTag)
		}
	})
}
