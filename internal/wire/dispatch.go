package wire

import "bytes"

// FrameDispatch carries the states of the destination sets
// (dispatcher.EncodeStates) from the supervisor, which probes them, to a
// worker, which selects by them: sent to every worker when a state
// changes, and to each new one.
const FrameDispatch = 'X'

var dispatchMagic = []byte("DSP1")

// DispatchNote wraps what a worker tells the supervisor of the
// destinations (dispatcher.EncodeReport): the calls it sent each, and the
// ones a script marked (ds_mark_dst).
func DispatchNote(report []byte) []byte {
	b := make([]byte, 0, len(dispatchMagic)+len(report))
	return append(append(b, dispatchMagic...), report...)
}

// ParseDispatchNote decodes DispatchNote.
func ParseDispatchNote(b []byte) (report []byte, ok bool) {
	if !bytes.HasPrefix(b, dispatchMagic) {
		return nil, false
	}
	return b[len(dispatchMagic):], true
}

var dispatchStatesMagic = []byte("DSQ1")

// DispatchStatesRequest is a new worker's call for the destinations' states
// as they are now, answered with dispatcher.EncodeStates, so that it
// chooses by them from its first request rather than from the list's
// flags until the next FrameDispatch.
func DispatchStatesRequest() []byte { return bytes.Clone(dispatchStatesMagic) }

// IsDispatchStatesRequest reports whether a call is DispatchStatesRequest.
func IsDispatchStatesRequest(b []byte) bool { return bytes.Equal(b, dispatchStatesMagic) }
