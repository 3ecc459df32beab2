// Package testkit holds what the tests of several packages share: waiting
// for an observed event with a deadline instead of sleeping, a log buffer
// safe to read while it is written, free ports, SIP request builders and a
// Prometheus text reader that tells a missing series from a zero one.
//
// It is imported only by _test.go files. It imports nothing of sipvisor,
// so that the tests of any package, including internal tests of the
// packages sipvisor is built from, can use it without an import cycle; the
// worker process tests start lives in testkit/testworker, which imports
// package worker.
package testkit
