package sipmsg

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/sipvisor/sipvisor/internal/sipscan"
)

// FuzzParse checks that Parse, the value and URI readers, the splice
// writer and AppendReply never panic, that a rejected message gets a
// reason, that a spliced message parses again to the same Call-ID, CSeq
// and body with this server's Via on top, and a reply to the same Call-ID,
// CSeq and branch with a To tag.
func FuzzParse(f *testing.F) {
	for _, glob := range []string{"../sipscan/testdata/msgs/*.sip", "../sipscan/testdata/rfc4475/*/*.dat"} {
		files, err := filepath.Glob(glob)
		if err != nil {
			f.Fatal(err)
		}
		for _, file := range files {
			f.Add(readFile(f, file))
		}
	}
	f.Add(crlf(bye))
	dst := make([]byte, 0, 2048)
	via := []byte("Via: SIP/2.0/UDP 192.0.2.1;branch=z9hG4bK-x\r\n")
	f.Fuzz(func(t *testing.T, b []byte) {
		var m Msg
		if err := m.Parse(b); err != nil {
			if e, ok := err.(sipscan.Error); !ok || e.String() == "" {
				t.Fatalf("error without a reason: %v", err)
			}
			return
		}
		for i := range m.Headers {
			for p := m.Headers[i].ValStart; p < m.Headers[i].ValEnd; {
				v, next, ok := m.Value(&m.Headers[i], p)
				if ok {
					u, _ := ParseURI(AddrSpec(v))
					u.Param("lr")
				}
				if next <= p {
					t.Fatalf("values do not advance at %d", p)
				}
				p = next
			}
		}
		IPv4(m.SentBy)
		if !m.IsRequest {
			return
		}
		reply := m.AppendReply(dst[:0], 404, "Not Here", &Splice{Received: []byte("10.0.0.7"), Rport: 5060}, []byte("t1"))
		var rm Msg
		if err := rm.Parse(reply); err != nil {
			t.Fatalf("reply does not parse: %v at %d\n%q\nfrom\n%q", err, rm.ErrOffset, reply, b)
		}
		if rm.IsRequest || rm.StatusCode != 404 || !bytes.Equal(rm.CallID, m.CallID) || rm.CSeq != m.CSeq ||
			!bytes.Equal(rm.Branch, m.Branch) || !rm.HasToTag {
			t.Fatalf("reply differs: %q\nfrom\n%q", reply, b)
		}
		out := m.AppendSplice(dst[:0], &Splice{Via: via, Received: []byte("10.0.0.7"), Rport: 5060, MaxForwards: 69,
			DropRoutes: 1, ContentLength: true})
		var r Msg
		if err := r.Parse(out); err != nil {
			t.Fatalf("spliced message does not parse: %v at %d\n%q\nfrom\n%q", err, r.ErrOffset, out, b)
		}
		if !bytes.Equal(r.CallID, m.CallID) || r.CSeq != m.CSeq || !bytes.Equal(r.Body, m.Body) ||
			string(r.Branch) != "z9hG4bK-x" || r.MaxForwards != 69 {
			t.Fatalf("spliced message differs: %q\nfrom\n%q", out, b)
		}
	})
}

func readFile(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return b
}
