package wire

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

// ProfileNames are the profiles a worker can be asked for, named as
// net/http/pprof names them: the runtime's profiles, and CPUProfile.
var ProfileNames = []string{"heap", "allocs", "goroutine", CPUProfile, "block", "mutex", "threadcreate"}

// CPUProfile is the CPU profile's name; it is taken over a number of seconds.
const CPUProfile = "profile"

// Bounds of a CPU profile's length. A profile runs beside the worker's work,
// so a long one costs little, but it holds the process's one CPU profiler.
const (
	DefaultProfileSeconds = 10
	MaxProfileSeconds     = 120
)

// Errors of CheckProfile.
var (
	ErrUnknownProfile = errors.New("unknown profile")
	ErrProfileSeconds = errors.New("bad CPU profile length")
)

// The profile pipe carries one status byte, then for ProfileOK the
// profile's length (8 bytes) and the profile, else an error message. The
// worker builds the whole profile before it writes anything, so that the
// length goes first: a pipe that ends short is then a failure the
// supervisor can tell from the end of a profile.
const (
	ProfileOK     = 0
	ProfileBusy   = 1
	ProfileFailed = 2
	// MaxProfileErr bounds the error message the supervisor reads.
	MaxProfileErr = 4 << 10
)

// profileError is a message that reads well on its own, carrying one of
// the errors above for errors.Is.
type profileError struct {
	msg  string
	kind error
}

func (e *profileError) Error() string { return e.msg }
func (e *profileError) Unwrap() error { return e.kind }

func profileErrorf(kind error, format string, args ...any) error {
	return &profileError{fmt.Sprintf(format, args...), kind}
}

// CheckProfile says why the profile name of seconds cannot be taken, or
// returns nil; seconds counts for CPUProfile only. Both sides check: the
// supervisor before it asks, the worker before it takes one.
func CheckProfile(name string, seconds int) error {
	if !slices.Contains(ProfileNames, name) {
		hint := ""
		if strings.EqualFold(name, "cpu") {
			hint = fmt.Sprintf(" (the CPU profile is %q)", CPUProfile)
		}
		return profileErrorf(ErrUnknownProfile, "unknown profile %q: want one of %s%s", name, strings.Join(ProfileNames, ", "), hint)
	}
	if name == CPUProfile && (seconds < 1 || seconds > MaxProfileSeconds) {
		return profileErrorf(ErrProfileSeconds, "a CPU profile of %d seconds: want 1 to %d", seconds, MaxProfileSeconds)
	}
	return nil
}
