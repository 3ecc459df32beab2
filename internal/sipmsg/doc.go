// Package sipmsg is a SIP message read once into offsets and written again
// by splicing: what a proxy needs to route and relay a message without
// making an object of it.
//
// Parse runs sipscan's scanner (the front door's, which allocates nothing)
// and records where each header line lies and which of the headers routing
// uses it is. Nothing is decoded until asked: URI parses an addr-spec or
// name-addr into sub-slices, Values walks the comma-separated values of a
// header. AppendSplice writes the message as a proxy relays it: a Via on
// top (and received/rport set on the one it came with), Record-Route lines
// in, Max-Forwards down, Route values out, Content-Length added for a
// stream, and every other byte as it came.
//
// Every []byte a Msg or URI holds aliases the parsed buffer: it is valid as
// long as the caller keeps that buffer unchanged. Bad input yields an error
// that says what is wrong (a sipscan.Error) and never a panic.
package sipmsg
