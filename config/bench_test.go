package config

import (
	"fmt"
	"strings"
	"testing"
)

// bigConfig writes a config of about n lines: settings, profiles, sockets and
// routes full of statements, the mix a large OpenSIPS deployment has.
func bigConfig(n int) string {
	var b strings.Builder
	b.WriteString("log_level = info\nhttp_listen = 127.0.0.1:8888\nretry_after = 5-15\n")
	lines := 3
	for i := 0; i < 50; i++ {
		fmt.Fprintf(&b, "auto_scaling_profile = P%d\n    scale up to %d on 70%% for 4 cycles within 5\n    scale down to 1 on 10%% for 10 cycles\n", i, 2+i%50)
		fmt.Fprintf(&b, "socket = udp:127.0.0.1:%d use_workers 1 use_auto_scaling_profile P%d\n", 6000+i, i)
		lines += 4
	}
	b.WriteString("route {\n")
	lines++
	r := 0
	for lines < n-2 || lines%5 != 4 { // end outside an open if
		if lines%200 == 0 {
			fmt.Fprintf(&b, "\troute(r%d);\n}\n# part %d\nroute[r%d] {\n\t# body\n", r, r, r)
			r++
			lines += 5
			continue
		}
		switch lines % 5 {
		case 0:
			fmt.Fprintf(&b, "\tif (is_method(\"INVITE\") && $ru =~ \"^sip:%d@\" || !has_totag()) {\n", lines)
		case 1:
			fmt.Fprintf(&b, "\t\t$var(n%d) = \"x\";\n", lines)
		case 2:
			fmt.Fprintf(&b, "\t\tif ($rs >= 300) t_relay(); else sl_send_reply(404, \"Not Found\");\n")
		case 3:
			b.WriteString("\t}\n")
		case 4:
			fmt.Fprintf(&b, "\txlog(\"L_INFO\", \"line %d $ci\");\n", lines)
		}
		lines++
	}
	b.WriteString("\texit;\n}\n")
	return b.String()
}

func TestBigConfigLoads(t *testing.T) {
	t.Parallel()
	src := bigConfig(5000)
	if n := strings.Count(src, "\n"); n < 4990 || n > 5010 {
		t.Fatalf("want about 5000 lines, have %d", n)
	}
	if _, err := Load("big.cfg", []byte(src)); err != nil {
		t.Fatal(err)
	}
}

func BenchmarkLoad5000Lines(b *testing.B) {
	src := []byte(bigConfig(5000))
	b.SetBytes(int64(len(src)))
	b.ReportAllocs()
	for b.Loop() {
		if _, err := Load("big.cfg", src); err != nil {
			b.Fatal(err)
		}
	}
}
