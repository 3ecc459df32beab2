package config

import (
	"regexp"
	"strings"
	"testing"
)

// grammarWords are the marks of a parser talking about itself: rule names,
// its "expected" dumps and the repetition signs of its productions.
var grammarWords = regexp.MustCompile(`AST\b|Tok\b|Expr\b|\bexpected\b|unexpected token|<EOF>|\)[*?+]|@@|\bPrimary\b|\bBodyBlock\b`)

// loadLines loads src as k.cfg and gives its errors as LINE:COL: message.
func loadLines(src string) []string {
	_, err := Load("k.cfg", []byte(src))
	if err == nil {
		return nil
	}
	lines := strings.Split(err.Error(), "\n")
	for i, l := range lines {
		lines[i] = strings.TrimPrefix(l, "k.cfg:")
	}
	return lines
}

// TestKamailioMistakes holds what a Kamailio or OpenSIPS user types on a
// first try, with the exact answer each gets. A socket and a route are
// added where the mistake alone would miss them.
func TestKamailioMistakes(t *testing.T) {
	t.Parallel()
	const sock = "socket = udp:127.0.0.1:5060\n"
	for _, tc := range []struct {
		name, src string
		want      []string
	}{
		{"loadmodule", "loadmodule \"tm.so\"\n" + sock + "route { exit; }\n", []string{
			"1:1: sipvisor has no modules to load: the registrar, transactions, authentication and every script function are built in (docs/SCRIPT.md lists them); delete the loadmodule lines",
		}},
		{"modparam", "modparam(\"usrloc\", \"db_url\", \"sqlite:///var/lib/k.db\")\n", []string{
			"1:1: sipvisor has no modules: what a modparam sets is a setting of its own here, such as location_store for usrloc's db_url (docs/CONFIG.md lists them); delete the modparam lines",
		}},
		{"mpath", "mpath=\"/usr/lib/x86_64-linux-gnu/kamailio/modules/\"\n", []string{
			"1:1: sipvisor has no modules, so no module path; delete this line",
		}},
		{"children", "children = 8\n", []string{
			`1:1: unknown setting "children": sipvisor calls it udp_workers, the number of UDP worker processes`,
		}},
		{"tcp_children", "tcp_children=4\n", []string{
			`1:1: unknown setting "tcp_children": sipvisor calls it tcp_workers, the number of TCP and TLS worker processes`,
		}},
		{"debug", "debug=2\n", []string{
			`1:1: unknown setting "debug": sipvisor calls it log_level: log_level = debug, info, warn or error`,
		}},
		{"fork and log_stderror", "fork=yes\nlog_stderror=no\n", []string{
			`1:1: unknown setting "fork": sipvisor runs in the foreground under its supervisor process (docs/RUNNING.md); delete this line`,
			`2:1: unknown setting "log_stderror": sipvisor always logs to standard error; delete this line`,
		}},
		{"alias", "alias=\"example.com\"\n", []string{
			`1:1: unknown setting "alias": sipvisor calls it domain: domain = example.com`,
		}},
		{"listen is socket", "listen=udp:127.0.0.1:5060\nroute { exit; }\n", nil},
		{"request_route", sock + "request_route {\n\texit;\n}\n", []string{
			"2:1: request_route is written route here: route { ... }",
		}},
		{"request_route body still checked", sock + "request_route {\n\tt_relay()\n\texit;\n}\n", []string{
			"2:1: request_route is written route here: route { ... }",
			`3:11: missing ";" at the end of the statement`,
		}},
		{"reply_route and branch_route", sock + "route { exit; }\nreply_route {\n\tdrop;\n}\nbranch_route[B] {\n\texit;\n}\n", []string{
			"3:1: reply_route is written onreply_route here: onreply_route { ... }",
			"6:1: sipvisor has no branch_route; blocks are route, onreply_route, failure_route and timer_route",
		}},
		{"event_route", sock + "route { exit; }\nevent_route[xhttp:request] {\n\texit;\n}\n", []string{
			"3:1: sipvisor has no event_route; blocks are route, onreply_route, failure_route and timer_route",
		}},
		{"quoted status code", sock + "route {\n\tif (!mf_process_maxfwd_header(\"10\")) {\n\t\tsl_send_reply(\"483\", \"Too Many Hops\");\n\t\texit;\n\t}\n\tsl_send_reply(\"$var(code)\", \"From a variable\");\n}\n", nil},
		{"quoted status code out of range", sock + "route {\n\tsl_send_reply(\"99\", \"x\");\n\tsl_send_reply(\"busy\", \"x\");\n}\n", []string{
			`3:16: sl_send_reply wants a status code in 100..699 first, have 99`,
			`4:16: sl_send_reply wants a status code in 100..699 first, have "busy"`,
		}},
		{"missing paren", sock + "route {\n\tif (is_method(\"INVITE\") {\n\t\tt_relay();\n\t}\n}\n", []string{
			`3:26: missing ")" to close the "(" at 3:5, have "{"`,
		}},
		{"missing semicolon", sock + "route {\n\tt_relay()\n\texit;\n}\n", []string{
			`3:11: missing ";" at the end of the statement`,
		}},
		{"missing semicolon on one line", sock + "route {\n\tt_relay() exit;\n}\n", []string{
			`3:12: want ";" at the end of the statement, have "exit"`,
		}},
		{"unclosed block where it opens", sock + "route {\n\tif (has_totag()) {\n\t\texit;\n}\n\nroute[relay] {\n\tt_relay();\n}\n", []string{
			`3:19: block opened here is never closed: a "}" is missing`,
		}},
		{"unclosed block at the end", sock + "route {\n\tif (has_totag()) {\n\t\texit;\n\t}\n", []string{
			`2:7: block opened here is never closed: a "}" is missing`,
		}},
		{"a } too many", sock + "route {\n\texit;\n}\n}\n", []string{
			`5:1: this "}" closes no block`,
		}},
		{"switch", sock + "route {\n\tswitch ($rm) {\n\tcase \"INVITE\":\n\t\tbreak;\n\t}\n}\n", []string{
			`3:2: switch is not supported; write it as if (...) { ... } else if (...) { ... }`,
		}},
		{"string concatenation", sock + "route {\n\t$ru = \"sip:\" + $rU + \"@example.com\";\n}\n", []string{
			`3:15: "+" is not an operator of a sipvisor script; it has == != =~ !~ < <= > >= && || and !`,
		}},
		{"preprocessor", "#!KAMAILIO\n#!define WITH_AUTH\n" + sock + "route {\n#!ifdef WITH_AUTH\n\texit;\n#!endif\n}\n", []string{
			`2:1: #!define is a line of Kamailio's preprocessor, which sipvisor does not have: every line is read; keep the lines you want and delete the #! lines`,
			`5:1: #!ifdef is a line of Kamailio's preprocessor, which sipvisor does not have: every line is read; keep the lines you want and delete the #! lines`,
			`7:1: #!endif is a line of Kamailio's preprocessor, which sipvisor does not have: every line is read; keep the lines you want and delete the #! lines`,
		}},
		{"missing equals", "udp_workers 4\n", []string{
			`1:13: want "=" after "udp_workers", have "4"`,
		}},
		{"bare method name", sock + "route {\n\tif (method == \"INVITE\") exit;\n}\n", []string{
			`3:6: unknown name method; want a quoted string, a number, a $pseudo-variable, myself or a function call`,
		}},
		{"every syntax error in one run", "children=4\n" + sock + "route {\n\txlog(\"oops);\n\tt_relay()\n\texit;\n}\nroute[b] {\n\tif ($rm == \"INVITE\" {\n\t\texit;\n\t}\n}\n", []string{
			`1:1: unknown setting "children": sipvisor calls it udp_workers, the number of UDP worker processes`,
			`4:7: string is never closed on its line`,
			`5:11: missing ";" at the end of the statement`,
			`9:22: missing ")" to close the "(" at 9:5, have "{"`,
		}},
		{"profile missing cycles", "auto_scaling_profile = P\n    scale up to 6 on 70% for 4 within 5\n", []string{
			`2:32: want "cycles" or "cycle" after "4", have "within"`,
		}},
		{"odd corners", "udp_workers = 4 5\ntcp_workers = 2 use_auto_scaling_profile\n" + sock + "route[ {\n\texit;\n}\nroute {\n\tif ($rm == ) { exit; }\n\t$var(x) = ;\n\txlog(\"a\" \"b\");\n}\n", []string{
			`1:17: unexpected "5" after "4"`,
			`2:41: want a value after "use_auto_scaling_profile"`,
			`4:6: want route[NAME] { ... }, a name between the brackets`,
			`8:12: want a value after "=="`,
			`9:12: want a value after "=", have ";"`,
			`10:11: want "," or ")" after "a", have "b"`,
		}},
		{"Kamailio functions", sock + "route {\n\tt_newtran();\n\tt_reply(\"404\", \"Not Found\");\n}\n", []string{
			`3:2: unknown function t_newtran: sipvisor makes the transaction itself when t_relay sends the request on; delete this line`,
			`4:2: unknown function t_reply: sipvisor answers with sl_send_reply(code, reason), which goes through the transaction when there is one`,
		}},
		{"a script line outside a block", sock + "route { exit; }\n$var(x) = 1;\n", []string{
			`3:1: "$var(x)" cannot start a line outside a block; a line is a setting (name = value), include_file, auto_scaling_profile or a block such as route { ... }`,
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			have := loadLines(tc.src)
			if strings.Join(have, "\n") != strings.Join(tc.want, "\n") {
				t.Errorf("want\n\t%s\nhave\n\t%s", strings.Join(tc.want, "\n\t"), strings.Join(have, "\n\t"))
			}
			for _, l := range have {
				if m := grammarWords.FindString(l); m != "" {
					t.Errorf("%q speaks of the grammar (%q)", l, m)
				}
			}
		})
	}
}

// TestNoGrammarInGoldenErrors holds every error of the golden files to the
// same rule.
func TestNoGrammarInGoldenErrors(t *testing.T) {
	t.Parallel()
	for _, path := range goldenFiles(t) {
		_, want := splitGolden(t, path)
		if strings.HasPrefix(want, "{") {
			continue
		}
		for _, l := range strings.Split(strings.TrimSpace(want), "\n") {
			if m := grammarWords.FindString(l); m != "" {
				t.Errorf("%s: %q speaks of the grammar (%q)", path, l, m)
			}
		}
	}
}
