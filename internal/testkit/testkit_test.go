package testkit

import (
	"net"
	"strings"
	"testing"
	"time"
)

const exposition = `# HELP sipvisor_worker_exits_total Worker exits by reason.
# TYPE sipvisor_worker_exits_total counter
sipvisor_worker_exits_total{group="udp0",reason="clean"} 2
sipvisor_worker_exits_total{group="udp0",reason="crash"} 1
sipvisor_worker_exits_total{group="tcp0",reason="crash"} 4
sipvisor_worker_exits_total_extra 100
sipvisor_load_ratio 0.25 1712345678000
sipvisor_odd{path="a\"b,c}",x="1"} +Inf
`

func TestMetric(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name   string
		labels []string
		want   float64
	}{
		{"sipvisor_worker_exits_total", nil, 7},
		{"sipvisor_worker_exits_total", []string{`reason="crash"`}, 5},
		{"sipvisor_worker_exits_total", []string{`group="udp0"`, `reason="crash"`}, 1},
		{"sipvisor_load_ratio", nil, 0.25},
		{"sipvisor_odd", []string{`path="a\"b,c}"`}, 0},
	} {
		v := Metric(t, exposition, c.name, c.labels...)
		if c.name == "sipvisor_odd" {
			if v < 1e308 {
				t.Errorf("%s: want +Inf, have %v", c.name, v)
			}
			continue
		}
		if v != c.want {
			t.Errorf("%s%v: want %v, have %v", c.name, c.labels, c.want, v)
		}
	}
	for _, c := range [][]string{{"sipvisor_worker_exits"}, {"sipvisor_worker_exits_total", `reason="killed"`}, {"sipvisor_load_ratio", `group="udp0"`}} {
		if _, ok, err := LookupMetric(exposition, c[0], c[1:]...); ok || err != nil {
			t.Errorf("%v: want no series, have ok=%v err=%v", c, ok, err)
		}
		if v := MetricOrZero(t, exposition, c[0], c[1:]...); v != 0 {
			t.Errorf("%v: MetricOrZero: want 0, have %v", c, v)
		}
	}
	if _, _, err := LookupMetric(exposition, "x", "reason=crash"); err == nil {
		t.Error("an unquoted matcher: want an error")
	}
	if _, _, err := LookupMetric("x{a=\"1} 2\n", "x"); err == nil {
		t.Error("an unterminated label: want an error")
	}
}

func TestWaitForLine(t *testing.T) {
	t.Parallel()
	var b SyncBuffer
	done := make(chan struct{})
	go func() {
		defer close(done)
		b.Write([]byte("level=INFO msg=starting\nlevel=INFO msg="))
		b.Write([]byte("ready workers=2\n"))
	}()
	if l := WaitForLine(t, &b, "msg=ready", 10*time.Second); l != "level=INFO msg=ready workers=2" {
		t.Errorf("want the whole line, have %q", l)
	}
	<-done
	if !b.Contains("starting") {
		t.Error("Contains: want true")
	}
}

func TestRequest(t *testing.T) {
	t.Parallel()
	want := "INVITE sip:bob@127.0.0.1:5060 SIP/2.0\r\n" +
		"Via: SIP/2.0/UDP 127.0.0.1:5070;branch=z9hG4bK-1;rport\r\n" +
		"Max-Forwards: 0\r\n" +
		"From: <sip:alice@example.com>;tag=alice-tag\r\n" +
		"To: <sip:bob@127.0.0.1:5060>\r\n" +
		"Call-ID: c1@test\r\n" +
		"CSeq: 1 INVITE\r\n" +
		"Contact: <sip:alice@127.0.0.1:5070>\r\n" +
		"Content-Length: 0\r\n\r\n"
	r := Invite("sip:bob@127.0.0.1:5060", "127.0.0.1:5070", "c1@test")
	r.Branch, r.Rport, r.MaxForwards = "z9hG4bK-1", true, "0"
	if have := r.String(); have != want {
		t.Errorf("want\n%q\nhave\n%q", want, have)
	}
	reg := Register("sip:carol@example.com", "sip:carol@127.0.0.1:5999", "127.0.0.1:5999", "r@test", 600).String()
	for _, part := range []string{"REGISTER sip:example.com SIP/2.0\r\n", "To: <sip:carol@example.com>\r\n", "Contact: <sip:carol@127.0.0.1:5999>\r\n", "Expires: 600\r\n", "CSeq: 1 REGISTER\r\n"} {
		if !strings.Contains(reg, part) {
			t.Errorf("REGISTER: want %q in\n%s", part, reg)
		}
	}
	body := Request{Method: "MESSAGE", Body: "hello", Headers: []string{"Content-Type: text/plain"}}.String()
	if !strings.HasSuffix(body, "Content-Type: text/plain\r\nContent-Length: 5\r\n\r\nhello") {
		t.Errorf("want the body counted, have\n%q", body)
	}
	if o := Options("sip:127.0.0.1", "127.0.0.1:5070", "o1").String(); strings.Count(o, "\r\n\r\n") != 1 || !strings.HasPrefix(o, "OPTIONS sip:127.0.0.1 SIP/2.0\r\n") {
		t.Errorf("OPTIONS: have\n%q", o)
	}
}

func TestFreePort(t *testing.T) {
	t.Parallel()
	if p := FreePort(t); p <= 0 || p > 65535 {
		t.Fatalf("want a port, have %d", p)
	}
}

func TestListening(t *testing.T) {
	t.Parallel()
	u, err := net.ListenUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	defer u.Close()
	WaitListening(t, "udp", u.LocalAddr().(*net.UDPAddr).Port, 10*time.Second)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	WaitListening(t, "tcp", port, 10*time.Second)
	l.Close()
}
