package wire

import (
	"bytes"
	"encoding/binary"
	"errors"
	"strings"
)

// A worker that reads its own connections (TCP) asks the supervisor about
// each new session it receives, with a call (worker.Env.Call), for the front
// door's decision: the same checks and the same 503 with Retry-After on
// every transport. The request is admitMagic, the method (sipscan.Method)
// and the Call-ID; the answer is the refusal's reason (0 admits) and the
// Retry-After seconds.
const admitMagic = "ADM1"

// AdmitRequest encodes the question for a new session of method with
// callID.
func AdmitRequest(method byte, callID []byte) []byte {
	b := make([]byte, 0, len(admitMagic)+1+len(callID))
	b = append(b, admitMagic...)
	b = append(b, method)
	return append(b, callID...)
}

// ParseAdmitRequest reports the method and Call-ID of an admission
// question; ok is false for another kind of call.
func ParseAdmitRequest(req []byte) (method byte, callID []byte, ok bool) {
	if len(req) <= len(admitMagic) || string(req[:len(admitMagic)]) != admitMagic {
		return 0, nil, false
	}
	return req[len(admitMagic)], req[len(admitMagic)+1:], true
}

// AdmitAnswer encodes the decision: reason 0 admits.
func AdmitAnswer(reason byte, retryAfter int) []byte {
	return binary.BigEndian.AppendUint16([]byte{reason}, uint16(min(max(retryAfter, 0), 65535)))
}

// ParseAdmitAnswer decodes AdmitAnswer.
func ParseAdmitAnswer(b []byte) (reason byte, retryAfter int, err error) {
	if len(b) != 3 {
		return 0, 0, errors.New("malformed admission answer")
	}
	return b[0], int(binary.BigEndian.Uint16(b[1:])), nil
}

// Such a worker also notes (worker.Env.Note) each request it reads that moves a
// session on — a new INVITE or SUBSCRIBE it admitted, an ACK, a BYE, a
// SUBSCRIBE's refresh — so that sessions count alike on every transport:
// sessionMagic, the method, flags (1: the To has a tag), Expires (int32,
// -1 when absent), the branch's length (uvarint), the branch, the Call-ID.
const sessionMagic = "SES1"

// SessionNote encodes a session note.
func SessionNote(method byte, toTag bool, expires int32, branch, callID []byte) []byte {
	b := make([]byte, 0, len(sessionMagic)+2+4+binary.MaxVarintLen64+len(branch)+len(callID))
	return AppendSessionNote(b, method, toTag, expires, branch, callID)
}

// AppendSessionNote appends SessionNote's encoding to b.
func AppendSessionNote(b []byte, method byte, toTag bool, expires int32, branch, callID []byte) []byte {
	b = append(b, sessionMagic...)
	var flags byte
	if toTag {
		flags = 1
	}
	b = append(b, method, flags)
	b = binary.BigEndian.AppendUint32(b, uint32(expires))
	b = binary.AppendUvarint(b, uint64(len(branch)))
	b = append(b, branch...)
	return append(b, callID...)
}

// ParseSessionNote decodes SessionNote; ok is false for another note or a
// malformed one.
func ParseSessionNote(b []byte) (method byte, toTag bool, expires int32, branch, callID []byte, ok bool) {
	if len(b) < len(sessionMagic)+6 || string(b[:len(sessionMagic)]) != sessionMagic {
		return 0, false, 0, nil, nil, false
	}
	b = b[len(sessionMagic):]
	method, toTag, expires = b[0], b[1]&1 != 0, int32(binary.BigEndian.Uint32(b[2:6]))
	b = b[6:]
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return 0, false, 0, nil, nil, false
	}
	b = b[k:]
	return method, toTag, expires, b[:n], b[n:], true
}

// A worker notes each connection it was handed that ends, with why, so that
// the supervisor's connection limits count only those still open:
// closedMagic, the reason, a zero byte, the remote address.
const closedMagic = "CLS1"

// ConnClosedNote encodes a closed connection's note.
func ConnClosedNote(reason, remote string) []byte {
	b := make([]byte, 0, len(closedMagic)+len(reason)+1+len(remote))
	b = append(b, closedMagic...)
	b = append(b, reason...)
	b = append(b, 0)
	return append(b, remote...)
}

// ParseConnClosedNote decodes ConnClosedNote; ok is false for another note.
func ParseConnClosedNote(b []byte) (reason, remote string, ok bool) {
	if len(b) < len(closedMagic) || string(b[:len(closedMagic)]) != closedMagic {
		return "", "", false
	}
	r, a, found := strings.Cut(string(b[len(closedMagic):]), "\x00")
	return r, a, found
}

// A draining worker hands a connection back at a message boundary, with
// the bytes it had read past that boundary: handOffMagic, the remote
// address, a zero byte, the bytes.
const handOffMagic = "HND1"

// HandOffNote encodes a hand-off.
func HandOffNote(remote string, prefix []byte) []byte {
	b := make([]byte, 0, len(handOffMagic)+len(remote)+1+len(prefix))
	b = append(b, handOffMagic...)
	b = append(b, remote...)
	b = append(b, 0)
	return append(b, prefix...)
}

// A TLS 1.3 connection is handed back with its record layer's state
// (package engine's tlsMoveState), which the next worker goes on with:
// handOffTLSMagic, the remote address, a zero byte, the plaintext read
// past the last message (uvarint length, bytes), then the state.
const handOffTLSMagic = "HNT1"

// HandOffTLSNote encodes a TLS connection's hand-off.
func HandOffTLSNote(remote string, prefix, state []byte) []byte {
	b := make([]byte, 0, len(handOffTLSMagic)+len(remote)+1+binary.MaxVarintLen64+len(prefix)+len(state))
	b = append(b, handOffTLSMagic...)
	b = append(b, remote...)
	b = append(b, 0)
	b = binary.AppendUvarint(b, uint64(len(prefix)))
	b = append(b, prefix...)
	return append(b, state...)
}

// ParseHandOffTLSNote decodes HandOffTLSNote: payload is what the next
// worker gets in its FrameConnTLS frame (ParseConnTLSPayload).
func ParseHandOffTLSNote(b []byte) (remote string, payload []byte, ok bool) {
	if len(b) < len(handOffTLSMagic) || string(b[:len(handOffTLSMagic)]) != handOffTLSMagic {
		return "", nil, false
	}
	b = b[len(handOffTLSMagic):]
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return "", nil, false
	}
	if _, _, ok := ParseConnTLSPayload(b[i+1:]); !ok {
		return "", nil, false
	}
	return string(b[:i]), b[i+1:], true
}

// ParseConnTLSPayload splits a FrameConnTLS frame's payload into the
// plaintext read past the last message and the record layer's state.
func ParseConnTLSPayload(b []byte) (prefix, state []byte, ok bool) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)-k) {
		return nil, nil, false
	}
	return b[k : k+int(n)], b[k+int(n):], true
}

// ParseHandOffNote decodes HandOffNote; ok is false for another note.
func ParseHandOffNote(b []byte) (remote string, prefix []byte, ok bool) {
	if len(b) < len(handOffMagic) || string(b[:len(handOffMagic)]) != handOffMagic {
		return "", nil, false
	}
	b = b[len(handOffMagic):]
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return "", nil, false
	}
	return string(b[:i]), b[i+1:], true
}

// A worker that reads a response to a transaction another worker holds
// (a peer that answered to where the call's first request came from, not
// to the Via) passes it on: forwardMagic, the holder's pid (uvarint), the
// source address, a zero byte, the message.
const forwardMagic = "FWD1"

// ForwardNote encodes a message to pass to the worker with pid.
func ForwardNote(pid int, from string, msg []byte) []byte {
	b := make([]byte, 0, len(forwardMagic)+binary.MaxVarintLen64+len(from)+1+len(msg))
	b = append(b, forwardMagic...)
	b = binary.AppendUvarint(b, uint64(pid))
	b = append(b, from...)
	b = append(b, 0)
	return append(b, msg...)
}

// ParseForwardNote decodes ForwardNote; ok is false for another note.
func ParseForwardNote(b []byte) (pid int, from string, msg []byte, ok bool) {
	if len(b) < len(forwardMagic) || string(b[:len(forwardMagic)]) != forwardMagic {
		return 0, "", nil, false
	}
	b = b[len(forwardMagic):]
	p, n := binary.Uvarint(b)
	if n <= 0 || p > 1<<31 {
		return 0, "", nil, false
	}
	b = b[n:]
	i := bytes.IndexByte(b, 0)
	if i < 0 {
		return 0, "", nil, false
	}
	return int(p), string(b[:i]), b[i+1:], true
}
