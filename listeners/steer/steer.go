package steer

import (
	"encoding/binary"
	"fmt"

	"golang.org/x/sys/unix"
)

const (
	// Buckets is the number of hash buckets a Table maps. Enough to spread
	// calls over the worker slots in even shares; few enough that the
	// program's jump table stays small (2*Buckets-1 instructions).
	Buckets = 64

	// MaxHashed bounds the Call-ID bytes hashed. Each hashed byte costs the
	// program eight instructions out of the 4096 it may have, and the
	// distinguishing part of common Call-IDs (SIPp's counter, a UUID's first
	// groups, a random token) comes first.
	MaxHashed = 24

	// Window is how far into the payload the '\n' that starts the Call-ID
	// line may be. The scan costs six instructions per position, so Window
	// is what remains of BPF_MAXINSNS once the rest of the program is in
	// (a test checks that one more position would not fit). A Call-ID line
	// starting later goes to the door.
	Window = 620
)

// Table maps a bucket to the index of the group socket that receives its
// datagrams; 0 is the door.
//
// Spread slots by bucket modulo (bucket i to slot 1+i%S), not in contiguous
// ranges: with h*31 and 64 buckets, a counter in the Call-ID (SIPp's, or a
// token's trailing digits) moves the bucket's low bits evenly but its high
// bits unevenly. Measured over 20,000 counter Call-IDs, modulo tables gave
// every slot its share within 2 points for 2 to 8 slots; contiguous ranges
// gave 4 slots 16 % and 33 %.
type Table [Buckets]uint8

// Hash is the hash the program computes over a Call-ID value: h = h*31 + b
// over its first MaxHashed bytes, wrapping at 32 bits (classic BPF's
// arithmetic).
func Hash(callID []byte) uint32 {
	if len(callID) > MaxHashed {
		callID = callID[:MaxHashed]
	}
	var h uint32
	for _, b := range callID {
		h = h*31 + uint32(b)
	}
	return h
}

// Bucket is the table bucket of a Call-ID value: the top bits of the hash
// times 2^32 divided by the golden ratio (Fibonacci hashing). The hash's
// low bits follow a counter in the Call-ID too closely (SIPp's
// "N-pid@host"): taken alone they spread such calls unevenly, while the
// product's top bits depend on every bit of the hash.
func Bucket(callID []byte) int { return int(Hash(callID) * fibonacci >> (32 - bucketBits)) }

// fibonacci is 2^32 divided by the golden ratio, rounded to odd.
const fibonacci = 0x9E3779B9

// bucketBits is log2(Buckets).
const bucketBits = 6

// The line starts the scan looks for, as big-endian words after masking
// with scanMask (which folds ASCII letters to upper case). "\nI:" folds its
// colon to 0x1a too, so the compact match also takes "\nI\x1a"; the
// program then checks the colon exactly, and sends that line to the door.
const (
	scanMask     = 0xffdfdfdf
	callWord     = 0x0a43414c // "\nCAL"
	compactMask  = 0xffffff00
	compactWord  = 0x0a491a00 // "\nI:" folded, last byte dropped
	restMask     = 0xdfffdfdf // "L-ID" folded, the '-' kept exact
	restWord     = 0x4c2d4944 // "L-ID"
	letterMask   = 0xdf
	callValueOff = 9 // "\nCall-ID:"
	compValueOff = 3 // "\ni:"
	maxSkip      = 2 // SP/HTAB skipped after the colon
)

// Locate finds the Call-ID value the program hashes, exactly as the program
// reads the payload: ok is false when the program returns 0 (the door).
// value is the hashed part: the value up to its first byte <= 0x20, at most
// MaxHashed bytes; it aliases payload.
//
// What the program does, and so what Locate does:
//   - Scan positions p = 0..Window-1 for a line start: the four bytes at p
//     folded to upper case are "\nCAL", or the three at p are "\nI:" or
//     "\ni:". A position whose four bytes are not all in the payload ends
//     the search (an out-of-bounds load).
//   - The first match decides. "\nCAL" must go on with "L-ID" (any case)
//     and ':' right after; otherwise (Call-Info, "Call-ID :") the door, as
//     a classic BPF program cannot jump back to scan on.
//   - Up to two SP/HTAB after the colon are skipped; then value bytes are
//     hashed until a byte <= 0x20 (CR, LF, SP, HTAB) or MaxHashed bytes.
//     An empty value, or one that reaches the end of the payload before
//     either, goes to the door.
func Locate(payload []byte) (value []byte, ok bool) {
	start, n, ok := locate(payload)
	if !ok {
		return nil, false
	}
	return payload[start : start+n : start+n], true
}

// locate returns the hashed value as payload[start:start+n].
func locate(b []byte) (start, n int, ok bool) {
	for p := 0; p < Window; p++ {
		if p+4 > len(b) {
			return 0, 0, false
		}
		w := binary.BigEndian.Uint32(b[p:]) & scanMask
		switch {
		case w == callWord:
			if p+callValueOff > len(b) ||
				binary.BigEndian.Uint32(b[p+4:])&restMask != restWord || b[p+8] != ':' {
				return 0, 0, false
			}
			return value(b, p+callValueOff)
		case w&compactMask == compactWord:
			if b[p+2] != ':' {
				return 0, 0, false
			}
			return value(b, p+compValueOff)
		}
	}
	return 0, 0, false
}

func value(b []byte, v int) (start, n int, ok bool) {
	for range maxSkip {
		if v >= len(b) {
			return 0, 0, false
		}
		if b[v] != ' ' && b[v] != '\t' {
			break
		}
		v++
	}
	for n = 0; n < MaxHashed; n++ {
		if v+n >= len(b) {
			return 0, 0, false
		}
		if b[v+n] <= ' ' {
			break
		}
	}
	return v, n, n > 0
}

// DoorProgram sends every datagram to the door: the program for a group
// whose workers are not reading, or are being replaced.
func DoorProgram() []unix.SockFilter {
	return []unix.SockFilter{{Code: unix.BPF_RET | unix.BPF_K, K: 0}}
}

// Attach gives the reuseport group of fd the program. fd may be any member
// of the group: the group has one program, and attaching replaces it for
// the next datagram, with no moment without one.
func Attach(fd int, prog []unix.SockFilter) error {
	if len(prog) == 0 || len(prog) > unix.BPF_MAXINSNS {
		return fmt.Errorf("steer: program of %d instructions, want 1..%d", len(prog), unix.BPF_MAXINSNS)
	}
	err := unix.SetsockoptSockFprog(fd, unix.SOL_SOCKET, unix.SO_ATTACH_REUSEPORT_CBPF,
		&unix.SockFprog{Len: uint16(len(prog)), Filter: &prog[0]})
	if err != nil {
		return fmt.Errorf("steer: SO_ATTACH_REUSEPORT_CBPF: %w", err)
	}
	return nil
}
