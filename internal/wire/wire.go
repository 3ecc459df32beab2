package wire

import (
	"encoding/binary"
	"net/netip"
)

// Kind is what a group of workers serves; a worker learns its group's kind
// from EnvKind.
type Kind string

// The kinds of group.
const (
	KindUDP   Kind = "udp"
	KindTCP   Kind = "tcp"
	KindTimer Kind = "timer"
)

// Environment variables of a worker process.
const (
	EnvCookie   = "SIPVISOR_WORKER"
	EnvGroup    = "SIPVISOR_GROUP"
	EnvKind     = "SIPVISOR_KIND"
	EnvWorkerID = "SIPVISOR_WORKER_ID"
	EnvSockets  = "SIPVISOR_SOCKETS"
	EnvConfig   = "SIPVISOR_CONFIG"
	// EnvLogFormat passes the supervisor's log format to its workers, so
	// that the one stream they share has one format whatever file a
	// renewed worker loads.
	EnvLogFormat = "SIPVISOR_LOG_FORMAT"
	// EnvGeneration is the generation of the supervisor that started the
	// worker (1, then one more at each upgrade): the worker ends each of
	// its log lines with it, as the supervisor does, so that the lines of
	// two generations' workers that overlap are told apart.
	EnvGeneration = "SIPVISOR_WORKER_GENERATION"

	// Cookie is not a secret: it only tells a re-executed worker from a person
	// typing "sipvisor worker".
	Cookie = "f3b1c0de-sipvisor-worker"
)

// Descriptor numbers in the worker.
const (
	FDControl = 3
	FDData    = 4
	FDStats   = 5
	FDSockets = 6
)

// JobNATKeepalive is the name of the job (FrameJob) that has a timer
// worker send the NAT keep-alives; no timer_route can have it, since a
// route's name is a word.
const JobNATKeepalive = "nat keepalive"

// Data frame kinds (supervisor → worker).
const (
	FrameMessage = 'M'
	FrameEcho    = 'E'
	FrameJob     = 'J'
	FrameConn    = 'C'
	// FrameHandOff brings a connection another worker gave back, with the
	// bytes it read past its last message: a WebSocket connection so
	// handed over has had its Upgrade, and another must not be asked of it.
	FrameHandOff = 'H'
	FrameDrain   = 'D'
	FrameReload  = 'R' // load the config snapshot named in the frame, keeping connections and transactions
	FrameProfile = 'P' // write a profile to the pipe passed with the frame: seconds (2 bytes), name
	FrameEnd     = 'Z'
	// FrameWrite asks the worker reading a connection to write a message
	// another worker made on it (WriteFrame).
	FrameWrite = 'W'
	// FrameConnTLS hands over a TLS connection (SCM_RIGHTS) with its
	// record layer's state (HandOffTLSNote's payload).
	FrameConnTLS = 'S'
	// FramePeer brings, with SCM_RIGHTS, a copy of the supervisor's end of
	// another worker's data channel, and that worker's pid (4 bytes, big
	// endian): a UDP worker passes the responses whose branch a TCP worker
	// made straight to it (FramePeerMessage), not through the supervisor.
	FramePeer = 'L'
	// FramePeerMessage is a message frame (PutMsgHeader's layout) another
	// worker wrote on this worker's data channel. The supervisor did not
	// send it, so it is not counted in OffHandled, which the supervisor
	// compares with what it sent.
	FramePeerMessage = 'm'
)

// Control message kinds (worker → supervisor).
const (
	CtlReady   = 'R'
	CtlEcho    = 'e'
	CtlDrained = 'd'
	CtlCall    = 'c' // worker → supervisor request: id (8 bytes), payload
	CtlAnswer  = 'a' // supervisor → worker answer: id (8 bytes), payload
	CtlNote    = 'n' // worker → supervisor, no answer: payload
	// CtlNotes carries several notes in one message, each its length
	// (uvarint) and its payload (AppendNote), so that notes that may wait
	// a little cost one write and one wake-up of the supervisor together.
	CtlNotes = 'N'
)

// AppendNote appends one note to a CtlNotes message.
func AppendNote(b, note []byte) []byte {
	return append(binary.AppendUvarint(b, uint64(len(note))), note...)
}

// EachNote calls fn with each note of a CtlNotes message's payload (after
// its kind), in order; it reports false for a payload cut short.
func EachNote(b []byte, fn func(note []byte)) bool {
	for len(b) > 0 {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return false
		}
		fn(b[k : k+int(n)])
		b = b[k+int(n):]
	}
	return true
}

// MaxCall bounds a request or an answer on the control channel.
const MaxCall = 64 << 10

// MsgHeaderLen is the size of the header in front of a SIP message frame:
// kind, socket index, source IP (16 bytes, IPv4 mapped), source port, and
// the time the datagram was read (unix ns), from which the worker knows how
// long it waited. The front door reads each datagram at offset MsgHeaderLen
// of its buffer and writes the header in front, so a frame costs no copy.
const MsgHeaderLen = 28

// MaxFrame bounds a frame: the largest UDP datagram plus the header.
const MaxFrame = 65535 + MsgHeaderLen

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

// ParseMsgHeader is PutMsgHeader's inverse.
func ParseMsgHeader(b []byte) (socket int, from netip.AddrPort, at int64) {
	var ip [16]byte
	copy(ip[:], b[2:18])
	return int(b[1]), netip.AddrPortFrom(netip.AddrFrom16(ip).Unmap(), binary.BigEndian.Uint16(b[18:20])),
		int64(binary.BigEndian.Uint64(b[20:28]))
}

// EchoLen is the length of an echo frame and of its answer: the kind, a
// sequence number and the send time.
const EchoLen = 17

// PutEcho encodes an echo frame (FrameEcho) or answer (CtlEcho) into b's
// storage.
func PutEcho(b []byte, kind byte, seq uint64, sentNs int64) []byte {
	b = append(b[:0], kind)
	b = binary.BigEndian.AppendUint64(b, seq)
	return binary.BigEndian.AppendUint64(b, uint64(sentNs))
}

// ParseEcho decodes PutEcho.
func ParseEcho(b []byte) (seq uint64, sentNs int64, ok bool) {
	if len(b) != EchoLen {
		return 0, 0, false
	}
	return binary.BigEndian.Uint64(b[1:9]), int64(binary.BigEndian.Uint64(b[9:17])), true
}
