// Package ctl is sipvisor's run-time control: the JSON API the supervisor
// mounts at /mi/ on its control address, and the `sipvisor ctl` command that
// talks to it (and, for `ctl pprof`, fetches profiles from /debug/pprof/
// beside it).
//
// The supervisor implements Backend; everything the API shows or changes goes
// through it, so the API holds no state of its own apart from Params, the
// registry of live settings that the supervisor fills at start-up with a
// getter and a setter for each one. A setting is addressed by a path such as
// suspend_watermarks/system_memory_usage/high, and a prefix of such paths
// names the subtree below it.
//
// # Invariants
//
//   - A refused change changes nothing: a value is parsed and checked against
//     its Kind before its setter runs, and a setter that refuses leaves the old
//     value in force.
//   - With a token configured, a request without it changes nothing and learns
//     nothing beyond the 401.
//   - Reads are GET, changes are POST; any other method is refused with 405.
//
// ctl depends on nothing else in sipvisor, so that the supervisor can import
// it and the CLI can use it without pulling in the server.
package ctl
