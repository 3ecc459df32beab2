package engine

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"net/netip"
	"strconv"
	"strings"

	"github.com/emiago/sipgo/sip"

	"github.com/sipvisor/sipvisor/internal/sipscan"
	"github.com/sipvisor/sipvisor/internal/wire"
	"github.com/sipvisor/sipvisor/location"
	"github.com/sipvisor/sipvisor/script"
)

// Phones behind NAT, as Kamailio's nathelper serves them: nat_uac_test
// tells one from its message, fix_nated_contact points its Contact at the
// address it sent from, and fix_nated_register has save() record that
// address so that lookup() sends there and the timer worker keeps the NAT's
// mapping open with keep-alives.

// nat_uac_test flags, Kamailio's values.
const (
	natContactPrivate  = 1   // the Contact URI's host is a private address
	natViaReceived     = 2   // the top Via's address is not the source address
	natViaPrivate      = 4   // the top Via's address is private
	natSDPPrivate      = 8   // the SDP's c= address is private
	natViaPort         = 16  // the top Via's port is not the source port
	natSourcePrivate   = 32  // the source address is private
	natWebSocket       = 64  // it came over a WebSocket
	natContactPort     = 128 // the Contact URI's port is not the source port
	natSDPNotSource    = 256 // the SDP's c= address is not the source address
	natReceivedPrefix  = "sip:"
	natKeepaliveBranch = "z9hG4bK-natka-"
)

// cgnat is RFC 6598's shared address space, which nathelper counts as
// private beside RFC 1918's.
var cgnat = netip.MustParsePrefix("100.64.0.0/10")

// privateAddr reports whether host is an RFC 1918 or RFC 6598 address (or
// an IPv6 unique local one).
func privateAddr(host string) bool {
	ip, err := netip.ParseAddr(strings.Trim(host, "[]"))
	if err != nil {
		return false
	}
	ip = ip.Unmap()
	return ip.IsPrivate() || cgnat.Contains(ip)
}

func fnNatUACTest(c *msgCtx, a []*script.Literal) bool {
	if c.m != nil {
		if ok, done := c.natTestBytes(a[0]); done {
			return ok
		}
		if !c.decode() {
			return false
		}
	}
	flags, err := strconv.Atoi(strings.TrimSpace(c.expand(a[0])))
	if err != nil || flags <= 0 {
		c.w.log.Warn("nat_uac_test wants a positive number of flags", "flags", c.expand(a[0]))
		return false
	}
	return c.natTest(flags)
}

// natTest is nat_uac_test: true when any test whose flag is set holds.
func (c *msgCtx) natTest(flags int) bool {
	m := c.msg()
	if m == nil || !c.src.addr.IsValid() {
		return false
	}
	src := c.src.addr
	ct := contactOf(m)
	if flags&natContactPrivate != 0 && ct != nil && privateAddr(ct.Address.Host) {
		return true
	}
	if flags&natContactPort != 0 && ct != nil && portOr5060(ct.Address.Port) != int(src.Port()) {
		return true
	}
	if v := m.Via(); v != nil {
		if flags&natViaReceived != 0 && !sameAddr(v.Host, src.Addr()) {
			return true
		}
		if flags&natViaPrivate != 0 && privateAddr(v.Host) {
			return true
		}
		if flags&natViaPort != 0 && portOr5060(v.Port) != int(src.Port()) {
			return true
		}
	}
	if flags&natSourcePrivate != 0 && privateAddr(src.Addr().String()) {
		return true
	}
	if flags&natWebSocket != 0 && (c.src.proto == "ws" || c.src.proto == "wss") {
		return true
	}
	if flags&(natSDPPrivate|natSDPNotSource) != 0 {
		for _, host := range sdpAddrs(m.Body()) {
			if flags&natSDPPrivate != 0 && privateAddr(host) || flags&natSDPNotSource != 0 && !sameAddr(host, src.Addr()) {
				return true
			}
		}
	}
	return false
}

// contactOf is a request's or a response's first Contact.
func contactOf(m sip.Message) *sip.ContactHeader {
	switch x := m.(type) {
	case *sip.Request:
		return x.Contact()
	case *sip.Response:
		return x.Contact()
	}
	return nil
}

func portOr5060(p int) int {
	if p == 0 {
		return 5060
	}
	return p
}

func sameAddr(host string, ip netip.Addr) bool {
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && a.Unmap() == ip.Unmap()
}

// sdpAddrs is the addresses of an SDP body's c= lines (session and media).
func sdpAddrs(body []byte) []string {
	var out []string
	for _, line := range bytes.Split(body, []byte("\n")) {
		line = bytes.TrimSpace(line)
		if !bytes.HasPrefix(line, []byte("c=")) {
			continue
		}
		// c=IN IP4 192.168.1.20
		if f := strings.Fields(string(line[2:])); len(f) == 3 {
			out = append(out, strings.SplitN(f[2], "/", 2)[0])
		}
	}
	return out
}

// fnFixNatedContact is fix_nated_contact(): the first Contact URI's host
// and port become the address the message came from, so that requests in
// the dialog reach the phone through its NAT.
func fnFixNatedContact(c *msgCtx, _ []*script.Literal) bool {
	m := c.msg()
	if m == nil || !c.src.addr.IsValid() {
		return false
	}
	ct := contactOf(m)
	if ct == nil || ct.Address.Wildcard {
		return false
	}
	ct.Address.Host = c.src.addr.Addr().Unmap().String()
	ct.Address.Port = int(c.src.addr.Port())
	return true
}

// fnFixNatedRegister is fix_nated_register(): the next save() of this
// REGISTER records the address it came from, so that lookup() routes to it
// and keep-alives go there.
func fnFixNatedRegister(c *msgCtx, _ []*script.Literal) bool {
	if c.m != nil {
		if c.m.Method != sipscan.Register || !c.src.addr.IsValid() {
			return false
		}
		c.natReg = true
		return true
	}
	if c.req == nil || c.req.Method != sip.REGISTER || !c.src.addr.IsValid() {
		return false
	}
	c.natReg = true
	return true
}

// natReceived is what save() files as a binding's received address: the
// source, ip:port, or for a REGISTER fix_nated_register marked, the source
// as a URI (sip:ip:port), as Kamailio's received column holds it, which
// lookup() and the keep-alives go to.
func (c *msgCtx) natReceived(received string) string {
	if !c.natReg || received == "" {
		return received
	}
	u := natReceivedPrefix + received
	if c.src.proto != "" && c.src.proto != "udp" {
		u += ";transport=" + c.src.proto
	}
	return u
}

// natRoute sets $du to the received address of a binding a REGISTER over
// UDP saved after fix_nated_register, unless the script set $du already.
// (A connection's flow is another matter: it goes back over the connection.)
func (c *msgCtx) natRoute(b *location.Binding) {
	if c.du == "" && b.Proto == "udp" && strings.HasPrefix(b.Received, natReceivedPrefix) {
		c.du = b.Received
	}
}

// natKeepalive sends a keep-alive (nat_keepalive_method) to every binding
// saved after fix_nated_register over UDP, from the first UDP socket of the
// address's family: the job the supervisor gives a timer worker every
// nat_keepalive_interval (wire.JobNATKeepalive).
func (w *Worker) natKeepalive() {
	bs, err := w.opt.Store.List()
	if err != nil {
		w.Stats.StoreErrors++
		w.log.Warn("NAT keep-alives: location store call failed", "error", err)
		return
	}
	crlf := w.opt.NATKeepaliveMethod == "CRLF"
	for i := range bs {
		b := &bs[i]
		if b.Proto != "udp" || !strings.HasPrefix(b.Received, natReceivedPrefix) {
			continue
		}
		hp, _, _ := strings.Cut(strings.TrimPrefix(b.Received, natReceivedPrefix), ";")
		to, err := netip.ParseAddrPort(hp)
		if err != nil {
			continue
		}
		sock := w.udpSockFor(to.Addr())
		if sock < 0 {
			continue
		}
		msg := []byte("\r\n\r\n")
		if !crlf {
			msg = w.keepaliveOptions(b, sock)
		}
		d := dest{proto: "udp", addr: to, sock: sock}
		if w.send(&d, msg) == nil {
			w.Stats.NATKeepalives++
		}
	}
}

// udpSockFor is the first UDP socket of ip's family, or -1.
func (w *Worker) udpSockFor(ip netip.Addr) int {
	for i, a := range w.udpLocal {
		if i < len(w.opt.Sockets) && a.Addr().Unmap().Is4() == ip.Unmap().Is4() {
			return i
		}
	}
	return -1
}

// keepaliveOptions is a stateless OPTIONS to b's contact, as nathelper's
// SIP ping: its answer comes back to this server's Via, where no
// transaction awaits it, and is dropped.
func (w *Worker) keepaliveOptions(b *location.Binding, sock int) []byte {
	var r [8]byte
	rand.Read(r[:])
	id := hex.EncodeToString(r[:])
	local := w.udpLocal[sock]
	var s strings.Builder
	s.WriteString("OPTIONS " + strings.Trim(b.Contact, "<>") + " SIP/2.0\r\n")
	s.WriteString("Via: SIP/2.0/UDP " + local.String() + ";branch=" + natKeepaliveBranch + id + "\r\n")
	s.WriteString("Max-Forwards: 70\r\n")
	s.WriteString("From: <sip:keepalive@" + w.home + ">;tag=" + id + "\r\n")
	s.WriteString("To: <" + strings.Trim(b.Contact, "<>") + ">\r\n")
	s.WriteString("Call-ID: natka-" + id + "@" + local.Addr().String() + "\r\n")
	s.WriteString("CSeq: 1 OPTIONS\r\n")
	s.WriteString("Content-Length: 0\r\n\r\n")
	return []byte(s.String())
}

// isKeepaliveJob reports whether a timer job is the NAT keep-alive.
func isKeepaliveJob(name string) bool { return name == wire.JobNATKeepalive }
