package listeners

import (
	"reflect"
	"testing"
)

func TestFormatParseAddrs(t *testing.T) {
	t.Parallel()
	addrs := []Addr{
		{Proto: "udp", Host: "127.0.0.1", Port: 40123},
		{Proto: "tcp", Host: "::1", Port: 5060},
		{Proto: "tls", Host: "0.0.0.0", Port: 5061},
	}
	s := FormatAddrs(addrs)
	if s != "udp:127.0.0.1:40123,tcp:[::1]:5060,tls:0.0.0.0:5061" {
		t.Errorf("FormatAddrs: have %q", s)
	}
	back, err := ParseAddrs(s)
	if err != nil || !reflect.DeepEqual(back, addrs) {
		t.Errorf("ParseAddrs(%q): want %v, have %v, %v", s, addrs, back, err)
	}
	if back, err := ParseAddrs(""); err != nil || back != nil {
		t.Errorf("ParseAddrs of nothing: want no addresses, have %v, %v", back, err)
	}
	if _, err := ParseAddrs("udp:127.0.0.1:1,sctp:127.0.0.1:2"); err == nil {
		t.Errorf("ParseAddrs: want an error for sctp")
	}
}
