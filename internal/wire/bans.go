package wire

import (
	"encoding/binary"
	"errors"
	"net/netip"
)

// Bans (package overload/pike): the supervisor is the authority on which
// source addresses are banned. The places that read requests count them
// per source and report a source each time its count grows by a step
// (PikeNote), the script engine reports each failed digest authentication
// (AuthFailNote), and the supervisor sends the bans in force to every UDP
// and TCP worker (FrameBans), which refuse a banned source's datagrams as
// they read them and close its connections.

// FrameBans carries the bans and how to count: 'B', the action (1 byte: 0
// drops a banned source's datagrams, 1 answers its requests 403), the
// counting window (8 bytes, ns) and step (4 bytes; 0: do not count), the
// exempt prefixes (a 2-byte count, then 16 bytes of address, IPv4 mapped,
// and 1 byte of prefix length each, the length counted in the 16-byte
// form), then the bans (a 2-byte count, then 16 bytes of address and 8
// bytes of until, unix ns, each). All big endian.
const FrameBans = 'B'

const bansHeaderLen = 1 + 1 + 8 + 4

// BansFrame encodes FrameBans.
func BansFrame(reply bool, window int64, step uint32, exempt []netip.Prefix, bans map[netip.Addr]int64) []byte {
	b := make([]byte, 0, bansHeaderLen+2+17*len(exempt)+2+24*len(bans))
	var act byte
	if reply {
		act = 1
	}
	b = append(b, FrameBans, act)
	b = binary.BigEndian.AppendUint64(b, uint64(window))
	b = binary.BigEndian.AppendUint32(b, step)
	b = binary.BigEndian.AppendUint16(b, uint16(len(exempt)))
	for _, p := range exempt {
		ip := p.Addr().As16()
		bits := p.Bits()
		if p.Addr().Is4() {
			bits += 96
		}
		b = append(append(b, ip[:]...), byte(bits))
	}
	b = binary.BigEndian.AppendUint16(b, uint16(len(bans)))
	for a, until := range bans {
		ip := a.As16()
		b = binary.BigEndian.AppendUint64(append(b, ip[:]...), uint64(until))
	}
	return b
}

// ParseBansFrame decodes BansFrame.
func ParseBansFrame(b []byte) (reply bool, window int64, step uint32, exempt []netip.Prefix, bans map[netip.Addr]int64, err error) {
	bad := errors.New("bans frame: length does not match its counts")
	if len(b) < bansHeaderLen+2 || b[0] != FrameBans {
		return false, 0, 0, nil, nil, errors.New("bans frame: too short")
	}
	reply = b[1] == 1
	window = int64(binary.BigEndian.Uint64(b[2:10]))
	step = binary.BigEndian.Uint32(b[10:14])
	b = b[bansHeaderLen:]
	n := int(binary.BigEndian.Uint16(b))
	b = b[2:]
	if len(b) < 17*n+2 {
		return false, 0, 0, nil, nil, bad
	}
	for range n {
		p, err := netip.AddrFrom16([16]byte(b[:16])).Prefix(int(b[16]))
		if err != nil {
			return false, 0, 0, nil, nil, errors.New("bans frame: bad exempt prefix")
		}
		if p.Addr().Is4In6() && p.Bits() >= 96 {
			p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
		}
		exempt = append(exempt, p)
		b = b[17:]
	}
	n = int(binary.BigEndian.Uint16(b))
	b = b[2:]
	if len(b) != 24*n {
		return false, 0, 0, nil, nil, bad
	}
	bans = make(map[netip.Addr]int64, n)
	for i := range n {
		e := b[24*i:]
		bans[netip.AddrFrom16([16]byte(e[:16])).Unmap()] = int64(binary.BigEndian.Uint64(e[16:24]))
	}
	return reply, window, step, exempt, bans, nil
}

// A reader's report of a source whose count of requests in the window grew
// by n: pikeMagic, 16 bytes of address, n (4 bytes).
const pikeMagic = "PIK1"

// PikeNote encodes a count of n requests from src.
func PikeNote(src netip.Addr, n uint32) []byte {
	b := make([]byte, 0, len(pikeMagic)+20)
	ip := src.As16()
	return binary.BigEndian.AppendUint32(append(append(b, pikeMagic...), ip[:]...), n)
}

// ParsePikeNote decodes PikeNote.
func ParsePikeNote(b []byte) (src netip.Addr, n uint32, ok bool) {
	if len(b) != len(pikeMagic)+20 || string(b[:len(pikeMagic)]) != pikeMagic {
		return netip.Addr{}, 0, false
	}
	b = b[len(pikeMagic):]
	return netip.AddrFrom16([16]byte(b[:16])).Unmap(), binary.BigEndian.Uint32(b[16:]), true
}

// A failed digest authentication: authFailMagic, 16 bytes of the source
// address, the user name the credentials gave.
const authFailMagic = "AUF1"

// AuthFailNote encodes a failed authentication of user from src.
func AuthFailNote(src netip.Addr, user string) []byte {
	b := make([]byte, 0, len(authFailMagic)+16+len(user))
	ip := src.As16()
	return append(append(append(b, authFailMagic...), ip[:]...), user...)
}

// ParseAuthFailNote decodes AuthFailNote.
func ParseAuthFailNote(b []byte) (src netip.Addr, user string, ok bool) {
	if len(b) < len(authFailMagic)+16 || string(b[:len(authFailMagic)]) != authFailMagic {
		return netip.Addr{}, "", false
	}
	b = b[len(authFailMagic):]
	return netip.AddrFrom16([16]byte(b[:16])).Unmap(), string(b[16:]), true
}
