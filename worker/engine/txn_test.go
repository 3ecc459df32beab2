package engine

import (
	"hash/fnv"
	"net/netip"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/emiago/sipgo/sip"
)

// The Via line written into relayed requests reads as sipgo writes the same
// header: IPv6 hosts in brackets, a port only when there is one. sipgo
// leaves a v4-mapped address unbracketed, which makes its port part of the
// address; the line keeps RFC 3261's brackets there.
func TestAppendVia(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct{ proto, local string }{
		{"UDP", "127.0.0.1:5060"},
		{"TCP", "10.1.2.3:40000"},
		{"UDP", "[::1]:5060"},
		{"UDP", "[2001:db8::7]:5080"},
		{"UDP", "192.0.2.9:0"},
	} {
		ap := netip.MustParseAddrPort(tc.local)
		via := &sip.ViaHeader{ProtocolName: "SIP", ProtocolVersion: "2.0", Transport: tc.proto,
			Host: ap.Addr().String(), Port: int(ap.Port()), Params: sip.HeaderParams{{K: "branch", V: "z9hG4bK-x.1"}}}
		var want strings.Builder
		want.WriteString("Via: ")
		want.WriteString(via.Value())
		want.WriteString("\r\n")
		if have := string(appendVia(nil, tc.proto, ap, "z9hG4bK-x.1")); have != want.String() {
			t.Errorf("%s %s: want %q, have %q", tc.proto, tc.local, want.String(), have)
		}
	}
	mapped := "Via: SIP/2.0/UDP [::ffff:192.0.2.1]:5060;branch=b\r\n"
	if have := string(appendVia(nil, "UDP", netip.MustParseAddrPort("[::ffff:192.0.2.1]:5060"), "b")); have != mapped {
		t.Errorf("v4-mapped: want %q, have %q", mapped, have)
	}
}

// The tag of the replies a worker makes is FNV-1a over the Call-ID, the
// From tag and the branch, as it always was, and isLocalTag recognises it
// and nothing else.
func TestLocalTag(t *testing.T) {
	t.Parallel()
	p := sip.NewParser()
	for i, raw := range []string{
		"INVITE sip:b@h SIP/2.0\r\nVia: SIP/2.0/UDP h;branch=z9hG4bK-1\r\nFrom: <sip:a@h>;tag=f1\r\nTo: <sip:b@h>\r\nCall-ID: c1\r\nCSeq: 1 INVITE\r\nContent-Length: 0\r\n\r\n",
		"ACK sip:b@h SIP/2.0\r\nVia: SIP/2.0/UDP h;BRANCH = z9hG4bK-2\r\nFrom: <sip:a@h>\r\nTo: <sip:b@h>;tag=x\r\nCall-ID: c2@h\r\nCSeq: 1 ACK\r\nContent-Length: 0\r\n\r\n",
	} {
		m, err := p.ParseSIP([]byte(raw))
		if err != nil {
			t.Fatal(err)
		}
		req := m.(*sip.Request)
		h := fnv.New64a()
		h.Write([]byte(*req.CallID()))
		if tag, ok := param(req.From().Params, "tag"); ok {
			h.Write([]byte(tag))
		}
		h.Write([]byte(branchOf(req.Via())))
		want := strconv.FormatUint(h.Sum64(), 36)
		if have := localTag(req); have != want {
			t.Errorf("%d: want tag %q, have %q", i, want, have)
		}
		if !isLocalTag(req, want) || isLocalTag(req, want+"0") || isLocalTag(req, want[1:]) || isLocalTag(req, "") {
			t.Errorf("%d: isLocalTag does not tell %q from its neighbours", i, want)
		}
	}
}

func TestBranchOwner(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		branch string
		pid    int
		ok     bool
	}{
		{"z9hG4bK0a1b2c3d-2n9c.1", 2*36*36*36 + 23*36*36 + 9*36 + 12, true},
		{"z9hG4bK0a1b2c3d-1.1f", 1, true},
		{"z9hG4bK0a1b2c3d.1", 0, false},          // no pid
		{"z9hG4bK0a1b2c3d-.1", 0, false},         // empty pid
		{"z9hG4bK0a1b2c3d-12", 0, false},         // no dot
		{"z9hG4bK-14844-2-7", 0, false},          // SIPp's
		{"z9hG4bK0a1b2c3d-1A.1", 0, false},       // not base 36 lower case
		{"z9hG4bK0a1b2c3d-zzzzzzzz.1", 0, false}, // too large
	} {
		pid, ok := branchOwner([]byte(c.branch))
		if pid != c.pid || ok != c.ok {
			t.Errorf("%s: want %d %v, have %d %v", c.branch, c.pid, c.ok, pid, ok)
		}
	}
	p := startProxy(t, "route { exit; }", nil)
	var branch string
	p.do(func() { branch = p.w.newBranch() })
	if pid, ok := branchOwner([]byte(branch)); !ok || pid != os.Getpid() {
		t.Errorf("a branch of ours: want our pid %d, have %d %v", os.Getpid(), pid, ok)
	}
}
