// Package oc is RFC 7339's overload control, the loss algorithm, as pure
// rules: the Via parameters it is carried in (oc, oc-algo, oc-validity,
// oc-seq), the server's side (the share of new sessions it asks its
// upstream to shed, Controller, and stamping it into a response's top Via,
// StampResponse) and the client's (each destination's feedback, Client,
// and the draw that sheds a new session, Shed). It does no I/O and reads
// no clock: callers pass the time and the random source, so every rule is
// table-tested.
//
// The rules kept, from RFC 7339:
//   - a client says it supports overload control with "oc" (no value) and
//     oc-algo="loss" in the Via it adds to a request; a server answers with
//     feedback only in responses to such a request, never to a sender that
//     did not ask;
//   - the feedback is oc=N (0–100, the percent of new requests to shed),
//     oc-algo="loss", oc-validity=MS (how long it holds; 0 ends overload
//     control at once, absent means 500 ms) and oc-seq (a timestamp that
//     grows with each new value, "seconds.milliseconds");
//   - a client takes feedback only with an oc-seq newer than the last it
//     took from that server; it holds it for oc-validity after it came;
//   - the client sheds that share of the new requests it would send, by a
//     random draw; requests within a dialog are never shed.
package oc
