package wire

import (
	"encoding/binary"
	"errors"
)

// ErrQueueFull: a worker's queue has no room for a frame. The frame is not
// delivered; UDP senders retransmit. Defined here so that a front door,
// which runs in the supervisor and in workers that read directly, needs no
// package of either side.
var ErrQueueFull = errors.New("worker queue full")

// Direct reads: with udp_direct_reads, each worker of a UDP group reads the
// group's SIP port itself, through a socket of its own in the port's
// SO_REUSEPORT group (package listeners/steer picks the socket of each
// datagram by its Call-ID). The supervisor's own socket, first in the group,
// takes what the kernel's program cannot place, and its door decides about
// it as it does without direct reads.
const (
	// EnvDirect names the socket a worker reads directly and its slot in
	// the port's group: "SOCKET:SLOT", SOCKET the index among EnvSockets.
	// Its descriptor comes right after the UDP sockets'.
	EnvDirect = "SIPVISOR_DIRECT"

	// FrameSteer carries the steering table: a count n (1 byte), the slot
	// of each of n buckets, then for each bucket the unix ns from which it
	// has had that slot, then for each bucket the unix ns of the last new
	// session of it that another than its slot took (8 bytes each, big
	// endian; 0 for none). A worker passes a message of a Call-ID it does
	// not know to the supervisor's door while the bucket is newly its own,
	// since the call may live in the worker that had it, and a new session
	// while another took one of the bucket within a transaction's lifetime,
	// since it may be a retransmission.
	FrameSteer = 'T'
)

// Words of the stats page that direct reads add (see the offsets in
// stats.go for the rule: one writer per word).
const (
	// Written by the supervisor: the group's admission gate, as a worker
	// applies it to the new sessions it reads itself (GateOpen,
	// GateProbesRefused, and the Retry-After in seconds from bit 16).
	OffGate = 88
	// Written by the supervisor: the group's queue_delay_admission, ns.
	OffQueueDelayLimit = 96
	// Written by the worker: the longest time a datagram waited in its
	// socket before it was read, ns, over the last window (WaitWindow).
	OffWait = 104
	// Written by the worker: datagrams read from its own socket.
	OffDirectRead = 112
	// Written by the worker: the sessions in progress its door follows, by
	// kind (4 words, sipscan.Kind order).
	OffKindSessions = 120
	// Written by the worker: the new sessions its door admitted, by kind
	// (4 words), and refused, by reason (8 words, overload.Refusal order),
	// which the supervisor adds to its door's counts.
	OffDoorAdmitted = 152
	OffDoorRefused  = 184
	// Written by the supervisor: max_call_duration, ns, for the sessions
	// the worker's door follows.
	OffMaxCallDuration = 248
	// Written by the supervisor: the worker's quota of new sessions by kind
	// (4 words): its door admits one of kind k by itself only while its
	// OffDoorAdmitted count of k is below this word, and asks beyond it.
	// The supervisor grants each worker at most half of the room a session
	// limit leaves, divided among the workers, so that the sessions admitted
	// between two of its evaluations cannot pass the limit.
	OffQuota = 256
	// Written by the worker: its door's other counters, a word each in
	// DoorCounter order, then its malformed datagrams by reason (up to
	// MaxMalformed words, sipscan.Error order).
	OffDoorCounters = 288
)

// The door's counters a worker publishes at OffDoorCounters, by index.
const (
	DoorKeepalives = iota
	DoorReplied
	DoorOwnAcks
	DoorProbesRefused
	DoorAbsorbed
	DoorDroppedNoWorker
	DoorReplyFailed
	DoorBanned    // datagrams of banned sources refused
	DoorMalformed // the first of MaxMalformed
	// MaxMalformed bounds the malformed reasons published.
	MaxMalformed = 32
)

// Bits of the OffGate word.
const (
	// GateOpen: admission would admit any new session now, so the worker
	// admits without asking; without it, it asks (AdmitRequest).
	GateOpen = 1 << 0
	// GateProbesRefused: a probe of the server itself is answered 503. It
	// is set with GateRefuseAll, which a worker's decision reads
	// (overload.Decide refuses a probe while every new session is).
	GateProbesRefused = 1 << 1
	// GateRefuseAll: the server refuses every new session (suspended or
	// stopping), so the worker refuses one itself, with the word's
	// Retry-After, as the supervisor would; but a REGISTER, which it still
	// asks about, as a known registration's refresh is admitted.
	GateRefuseAll = 1 << 2
)

// WaitWindow is how long a worker's OffWait covers, in ns: long enough for
// a supervisor's tick to see a peak, short enough to fall soon after.
const WaitWindow = int64(200e6)

// Gate encodes an OffGate word.
func Gate(open, probesRefused bool, retryAfter int) uint64 {
	var g uint64
	if open {
		g |= GateOpen
	}
	if probesRefused {
		g |= GateProbesRefused
	}
	return g | uint64(min(max(retryAfter, 0), 0xffff))<<16
}

// GateRetryAfter is the Retry-After, in seconds, an OffGate word carries.
func GateRetryAfter(g uint64) int { return int(g >> 16 & 0xffff) }

// SteerFrame encodes FrameSteer; since and fresh have as many entries as
// slots.
func SteerFrame(slots []uint8, since, fresh []int64) []byte {
	b := make([]byte, 0, 2+17*len(slots))
	b = append(b, FrameSteer, byte(len(slots)))
	b = append(b, slots...)
	for _, s := range since {
		b = binary.BigEndian.AppendUint64(b, uint64(s))
	}
	for _, s := range fresh {
		b = binary.BigEndian.AppendUint64(b, uint64(s))
	}
	return b
}

// ParseSteerFrame decodes SteerFrame.
func ParseSteerFrame(b []byte) (slots []uint8, since, fresh []int64, err error) {
	if len(b) < 2 || b[0] != FrameSteer {
		return nil, nil, nil, errors.New("steer frame: too short")
	}
	n := int(b[1])
	if len(b) != 2+17*n {
		return nil, nil, nil, errors.New("steer frame: length does not match its count")
	}
	slots = append([]uint8(nil), b[2:2+n]...)
	since, fresh = make([]int64, n), make([]int64, n)
	for i := range n {
		since[i] = int64(binary.BigEndian.Uint64(b[2+n+8*i:]))
		fresh[i] = int64(binary.BigEndian.Uint64(b[2+9*n+8*i:]))
	}
	return slots, since, fresh, nil
}

// A worker that reads a datagram it must not decide about (one of a call
// it does not know, in a bucket newly its own; a new session while it
// drains) passes it to the supervisor's door: doorMagic, then the message
// frame as the worker read it (MsgHeaderLen header, datagram).
const doorMagic = "DOR1"

// DoorNote encodes a message frame to pass to the supervisor's door.
func DoorNote(frame []byte) []byte {
	b := make([]byte, 0, len(doorMagic)+len(frame))
	return append(append(b, doorMagic...), frame...)
}

// ParseDoorNote decodes DoorNote: the frame.
func ParseDoorNote(b []byte) (frame []byte, ok bool) {
	if len(b) < len(doorMagic)+MsgHeaderLen || string(b[:len(doorMagic)]) != doorMagic || b[len(doorMagic)] != FrameMessage {
		return nil, false
	}
	return b[len(doorMagic):], true
}
