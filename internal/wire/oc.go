package wire

import (
	"time"

	"github.com/sipvisor/sipvisor/overload/oc"
)

// OffOverloadControl is written by the supervisor, read by the worker: the
// RFC 7339 feedback this server sends to the clients that offer oc
// (package overload/oc), as OCWord encodes it; 0 when none is sent
// (oc_feedback off, or before the first interval). Apart from the other
// words, at an offset their growth will not reach.
const OffOverloadControl = 1024

// OCWord packs a loss (0–100 percent, 8 bits), its validity (14 bits, in
// units of 10 ms, up to 163 s) and its oc-seq (unix ms, 42 bits, good
// until 2109) in a word.
func OCWord(loss int, validity time.Duration, seqMs int64) uint64 {
	v := min(max(validity.Milliseconds()/10, 0), 1<<14-1)
	return uint64(seqMs)<<22 | uint64(v)<<8 | uint64(min(max(loss, 0), 100))
}

// ParseOCWord reads OCWord; ok is false for 0, no feedback.
func ParseOCWord(w uint64) (loss int, validity time.Duration, seqMs int64, ok bool) {
	return int(w & 0xff), time.Duration(w>>8&(1<<14-1)) * 10 * time.Millisecond, int64(w >> 22), w != 0
}

// OCFeedback reads the feedback in force from an OffOverloadControl word,
// as every door and worker of a server reads what its supervisor
// computed; false when there is none.
func OCFeedback(w uint64) (oc.Feedback, bool) {
	loss, validity, ms, ok := ParseOCWord(w)
	if !ok {
		return oc.Feedback{}, false
	}
	return oc.Feedback{Loss: loss, Validity: validity, Seq: oc.SeqAt(time.UnixMilli(ms))}, true
}
