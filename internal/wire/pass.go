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

// A worker that is to send a message over a connection another worker
// reads (a phone's flow: the connection it registered on, which only that
// worker can write, TLS state included) asks the supervisor, with a call,
// to have that worker write it: writeMagic, flags (FlowOutbound), the
// connection's remote address (18 bytes as above), then the message. The
// answer is one byte, 1 when a worker reads that connection and was given
// the message; 0 when none does, and the flow is gone.
const writeMagic = "WRT1"

// Flags of a WriteRequest. FlowOutbound marks a message for an RFC 5626
// flow (the phone registered with ;ob): a request its holder cannot write
// is answered 430 Flow Failed rather than 480. FlowDial lets the holder,
// the connection gone, connect to the request's Request-URI instead: a
// contact that names an address of its own, not one that only its flow
// reaches.
const (
	FlowOutbound = 1
	FlowDial     = 2
)

const writeHeaderLen = len(writeMagic) + 1 + 18

// WriteRequest encodes the call that asks for msg to be written on the
// connection from to.
func WriteRequest(flags byte, to netip.AddrPort, msg []byte) []byte {
	b := make([]byte, 0, writeHeaderLen+len(msg))
	b = append(b, writeMagic...)
	b = append(b, flags)
	b = appendAddrPort(b, to)
	return append(b, msg...)
}

// ParseWriteRequest decodes WriteRequest; ok is false for another call.
func ParseWriteRequest(req []byte) (flags byte, to netip.AddrPort, msg []byte, ok bool) {
	if len(req) <= writeHeaderLen || string(req[:len(writeMagic)]) != writeMagic {
		return 0, netip.AddrPort{}, nil, false
	}
	b := req[len(writeMagic):]
	return b[0], readAddrPort(b[1:19]), b[19:], true
}

// WriteFrame is the frame (FrameWrite) that gives the worker reading the
// connection from to msg to write on it: the kind, flags, the address,
// the message.
func WriteFrame(flags byte, to netip.AddrPort, msg []byte) []byte {
	b := make([]byte, 0, 2+18+len(msg))
	b = append(b, FrameWrite, flags)
	b = appendAddrPort(b, to)
	return append(b, msg...)
}

// ParseWriteFrame decodes WriteFrame.
func ParseWriteFrame(f []byte) (flags byte, to netip.AddrPort, msg []byte, ok bool) {
	if len(f) < 2+18 || f[0] != FrameWrite {
		return 0, netip.AddrPort{}, nil, false
	}
	return f[1], readAddrPort(f[2:20]), f[20:], true
}

// BranchOwner reads the pid of the worker that made a branch (a worker
// names itself in the branches it makes: z9hG4bK, 8 hex digits, '-', its
// pid in base 36, '.'), so that a response that reaches another worker, or
// a supervisor, finds the one that holds its transaction. ok is false for
// a branch of another shape.
func BranchOwner(branch []byte) (pid int, ok bool) {
	const magic = "z9hG4bK"
	if len(branch) < len(magic)+10 || string(branch[:len(magic)]) != magic || branch[len(magic)+8] != '-' {
		return 0, false
	}
	for _, c := range branch[len(magic)+9:] {
		var d int
		switch {
		case c == '.':
			return pid, pid > 0
		case '0' <= c && c <= '9':
			d = int(c - '0')
		case 'a' <= c && c <= 'z':
			d = int(c-'a') + 10
		default:
			return 0, false
		}
		if pid > 1<<30 {
			return 0, false
		}
		pid = pid*36 + d
	}
	return 0, false
}
