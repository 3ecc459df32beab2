package testkit

import (
	"strings"
	"sync"
	"testing"
	"time"
)

// pollEvery is how often a condition is polled. Polling is only a way to
// observe an event that sends no signal; what a test asserts is always the
// condition, never the time it took.
const pollEvery = 5 * time.Millisecond

// Until polls cond until it holds (true) or timeout passes (false). It is
// for code that has no testing.TB, such as a test binary re-executed as a
// helper process; tests call WaitFor.
func Until(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(pollEvery) // polling an observed condition, not asserting after a delay
	}
	return true
}

// WaitFor polls cond until it holds, and fails the test if it does not
// within timeout. what names the awaited event for the failure message:
// "timed out after 10s waiting for 2 ready workers".
func WaitFor(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	if !Until(timeout, cond) {
		// One last look: a condition that turned true while the deadline
		// passed is no failure.
		if cond() {
			return
		}
		t.Fatalf("timed out after %v waiting for %s", timeout, what)
	}
}

// SyncBuffer collects output written from several goroutines (a logger, a
// child process's stdout) and can be read while it is written.
type SyncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (s *SyncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

// String is everything written so far.
func (s *SyncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// Contains reports whether substr was written so far.
func (s *SyncBuffer) Contains(substr string) bool {
	return strings.Contains(s.String(), substr)
}

// Reset forgets what was written.
func (s *SyncBuffer) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.b.Reset()
}

// WaitForLine waits until buf holds a line containing substr and returns
// that line; it fails the test with what buf holds if none comes within
// timeout.
func WaitForLine(t testing.TB, buf *SyncBuffer, substr string, timeout time.Duration) string {
	t.Helper()
	var line string
	found := Until(timeout, func() bool {
		line = findLine(buf.String(), substr)
		return line != ""
	})
	if !found {
		t.Fatalf("timed out after %v waiting for a line with %q; have:\n%s", timeout, substr, buf.String())
	}
	return line
}

// findLine is the first line of s containing substr, without its newline.
func findLine(s, substr string) string {
	for line := range strings.Lines(s) {
		if strings.Contains(line, substr) {
			return strings.TrimRight(line, "\r\n")
		}
	}
	return ""
}
