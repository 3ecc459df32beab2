package engine

import (
	"net"
	"net/netip"
	"strings"

	"github.com/emiago/sipgo/sip"
)

// "Is this address me" is answered here, in one of two senses:
//
//   - loose (isMyself): is_myself, loose_route and the Via of a response.
//     A served domain is me at any port, and a socket bound to 0.0.0.0
//     owns every address at its port, as Kamailio's check_self does.
//   - strict (isOwnAddr, ownAddrPort): what must not be mistaken for a
//     peer, such as a next hop or a registered contact that would loop,
//     and the host of an AOR. Addresses only, and a socket bound to
//     0.0.0.0 owns the addresses of this host's interfaces, not every
//     address with its port.
//
// A missing port means 5060, and "localhost" 127.0.0.1; a name is never
// looked up. A next hop is compared with its transport too (ownDest), as
// Kamailio's check_self does when given one: a UDP callee on the port
// number of this server's TCP socket is a peer, not a loop.

// selfAddr is one of this server's addresses, with the transport of the
// socket behind it ("udp", "tcp", "tls", "ws", "wss").
type selfAddr struct {
	ap    netip.AddrPort
	proto string
}

// isMyself reports whether host[:port] is me in the loose sense.
func (w *Worker) isMyself(host string, port int) bool {
	ip, ok := parseIP(strings.Trim(host, "[]"))
	if !ok {
		if w.served(host) {
			return true
		}
		if ip, ok = selfIP(host); !ok {
			return false
		}
	}
	return w.isMe(ip, port, false)
}

// isOwnAddr reports whether host[:port] is me in the strict sense.
func (w *Worker) isOwnAddr(host string, port int) bool {
	ip, ok := selfIP(host)
	return ok && w.isMe(ip, port, true)
}

// ownAddrPort reports whether ap is me in the strict sense, over any
// transport.
func (w *Worker) ownAddrPort(ap netip.AddrPort) bool {
	return w.isMeOver(ap.Addr(), int(ap.Port()), "", true)
}

// ownDest reports whether the next hop d is me in the strict sense: one of
// my addresses over d's transport.
func (w *Worker) ownDest(d dest) bool {
	return w.isMeOver(d.addr.Addr(), int(d.addr.Port()), d.proto, true)
}

// isMe is isMeOver any transport.
func (w *Worker) isMe(ip netip.Addr, port int, strict bool) bool {
	return w.isMeOver(ip, port, "", strict)
}

// isMeOver is the one comparison with this server's addresses (w.self);
// proto "" matches every transport.
func (w *Worker) isMeOver(ip netip.Addr, port int, proto string, strict bool) bool {
	ip = ip.Unmap()
	if port == 0 {
		port = 5060
	}
	for _, s := range w.self {
		if int(s.ap.Port()) != port || proto != "" && s.proto != proto {
			continue
		}
		if s.ap.Addr() == ip {
			return true
		}
		if s.ap.Addr().IsUnspecified() && (!strict || ip.IsLoopback() || w.localIPs[ip]) {
			return true
		}
	}
	return false
}

// selfIP is host as an address, "localhost" as 127.0.0.1, without a lookup.
func selfIP(host string) (netip.Addr, bool) {
	host = strings.Trim(host, "[]")
	if strings.EqualFold(host, "localhost") {
		return netip.AddrFrom4([4]byte{127, 0, 0, 1}), true
	}
	return parseIP(host)
}

// hostIPNoLookup is selfIP with an error, for callers that say why.
func hostIPNoLookup(host string) (netip.Addr, error) {
	if ip, ok := selfIP(host); ok {
		return ip.Unmap(), nil
	}
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return ip.Unmap(), err
}

// parseIP is netip.ParseAddr without the error, which it allocates: a
// domain name, in the From of most requests, is no address, and only what
// starts with a digit (IPv4) or holds a colon (IPv6) can be one.
func parseIP(s string) (netip.Addr, bool) {
	if s == "" || !('0' <= s[0] && s[0] <= '9') && strings.IndexByte(s, ':') < 0 {
		return netip.Addr{}, false
	}
	ip, err := netip.ParseAddr(s)
	return ip, err == nil
}

// uriIsMyself is isMyself of a URI, a host or a host:port as a script
// writes it.
func (w *Worker) uriIsMyself(s string) bool {
	s = strings.TrimSpace(s)
	if s == "" {
		return false
	}
	if !strings.Contains(s, ":") || strings.HasPrefix(s, "[") {
		return w.isMyself(s, 0)
	}
	var u sip.Uri
	if err := sip.ParseUri(strings.Trim(s, "<>"), &u); err != nil || u.Host == "" {
		// host:port without a scheme
		if ap, err := netip.ParseAddrPort(s); err == nil {
			return w.isMe(ap.Addr(), int(ap.Port()), false)
		}
		return false
	}
	return w.isMyself(u.Host, u.Port)
}

// served reports whether host is one of the domain setting's domains.
func (w *Worker) served(host string) bool {
	for _, d := range w.opt.Domains {
		if strings.EqualFold(d, host) {
			return true
		}
	}
	return false
}

// interfaceIPs are this host's addresses, what a socket bound to 0.0.0.0
// receives on.
func interfaceIPs() map[netip.Addr]bool {
	out := map[netip.Addr]bool{}
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return out
	}
	for _, a := range addrs {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			out[p.Addr().Unmap()] = true
		}
	}
	return out
}
