// Package sipscan reads just enough of a SIP datagram to route it, and builds
// stateless replies from the raw request bytes.
//
// The supervisor's front door sees every UDP datagram before any worker does.
// It must learn the Call-ID (for affinity), what admission control classifies
// a message by (method, To tag, Expires, Request-URI: overload.Classify) and
// the top Via (for the reply), and it must
// be able to refuse with a 503 without handing the message to a worker. A full
// SIP parse costs microseconds and dozens of allocations per message, which
// would make the front door the bottleneck it exists to avoid, so this package
// scans bytes instead.
//
// What it promises:
//
//   - Scan and AppendReply never allocate (AppendReply when dst has room).
//   - Neither panics, whatever the input; bad input yields one of the Error
//     values, which callers can use as a metric label or array index, and
//     Msg.ErrOffset says where the problem was found.
//   - Every []byte in a Msg is a sub-slice of the scanned datagram: it aliases
//     the input and is valid only as long as the caller keeps that buffer
//     unchanged. Copy what must outlive the read buffer.
//
// It is not a validator: a message that scans cleanly may still be refused by
// the worker's full parser. It checks what routing and replying depend on, and
// rejects what RFC 4475 calls out as unparseable, so that the front door does
// not route on guesses. Where clients stray from RFC 3261 in ways Kamailio
// and OpenSIPS accept and routing does not care about, it accepts too: an
// unquoted parameter value, such as a tag or a branch, may hold any byte but
// controls, space, ';', ',', '"' and '=' (tag=abc@host scans; '=' is left
// out because the workers' parser would not find a tag holding one), while
// parameter names, header names and methods stay tokens.
package sipscan
