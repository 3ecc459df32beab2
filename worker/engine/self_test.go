package engine

import (
	"net/netip"
	"testing"
)

// Both senses of "is this address me", from the one comparison.
func TestIsMe(t *testing.T) {
	w := &Worker{
		opt: Options{Domains: []string{"example.com"}},
		self: []selfAddr{
			{netip.MustParseAddrPort("0.0.0.0:5060"), "udp"},
			{netip.MustParseAddrPort("192.0.2.1:5070"), "udp"},
			{netip.MustParseAddrPort("192.0.2.1:5080"), "tcp"},
		},
		localIPs: map[netip.Addr]bool{netip.MustParseAddr("10.0.0.5"): true},
	}
	for _, c := range []struct {
		host          string
		port          int
		loose, strict bool
	}{
		{"192.0.2.1", 5070, true, true},
		{"192.0.2.1", 5071, false, false},
		{"[::ffff:192.0.2.1]", 5070, true, true},
		// A 0.0.0.0 socket: any address at its port, loosely; strictly,
		// the loopback and this host's interfaces only.
		{"10.0.0.5", 0, true, true},
		{"127.0.0.2", 5060, true, true},
		{"localhost", 5060, true, true},
		{"198.51.100.7", 5060, true, false},
		{"198.51.100.7", 5070, false, false},
		// A served domain is me at any port, loosely; strictly, never.
		{"EXAMPLE.com", 9999, true, false},
		{"other.example", 5060, false, false},
		{"", 0, false, false},
		{"192.0.2.1", 5080, true, true},
	} {
		if got := w.isMyself(c.host, c.port); got != c.loose {
			t.Errorf("isMyself(%q, %d) = %v, want %v", c.host, c.port, got, c.loose)
		}
		if got := w.isOwnAddr(c.host, c.port); got != c.strict {
			t.Errorf("isOwnAddr(%q, %d) = %v, want %v", c.host, c.port, got, c.strict)
		}
	}
	for s, want := range map[string]bool{
		"sip:192.0.2.1:5070":   true,
		"192.0.2.1:5070":       true,
		"sip:bob@example.com":  true,
		"example.com":          true,
		"sip:203.0.113.9:5070": false,
		"":                     false,
	} {
		if got := w.uriIsMyself(s); got != want {
			t.Errorf("uriIsMyself(%q) = %v, want %v", s, got, want)
		}
	}
	// A next hop is me only over the transport of my socket at its
	// address: a UDP peer on the port number of my TCP socket is a peer.
	for _, c := range []struct {
		d    dest
		want bool
	}{
		{dest{proto: "tcp", addr: netip.MustParseAddrPort("192.0.2.1:5080")}, true},
		{dest{proto: "udp", addr: netip.MustParseAddrPort("192.0.2.1:5080")}, false},
		{dest{proto: "udp", addr: netip.MustParseAddrPort("192.0.2.1:5070")}, true},
		{dest{proto: "tls", addr: netip.MustParseAddrPort("192.0.2.1:5070")}, false},
		{dest{proto: "udp", addr: netip.MustParseAddrPort("127.0.0.1:5060")}, true},
		{dest{proto: "tcp", addr: netip.MustParseAddrPort("127.0.0.1:5060")}, false},
	} {
		if got := w.ownDest(c.d); got != c.want {
			t.Errorf("ownDest(%s %s) = %v, want %v", c.d.proto, c.d.addr, got, c.want)
		}
	}
}
