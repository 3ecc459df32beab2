// Package e2e holds the end-to-end tests: the real sipvisor binary, run as
// a user would, against SIPp and sipload on 127.0.0.1. They are split by
// theme so that go test runs the packages side by side:
//
//   - load: goodput and timing under load (bursts, a registration storm,
//     a soak, scaling up). These measure what the machine's cores can do,
//     so they run one at a time, in one package, and are skipped with
//     -short.
//   - scaledown: a group shrinking under calls over UDP, TCP and TLS, two
//     at a time, beside the others.
//   - overload: admission control: watermarks, limits, queue bounds,
//     suspension, connection hygiene.
//   - lifecycle: signals, killed workers, reloads, the README's quick start.
//   - transport: calls over UDP, TCP and TLS and between them, malformed
//     input, retransmissions, SIPp and sipload scenario files.
//   - registrar: registrations, digest authentication, the location store.
//
// The tests of the others wait on sockets and processes far more than
// they compute: they run in parallel (see harness.Main). e2e/internal/harness
// builds the binaries once per package and holds the shared helpers.
//
// The transition stress tests (transitions_test.go in lifecycle and scaledown:
// a node's start, the switch between the door and direct reads, a TCP
// scale-down) repeat their transition a few times by default and
// SIPVISOR_STRESS_ROUNDS times when it is set, to hunt a loss that shows
// once in many: SIPVISOR_STRESS_ROUNDS=50 go test -run Stress ./e2e/scaledown.
// A failed round prints what was sent and received and sipvisor's log.
package e2e
