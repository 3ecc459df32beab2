package wire

import (
	"encoding/binary"
	"net/netip"
)

// A worker that is to send a request over TCP or TLS to an address it
// holds no connection to asks the supervisor, with a call (worker.Env.Call), to
// pass the request to the worker that reads the connection from that
// address: a caller that accepts no connections (a phone behind NAT) is
// reachable only over the one it opened. The request is passMagic, the
// UDP socket index the request came to, the address to reach and the
// request's source (each 16 bytes of IPv6-mapped address and 2 of port),
// then the request as it was received; the answer is one byte, 1 when the
// request was passed on.
const passMagic = "PAS1"

const passHeaderLen = len(passMagic) + 1 + 18 + 18

// PassRequest encodes the question for msg, received from from on UDP
// socket sock, to be sent to to.
func PassRequest(sock int, to, from netip.AddrPort, msg []byte) []byte {
	b := make([]byte, 0, passHeaderLen+len(msg))
	b = append(b, passMagic...)
	b = append(b, byte(sock))
	b = appendAddrPort(b, to)
	b = appendAddrPort(b, from)
	return append(b, msg...)
}

func appendAddrPort(b []byte, ap netip.AddrPort) []byte {
	ip := ap.Addr().As16()
	b = append(b, ip[:]...)
	return binary.BigEndian.AppendUint16(b, ap.Port())
}

func readAddrPort(b []byte) netip.AddrPort {
	return netip.AddrPortFrom(netip.AddrFrom16([16]byte(b[:16])).Unmap(), binary.BigEndian.Uint16(b[16:18]))
}

// ParsePassRequest decodes PassRequest; ok is false for another kind of
// call.
func ParsePassRequest(req []byte) (sock int, to, from netip.AddrPort, msg []byte, ok bool) {
	if len(req) <= passHeaderLen || string(req[:len(passMagic)]) != passMagic {
		return 0, netip.AddrPort{}, netip.AddrPort{}, nil, false
	}
	b := req[len(passMagic):]
	return int(b[0]), readAddrPort(b[1:19]), readAddrPort(b[19:37]), b[37:], true
}

// MessageFrame is the frame that hands msg to a worker as if it had come
// from from on UDP socket sock, read at at (unix ns).
func MessageFrame(sock int, from netip.AddrPort, at int64, msg []byte) []byte {
	f := make([]byte, MsgHeaderLen+len(msg))
	PutMsgHeader(f, sock, from, at)
	copy(f[MsgHeaderLen:], msg)
	return f
}
