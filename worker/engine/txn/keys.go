package txn

import "strconv"

// The keys a transaction is matched by, written from a request's fields
// as received, whether read from its bytes or from a decoded message:
// both paths of the engine must make the same key of the same request.

// AppendServerKey appends the key of a server transaction (RFC 3261
// 17.2.3): the top Via's branch and sent-by, and the method, an ACK's
// being its INVITE's. A missing port is 0, as written.
func AppendServerKey[S ~string | ~[]byte](b []byte, branch, host S, port int, method S) []byte {
	b = append(b, branch...)
	b = append(b, '|')
	b = append(b, host...)
	b = append(b, ':')
	b = strconv.AppendInt(b, int64(port), 10)
	b = append(b, '|')
	if string(method) == "ACK" {
		return append(b, "INVITE"...)
	}
	return append(b, method...)
}

// AppendDialogKey appends what matches the ACK of a 2xx, which carries a
// branch of its own, to its INVITE: Call-ID, From tag and CSeq number.
func AppendDialogKey[S ~string | ~[]byte](b []byte, callID, fromTag S, cseq uint32) []byte {
	b = append(b, callID...)
	b = append(b, '|')
	b = append(b, fromTag...)
	b = append(b, '|')
	return strconv.AppendUint(b, uint64(cseq), 10)
}

// LocalTag is the To tag of the replies a server makes itself, FNV-1a
// over the request's Call-ID, From tag and top Via branch: a
// retransmission gets the same one, and the ACK of a reply carries it
// back.
func LocalTag[S ~string | ~[]byte](callID, fromTag, branch S) uint64 {
	h := uint64(14695981039346656037)
	for _, s := range [3]S{callID, fromTag, branch} {
		for i := 0; i < len(s); i++ {
			h ^= uint64(s[i])
			h *= 1099511628211
		}
	}
	return h
}

// AppendLocalTag appends LocalTag as written in a To header.
func AppendLocalTag[S ~string | ~[]byte](b []byte, callID, fromTag, branch S) []byte {
	return strconv.AppendUint(b, LocalTag(callID, fromTag, branch), 36)
}
