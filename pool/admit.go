package pool

import (
	"encoding/binary"
	"errors"
)

// A worker that reads its own connections (TCP) asks the supervisor about
// each new session it receives, with a call (Env.Call), for the front
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
