package loadgen

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestScenarioErrorsNameFileAndLine(t *testing.T) {
	t.Parallel()
	head := "<?xml version=\"1.0\" encoding=\"ISO-8859-1\" ?>\n<scenario name=\"x\">\n"
	send := "  <send>\n    <![CDATA[\n      OPTIONS sip:[service]@[remote_ip] SIP/2.0\n      Call-ID: [call_id]\n    ]]>\n  </send>\n"
	for _, tc := range []struct {
		name, body, want string
	}{
		{"element", send + "  <sendCmd/>\n", "t.xml:9: element <sendCmd> is not supported"},
		{"keyword", "  <send>\n    <![CDATA[\n      OPTIONS sip:x SIP/2.0\n      X-Tdm: [tdmmap]\n    ]]>\n  </send>\n", "t.xml:6: keyword [tdmmap] is not supported"},
		{"attribute", send + "  <recv response=\"200\" response_txn=\"a\"/>\n", "t.xml:9: attribute response_txn of <recv> is not supported"},
		{"action", send + "  <recv response=\"200\">\n    <action>\n      <exec command=\"ls\"/>\n    </action>\n  </recv>\n", "t.xml:11: action <exec> is not supported"},
		{"label", send + "  <recv response=\"200\" next=\"nowhere\"/>\n", "t.xml:9: label \"nowhere\" is not defined"},
		{"regexp response", send + "  <recv response=\"2..\" regexp_match=\"true\"/>\n", "t.xml:9: attribute regexp_match of <recv> is not supported"},
		{"xml", send + "  <recv response=\"200\">\n", "t.xml:10: XML: unexpected EOF"},
		{"distribution", send + "  <pause distribution=\"pareto\" k=\"1\" x_m=\"2\"/>\n", "t.xml:9: attribute k of <pause> is not supported"},
	} {
		_, err := ParseScenario("t.xml", []byte(head+tc.body+"</scenario>\n"), nil)
		if tc.name == "xml" {
			_, err = ParseScenario("t.xml", []byte(head+tc.body), nil)
		}
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: want error %q, have %v", tc.name, tc.want, err)
		}
	}
}

// Every scenario file in the repository, sipload's own (-sd) and, when SIPp
// is installed, SIPp's (sipp -sd) compile.
func TestScenarioFilesCompile(t *testing.T) {
	t.Parallel()
	files, _ := filepath.Glob("../e2e/testdata/*.xml")
	b, _ := filepath.Glob("../bench/*.xml")
	files = append(files, b...)
	keys := map[string]string{"contact_port": "5070", "contact_transport": "udp", "expires": "3600"}
	for _, f := range files {
		if _, err := LoadScenario(f, keys); err != nil {
			t.Errorf("%v", err)
		}
	}
	for _, name := range []string{"uac", "uas", "register", "options"} {
		x, err := BuiltinXML(name)
		if err != nil {
			t.Fatal(err)
		}
		sc, err := ParseScenario(name+".xml", x, nil)
		if err != nil {
			t.Errorf("%v", err)
			continue
		}
		if sc.uas != (name == "uas") {
			t.Errorf("%s: want uas %v", name, name == "uas")
		}
	}
	if _, err := os.Stat(sippPath); err != nil {
		t.Logf("SIPp not installed: its own scenarios not compiled")
		return
	}
	for _, name := range []string{"uac", "uas", "regexp", "branchc", "branchs", "uac_pcap"} {
		out, err := exec.Command(sippPath, "-sd", name).Output()
		if len(out) == 0 { // sipp -sd exits 99 after printing
			t.Fatalf("sipp -sd %s: %v", name, err)
		}
		_, err = ParseScenario("sipp-"+name+".xml", out, nil)
		switch name {
		case "uac", "uas", "regexp", "branchc", "branchs":
			if err != nil {
				t.Errorf("sipp -sd %s: %v", name, err)
			}
		default:
			// Media play is not sipload's: the error must say where.
			if err == nil || !strings.Contains(err.Error(), "sipp-uac_pcap.xml:") {
				t.Errorf("sipp -sd uac_pcap: want a FILE:LINE error, have %v", err)
			}
		}
	}
}

func TestTemplateFollowsSIPpTextRules(t *testing.T) {
	t.Parallel()
	src := `<scenario><send><![CDATA[

      INVITE sip:[service]@[remote_ip]:[remote_port] SIP/2.0
      [last_Via:]
      Via: SIP/2.0/[transport] [local_ip]:[local_port];branch=[branch]
      CSeq: [cseq] INVITE
      Content-Length: [len]

      v=0
      o=- [call_number]

    ]]></send><send><![CDATA[
      BYE sip:x SIP/2.0
      CSeq: [cseq+1] BYE
      Content-Length: 0
    ]]></send></scenario>`
	sc, err := ParseScenario("t.xml", []byte(src), nil)
	if err != nil {
		t.Fatal(err)
	}
	c := &core{o: &Options{Service: "svc"}, ep: newEndpoint("127.0.0.1", 5070, "127.0.0.1:5060", "UDP", "svc", "r")}
	x := &xrole{core: c, sc: sc, pid: "42", remIP: "10.0.0.1", remPort: 5060, locPort: 5070}
	cl := &call{n: 7, callID: "c1", x: &xstate{cseq: 1}}
	b, err := x.build(nil, cl, sc.cmds[0].msg, sc.cmds[0], 0)
	if err != nil {
		t.Fatal(err)
	}
	want := "INVITE sip:svc@10.0.0.1:5060 SIP/2.0\r\nVia: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK-42-7-0\r\nCSeq: 1 INVITE\r\nContent-Length: 12\r\n\r\nv=0\r\no=- 7\r\n"
	if string(b) != want {
		t.Errorf("want\n%q\nhave\n%q", want, b)
	}
	b, _ = x.build(nil, cl, sc.cmds[1].msg, sc.cmds[1], 1)
	if want := "BYE sip:x SIP/2.0\r\nCSeq: 2 BYE\r\nContent-Length: 0\r\n\r\n"; string(b) != want {
		t.Errorf("want\n%q\nhave\n%q", want, b)
	}
}

func TestDigestResponse(t *testing.T) {
	t.Parallel()
	// RFC 2617 3.5's example, and RFC 7616 3.9.1's with SHA-256.
	for _, tc := range []struct {
		name, chal, user, pass, method, uri, want string
	}{
		{"MD5", `Digest realm="testrealm@host.com", qop="auth,auth-int", nonce="dcd98b7102dd2f0e8b11d0f600bfb0c093", opaque="5ccc069c403ebaf9f0171e9517f40e41"`,
			"Mufasa", "Circle Of Life", "GET", "/dir/index.html", `response="6629fae49393a05397450978507c4ef1"`},
		{"SHA-256", `Digest realm="http-auth@example.org", qop="auth, auth-int", algorithm=SHA-256, nonce="7ypf/xlj9XXwfDPEoM4URrv/xwf94BcCAzFZH4GiTo0v", opaque="FQhe/qaU925kfnzjCev0ciny7QMkPqMAFRtzCUYo5tdS"`,
			"Mufasa", "Circle of Life", "GET", "/dir/index.html", `response="753927fa0e85d155564e2e272a28d1802ca10daf4496794697cf8db5856cb6c1"`},
	} {
		cnonce := map[string]string{"MD5": "0a4f113b", "SHA-256": "f2/wE4q74E6zIJEtWaHKaf5wv/H5QzzpXusqGemxURZJ"}[tc.name]
		algo, _ := authParam(tc.chal, "algorithm")
		h := map[string]string{"": "MD5", "SHA-256": "SHA-256"}[algo]
		_ = h
		realm, _ := authParam(tc.chal, "realm")
		nonce, _ := authParam(tc.chal, "nonce")
		var resp string
		if tc.name == "MD5" {
			resp = digestResponse(md5New, tc.user, realm, tc.pass, tc.method, tc.uri, nonce, "00000001", cnonce, "auth", nil)
		} else {
			resp = digestResponse(sha256New, tc.user, realm, tc.pass, tc.method, tc.uri, nonce, "00000001", cnonce, "auth", nil)
		}
		if `response="`+resp+`"` != tc.want {
			t.Errorf("%s: want %s, have %s", tc.name, tc.want, resp)
		}
	}
}

func TestInjectionOrder(t *testing.T) {
	t.Parallel()
	in, err := parseInjection("u.csv", []byte("SEQUENTIAL\n# user;pass\nalice;a1\nbob;b2\n"))
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for i := 0; i < 3; i++ {
		got = append(got, in.pick(nil))
	}
	if got[0] != 0 || got[1] != 1 || got[2] != 0 || in.lines[1][1] != "b2" {
		t.Errorf("want lines 0 1 0 and bob's b2, have %v %v", got, in.lines)
	}
	for _, bad := range []string{"", "ORDERED\na;b\n", "SEQUENTIAL\n", "USER\na\n"} {
		if _, err := parseInjection("u.csv", []byte(bad)); err == nil || !strings.HasPrefix(err.Error(), "u.csv") {
			t.Errorf("%q: want an error naming the file, have %v", bad, err)
		}
	}
}
