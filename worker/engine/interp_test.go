package engine

import (
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/config"
	"github.com/sipvisor/sipvisor/internal/testkit"
	"github.com/sipvisor/sipvisor/location"
	"github.com/sipvisor/sipvisor/script"
)

const fixture = `INVITE sip:bob@127.0.0.1:5060;transport=udp SIP/2.0
Via: SIP/2.0/UDP 10.0.0.9:5070;branch=z9hG4bK-x;rport
Max-Forwards: 5
From: "Alice" <sip:alice@example.com>;tag=ft
To: <sip:bob@example.com>
Call-ID: cid-1@x
CSeq: 7 INVITE
User-Agent: tester/1.0
Contact: <sip:alice@10.0.0.9:5070>
X-Num: 42
Content-Length: 0

`

type scriptRun struct {
	c    *msgCtx
	w    *Worker
	logs *testkit.SyncBuffer
}

// runOn runs cfg's main route on the request raw, on a worker with no
// sockets that is "myself" at 127.0.0.1:5060.
func runOn(t *testing.T, cfg, raw string) scriptRun {
	t.Helper()
	conf, err := config.Load("t.cfg", []byte(cfg))
	if err != nil {
		t.Fatalf("config: %v", err)
	}
	logs := &testkit.SyncBuffer{}
	w, err := NewWorker(Options{
		Script: conf.Script,
		Listen: []config.Socket{{Proto: "udp", Host: "127.0.0.1", Port: 5060}},
		Logger: slog.New(slog.NewTextHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
	})
	if err != nil {
		t.Fatal(err)
	}
	m, err := sip.ParseMessage([]byte(strings.ReplaceAll(raw, "\n", "\r\n")))
	if err != nil {
		t.Fatal(err)
	}
	c := w.newCtx(m.(*sip.Request), nil, source{proto: "udp", addr: netip.MustParseAddrPort("10.0.0.9:5070"), sock: -1})
	c.run(conf.Script.Routes[""])
	return scriptRun{c: c, w: w, logs: logs}
}

func TestConditions(t *testing.T) {
	t.Parallel()
	for _, row := range []struct {
		cond string
		want bool
	}{
		{`$rm == "INVITE"`, true},
		{`$rm != "INVITE"`, false},
		{`$ru =~ "^sip:bob@"`, true},
		{`$ru =~ "^SIP:BOB"`, true},
		{`$ru !~ "example"`, true},
		{`$ru !~ "bob"`, false},
		{`$rU == "bob" && $rd == "127.0.0.1" && $rp == 5060`, true},
		{`$fU == "alice" && $fd == "example.com"`, true},
		{`$fu == "sip:alice@example.com"`, true},
		{`$tU == "bob" && $td == "example.com"`, true},
		{`$ci == "cid-1@x" && $ua == "tester/1.0"`, true},
		{`$ct == "<sip:alice@10.0.0.9:5070>"`, true},
		{`$si == "10.0.0.9" && $sp == 5070`, true},
		{`$pr == "udp"`, true},
		{`$hdr(X-Num) > 41 && $hdr(X-Num) <= 42`, true},
		{`$hdr(x-num) < 42`, false},
		{`$hdr(X-Num) >= 43`, false},
		{`$hdr(f) =~ "tag=ft"`, true},
		{`$ru == myself`, true},
		{`$fu == myself`, false},
		{`$fu != myself`, true},
		{`!is_method("BYE")`, true},
		{`has_totag()`, false},
		{`$du == ""`, true},
		{`$var(unset) == ""`, true},
		{`(1 == 2) || ($rm == "INVITE" && !(2 == 3))`, true},
		{`$hdr(Missing)`, false},
		{`$ci`, true},
		{`2 == "2"`, true},
		{`"abc" == "abd"`, false},
		{`$rs == 200`, false},
		{`$hdr(X-Num) < "abc"`, false},
	} {
		t.Run(row.cond, func(t *testing.T) {
			r := runOn(t, "route { if ("+row.cond+") $var(r) = \"yes\"; else $var(r) = \"no\"; }", fixture)
			if have := r.c.vars["r"] == "yes"; have != row.want {
				t.Fatalf("want %v, have %v", row.want, have)
			}
		})
	}
}

func TestAssignments(t *testing.T) {
	t.Parallel()
	r := runOn(t, `route {
		$var(x) = $rU;
		$ru = "sip:carol@10.0.0.7:5080";
		$rU = "dave";
		$du = "sip:10.0.0.8:5090";
		$var(n) = 5;
		$ru = "not a uri";
	}`, fixture)
	for _, c := range []struct{ name, want, have string }{
		{"$var(x)", "bob", r.c.vars["x"]},
		{"$var(n)", "5", r.c.vars["n"]},
		{"$ru", "sip:dave@10.0.0.7:5080", r.c.req.Recipient.String()},
		{"$du", "sip:10.0.0.8:5090", r.c.du},
	} {
		if c.have != c.want {
			t.Errorf("%s: want %v, have %v", c.name, c.want, c.have)
		}
	}
	if !strings.Contains(r.logs.String(), "not a sip uri") || !strings.Contains(r.logs.String(), "t.cfg:7:") {
		t.Errorf("a bad $ru assignment wants a warning with its position, have:\n%s", r.logs.String())
	}
}

func TestFlow(t *testing.T) {
	t.Parallel()
	r := runOn(t, `route {
		$var(a) = "1";
		route(sub);
		$var(c) = "3";
		if ($var(b) == "2") { exit; }
		$var(d) = "4";
	}
	route[sub] {
		$var(b) = "2";
		return;
		$var(never) = "x";
	}`, fixture)
	want := map[string]string{"a": "1", "b": "2", "c": "3"}
	if len(r.c.vars) != len(want) || r.c.vars["a"] != "1" || r.c.vars["b"] != "2" || r.c.vars["c"] != "3" {
		t.Fatalf("want %v, have %v", want, r.c.vars)
	}
	if !r.c.stopped || r.c.dropped {
		t.Fatalf("exit: want stopped, not dropped; have stopped=%v dropped=%v", r.c.stopped, r.c.dropped)
	}

	r = runOn(t, `route { route(sub); $var(after) = "x"; }
	route[sub] { return(0); }`, fixture)
	if r.c.vars["after"] != "" || !r.c.stopped {
		t.Fatalf("return(0) ends the script: want no $var(after), have %q", r.c.vars["after"])
	}
	r = runOn(t, `route { drop; $var(after) = "x"; }`, fixture)
	if !r.c.dropped || r.c.vars["after"] != "" {
		t.Fatalf("drop: want dropped and stopped, have dropped=%v after=%q", r.c.dropped, r.c.vars["after"])
	}
	r = runOn(t, `route { route(loop); }
	route[loop] { route(loop); }`, fixture)
	if !r.c.stopped || !strings.Contains(r.logs.String(), "too deep") {
		t.Fatalf("endless recursion must stop with a warning, have:\n%s", r.logs.String())
	}
}

func TestTemplate(t *testing.T) {
	t.Parallel()
	r := runOn(t, `route { $var(s) = "u=$rU h=$hdr(X-Num) v=$var(none). $5 $notapv $hdr(unclosed"; }`, fixture)
	if want := "u=bob h=42 v=. $5 $notapv $hdr(unclosed"; r.c.vars["s"] != want {
		t.Fatalf("want %v, have %v", want, r.c.vars["s"])
	}
}

func TestEveryFunctionImplemented(t *testing.T) {
	t.Parallel()
	for name := range script.Functions {
		if functions[name] == nil {
			t.Errorf("%s is in script.Functions but has no implementation", name)
		}
	}
	for name := range functions {
		if _, ok := script.Functions[name]; !ok {
			t.Errorf("%s is implemented but not in script.Functions", name)
		}
	}
}

// TestFunctions checks each function on its own; t_relay, sl_send_reply,
// t_check_trans, t_on_reply and the registrar on the wire are in
// proxy_test.go.
func TestFunctions(t *testing.T) {
	t.Parallel()
	withHdr := func(h string) string { return strings.Replace(fixture, "X-Num: 42", h, 1) }
	hdr := func(r scriptRun, name string) string { return headerValue(r.c.req, name) }
	for _, row := range []struct {
		name  string
		cfg   string // the condition, or a whole route when it starts with "route"
		raw   string
		want  bool
		check func(t *testing.T, r scriptRun)
	}{
		{name: "mf_process_maxfwd_header decrements", cfg: `mf_process_maxfwd_header(10)`, want: true,
			check: func(t *testing.T, r scriptRun) {
				if have := hdr(r, "Max-Forwards"); have != "4" {
					t.Fatalf("want %v, have %v", 4, have)
				}
			}},
		{name: "mf_process_maxfwd_header adds", cfg: `mf_process_maxfwd_header("10")`, want: true,
			raw: strings.Replace(fixture, "Max-Forwards: 5\n", "", 1),
			check: func(t *testing.T, r scriptRun) {
				if have := hdr(r, "Max-Forwards"); have != "10" {
					t.Fatalf("want %v, have %v", 10, have)
				}
			}},
		{name: "mf_process_maxfwd_header at 0", cfg: `mf_process_maxfwd_header(10)`, want: false,
			raw: strings.Replace(fixture, "Max-Forwards: 5", "Max-Forwards: 0", 1)},
		{name: "is_method one of", cfg: `is_method("BYE|invite")`, want: true},
		{name: "is_method none", cfg: `is_method("BYE|CANCEL")`, want: false},
		{name: "has_totag", cfg: `has_totag()`, want: true, raw: strings.Replace(fixture, "To: <sip:bob@example.com>", "To: <sip:bob@example.com>;tag=x", 1)},
		// As the front door reads a tag (sipscan): names without case, spaces
		// around '=' allowed, values beyond RFC 3261's token.
		{name: "has_totag upper case", cfg: `has_totag()`, want: true, raw: strings.Replace(fixture, "To: <sip:bob@example.com>", "To: <sip:bob@example.com>;TAG=x", 1)},
		{name: "has_totag spaced", cfg: `has_totag()`, want: true, raw: strings.Replace(fixture, "To: <sip:bob@example.com>", "To: <sip:bob@example.com> ; tag = x ; y=1", 1)},
		{name: "has_totag lenient value", cfg: `has_totag()`, want: true, raw: strings.Replace(fixture, "To: <sip:bob@example.com>", "To: <sip:bob@example.com>;tag=abc@host/{x}", 1)},
		{name: "has_totag x-tag is not a tag", cfg: `has_totag()`, want: false, raw: strings.Replace(fixture, "To: <sip:bob@example.com>", "To: <sip:bob@example.com>;x-tag=1", 1)},
		{name: "is_myself default port", cfg: `is_myself("sip:x@127.0.0.1")`, want: true},
		{name: "is_myself other port", cfg: `is_myself("sip:x@127.0.0.1:5070")`, want: false},
		{name: "is_myself pv", cfg: `is_myself("$fu")`, want: false},
		{name: "is_myself bare pv", cfg: `is_myself($ru)`, want: true},
		{name: "append_hf", cfg: `append_hf("X-Added: $rU\r\n")`, want: true,
			check: func(t *testing.T, r scriptRun) {
				if have := hdr(r, "X-Added"); have != "bob" {
					t.Fatalf("want %v, have %v", "bob", have)
				}
			}},
		{name: "append_hf without a name", cfg: `append_hf("no colon")`, want: false},
		{name: "remove_hf", cfg: `remove_hf("user-agent")`, want: true,
			raw: withHdr("User-Agent: second"),
			check: func(t *testing.T, r scriptRun) {
				if have := hdr(r, "User-Agent"); have != "" {
					t.Fatalf("want every User-Agent gone, have %v", have)
				}
			}},
		{name: "remove_hf absent", cfg: `remove_hf("X-None")`, want: false},
		{name: "xlog", cfg: `xlog("L_WARN", "hello $rU from $si")`, want: true,
			check: func(t *testing.T, r scriptRun) {
				if l := r.logs.String(); !strings.Contains(l, "level=WARN") || !strings.Contains(l, "hello bob from 10.0.0.9") {
					t.Fatalf("want a warning line with the text expanded, have:\n%s", l)
				}
			}},
		{name: "xlog one argument", cfg: `xlog("plain $ci")`, want: true,
			check: func(t *testing.T, r scriptRun) {
				if l := r.logs.String(); !strings.Contains(l, "level=INFO") || !strings.Contains(l, "plain cid-1@x") {
					t.Fatalf("want an info line, have:\n%s", l)
				}
			}},
		{name: "force_rport", cfg: `force_rport()`, want: true,
			raw: strings.Replace(fixture, ";rport", "", 1),
			check: func(t *testing.T, r scriptRun) {
				if v := r.c.req.Via().Value(); !strings.Contains(v, "rport=5070") || !strings.Contains(v, "received=10.0.0.9") {
					t.Fatalf("want rport and received on the top Via, have %v", v)
				}
			}},
		{name: "usleep", cfg: `usleep(1)`, want: true},
		{name: "usleep not a number", cfg: `usleep("soon")`, want: false},
		{name: "sleep", cfg: `sleep(0)`, want: true},
		{name: "cpu_burn", cfg: `cpu_burn(50)`, want: true},
		{name: "cpu_burn negative", cfg: `cpu_burn("-1")`, want: false},
		{name: "record_route", cfg: `record_route()`, want: true,
			check: func(t *testing.T, r scriptRun) {
				if !r.c.rr {
					t.Fatal("want the request marked for record-routing")
				}
			}},
		{name: "loose_route", cfg: `loose_route()`, want: true,
			raw: withHdr("Route: <sip:127.0.0.1:5060;lr>, <sip:10.0.0.50;lr>"),
			check: func(t *testing.T, r scriptRun) {
				if routes := r.c.req.GetHeaders("Route"); len(routes) != 1 || r.c.du != "sip:10.0.0.50;lr" {
					t.Fatalf("want our Route popped and $du the next one, have %d routes, $du %q", len(routes), r.c.du)
				}
			}},
		{name: "loose_route without Route", cfg: `loose_route()`, want: false},
		{name: "t_check_trans new request", cfg: `t_check_trans()`, want: false},
		{name: "t_on_reply and t_on_failure", want: true,
			cfg: `route { t_on_reply("r"); t_on_failure("f"); $var(r) = "yes"; }
			onreply_route[r] { } failure_route[f] { }`,
			check: func(t *testing.T, r scriptRun) {
				if r.c.onReply != "r" || r.c.onFailure != "f" {
					t.Fatalf("want r and f armed, have %q and %q", r.c.onReply, r.c.onFailure)
				}
			}},
		{name: "lookup unknown", cfg: `lookup("location")`, want: false},
	} {
		t.Run(row.name, func(t *testing.T) {
			cfg := row.cfg
			if !strings.HasPrefix(cfg, "route") {
				cfg = "route { if (" + cfg + ") $var(r) = \"yes\"; }"
			}
			raw := row.raw
			if raw == "" {
				raw = fixture
			}
			r := runOn(t, cfg, raw)
			if have := r.c.vars["r"] == "yes"; have != row.want {
				t.Fatalf("result: want %v, have %v\n%s", row.want, have, r.logs.String())
			}
			if row.check != nil {
				row.check(t, r)
			}
		})
	}
}

func TestSaveLookup(t *testing.T) {
	t.Parallel()
	reg := `REGISTER sip:127.0.0.1 SIP/2.0
Via: SIP/2.0/UDP 10.0.0.9:5070;branch=z9hG4bK-r
From: <sip:bob@127.0.0.1>;tag=b
To: <sip:bob@127.0.0.1>
Call-ID: reg@x
CSeq: 3 REGISTER
Contact: <sip:bob@10.0.0.9:5070>;expires=60, <sip:bob@10.0.0.9:5072>
Expires: 30
Content-Length: 0

`
	conf := `route { if (save("location")) $var(r) = "yes"; }`
	r := runOn(t, conf, reg)
	if r.c.vars["r"] != "yes" {
		t.Fatalf("save: want true, have false\n%s", r.logs.String())
	}
	bs, _ := r.w.opt.Store.Lookup(r.w.aorOf(&sip.Uri{User: "bob", Host: "127.0.0.1"}))
	if len(bs) != 2 || bs[0].Contact != "sip:bob@10.0.0.9:5070" || bs[0].CSeq != 3 || bs[0].Received != "10.0.0.9:5070" {
		t.Fatalf("want two bindings, the one with expires=60 first, have %+v", bs)
	}
	if left := time.Until(bs[1].Expires); left > 31*time.Second || left < 20*time.Second {
		t.Fatalf("the Expires header applies without a param: want about 30s, have %v", left)
	}

	// lookup on a request to bob on the same worker store.
	m, _ := sip.ParseMessage([]byte(strings.ReplaceAll(fixture, "\n", "\r\n")))
	c := r.w.newCtx(m.(*sip.Request), nil, source{sock: -1})
	if !fnLookup(c, nil) || c.req.Recipient.String() != "sip:bob@10.0.0.9:5070" {
		t.Fatalf("lookup: want $ru the newest contact, have %v", c.req.Recipient.String())
	}

	// Contact: * with Expires: 0 removes them all; with another expiry it is refused.
	star := strings.Replace(strings.Replace(reg, "Contact: <sip:bob@10.0.0.9:5070>;expires=60, <sip:bob@10.0.0.9:5072>", "Contact: *", 1), "Expires: 30", "Expires: 0", 1)
	m, _ = sip.ParseMessage([]byte(strings.ReplaceAll(star, "\n", "\r\n")))
	c = r.w.newCtx(m.(*sip.Request), nil, source{sock: -1})
	if !fnSave(c, nil) {
		t.Fatal("save with Contact: *: want true, have false")
	}
	if bs, _ := r.w.opt.Store.Lookup("bob"); len(bs) != 0 {
		t.Fatalf("after Contact: *: want none, have %+v", bs)
	}
	m, _ = sip.ParseMessage([]byte(strings.ReplaceAll(strings.Replace(star, "Expires: 0", "Expires: 10", 1), "\n", "\r\n")))
	if fnSave(r.w.newCtx(m.(*sip.Request), nil, source{sock: -1}), nil) {
		t.Fatal("Contact: * with Expires: 10: want refused, have accepted")
	}
	var _ location.Store = r.w.opt.Store
}
