package pool

import (
	"encoding/binary"
	"net/netip"
)

// Environment variables of a worker process.
const (
	EnvCookie   = "SIPVISOR_WORKER"
	EnvGroup    = "SIPVISOR_GROUP"
	EnvKind     = "SIPVISOR_KIND"
	EnvWorkerID = "SIPVISOR_WORKER_ID"
	EnvSockets  = "SIPVISOR_SOCKETS"
	EnvConfig   = "SIPVISOR_CONFIG"

	// cookie is not a secret: it only tells a re-executed worker from a person
	// typing "sipvisor worker".
	cookie = "f3b1c0de-sipvisor-worker"
)

// Descriptor numbers in the worker.
const (
	fdControl = 3
	fdData    = 4
	fdStats   = 5
	fdSockets = 6
)

// Data frame kinds (supervisor → worker).
const (
	FrameMessage = 'M'
	FrameEcho    = 'E'
	FrameJob     = 'J'
	FrameConn    = 'C'
	FrameDrain   = 'D'
	FrameReload  = 'R' // load the config snapshot named in the frame, keeping connections and transactions
	FrameProfile = 'P' // write a profile to the pipe passed with the frame: seconds (2 bytes), name
	FrameEnd     = 'Z'
)

// Control message kinds (worker → supervisor).
const (
	ctlReady   = 'R'
	ctlEcho    = 'e'
	ctlDrained = 'd'
	ctlCall    = 'c' // worker → supervisor request: id (8 bytes), payload
	ctlAnswer  = 'a' // supervisor → worker answer: id (8 bytes), payload
	ctlNote    = 'n' // worker → supervisor, no answer: payload
)

// maxCall bounds a request or an answer on the control channel.
const maxCall = 64 << 10

// MsgHeaderLen is the size of the header in front of a SIP message frame:
// kind, socket index, source IP (16 bytes, IPv4 mapped), source port, and
// the time the datagram was read (unix ns), from which the worker knows how
// long it waited. The front door reads each datagram at offset MsgHeaderLen
// of its buffer and writes the header in front, so a frame costs no copy.
const MsgHeaderLen = 28

// maxFrame bounds a frame: the largest UDP datagram plus the header.
const maxFrame = 65535 + MsgHeaderLen

// PutMsgHeader writes a message frame header into b[:MsgHeaderLen]; at is
// when the datagram was read, in unix ns.
func PutMsgHeader(b []byte, socket int, from netip.AddrPort, at int64) {
	b[0] = FrameMessage
	b[1] = byte(socket)
	ip := from.Addr().As16()
	copy(b[2:18], ip[:])
	binary.BigEndian.PutUint16(b[18:20], from.Port())
	binary.BigEndian.PutUint64(b[20:28], uint64(at))
}

// parseMsgHeader is PutMsgHeader's inverse.
func parseMsgHeader(b []byte) (socket int, from netip.AddrPort, at int64) {
	var ip [16]byte
	copy(ip[:], b[2:18])
	return int(b[1]), netip.AddrPortFrom(netip.AddrFrom16(ip).Unmap(), binary.BigEndian.Uint16(b[18:20])),
		int64(binary.BigEndian.Uint64(b[20:28]))
}

// echo frames and answers carry a sequence number and the send time.
const echoLen = 17

func putEcho(b []byte, kind byte, seq uint64, sentNs int64) []byte {
	b = append(b[:0], kind)
	b = binary.BigEndian.AppendUint64(b, seq)
	return binary.BigEndian.AppendUint64(b, uint64(sentNs))
}

func parseEcho(b []byte) (seq uint64, sentNs int64, ok bool) {
	if len(b) != echoLen {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(b[1:9]), int64(binary.BigEndian.Uint64(b[9:17])), true
}
