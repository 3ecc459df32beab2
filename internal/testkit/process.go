package testkit

import (
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// ProcState is the state letter of process pid in /proc/PID/stat ('R',
// 'S', 'T' stopped, 'Z' zombie...), or 0 when there is no such process.
func ProcState(pid int) byte {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 || i+2 >= len(s) {
		return 0
	}
	return s[i+2]
}

// StopProcess stops process pid with SIGSTOP and returns once it is
// stopped: the signal alone returns while the process may still run for a
// moment on another CPU. The returned function lets it go on (SIGCONT); it
// is also called at the test's end.
func StopProcess(t testing.TB, pid int) (resume func()) {
	t.Helper()
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatalf("stop pid %d: %v", pid, err)
	}
	resume = func() { syscall.Kill(pid, syscall.SIGCONT) }
	t.Cleanup(resume)
	WaitFor(t, 10*time.Second, "pid "+strconv.Itoa(pid)+" stopped", func() bool {
		s := ProcState(pid)
		return s == 'T' || s == 't'
	})
	return resume
}
