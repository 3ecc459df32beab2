// Package steer picks, in the kernel, which socket of a UDP SO_REUSEPORT
// group receives each SIP datagram, so that the workers can read the SIP port
// themselves and every message of a call still reaches the same worker.
//
// The group's socket index 0 is the supervisor's own socket, its front door;
// indexes 1..S are one socket per worker slot. A classic BPF program attached
// with SO_ATTACH_REUSEPORT_CBPF finds the Call-ID header in the UDP payload,
// hashes the first MaxHashed bytes of its value, and maps the hash's bucket
// through a Table to a socket index. The package owns that program (Program,
// DoorProgram), the way to attach it (Attach) and its Go twin (Locate, Hash,
// Bucket).
//
// The rule: the program is an optimisation. Index 0, the door, can handle
// every datagram (slowly), so whatever the program cannot read with certainty
// goes there: no Call-ID in the first Window bytes, a header it does not
// recognise, a value that runs to the end of the datagram, a packet too short
// to load from (classic BPF ends the program returning 0 on an out-of-bounds
// load, which is exactly that fallback). Locate says, for any payload, what
// the program does with it: a worker or the door can predict where a
// datagram went, and tests hold the two together. Change one and the other
// must change with it.
//
// The indexes are positions in the kernel's array of the group's sockets:
// the order in which they were bound, until a member closes, when the
// kernel moves the last member into the hole. A table entry at or above the
// group's size makes the kernel pick by its own hash instead, which breaks
// affinity; keeping the table within the group is the caller's job.
package steer
