package overload

import (
	"fmt"
	"strings"
	"testing"

	"github.com/sipvisor/sipvisor/internal/sipscan"
)

type kvLines struct{ lines []string }

func (l *kvLines) Info(string, ...any) {}
func (l *kvLines) Warn(msg string, args ...any) {
	l.lines = append(l.lines, msg+" "+fmt.Sprint(args...))
}

// Every reason of refusal is logged, each at its own pace: a flood of one
// reason neither floods the log nor hides another.
func TestEveryRefusalLogged(t *testing.T) {
	t.Parallel()
	var l RefusalLog
	log := &kvLines{}
	for r := RefuseSuspended; r < NumRefusals; r++ {
		for range 50 {
			l.Note(log, "door", r, ClassNew, sipscan.KindCall)
		}
	}
	if want := int(NumRefusals) - 1; len(log.lines) != want {
		t.Fatalf("want one line per reason (%d), have %d:\n%s", want, len(log.lines), strings.Join(log.lines, "\n"))
	}
	for i, line := range log.lines {
		r := Refusal(i + 1)
		if !strings.Contains(line, "event") || (r != RefuseRegistrations && !strings.Contains(line, r.String())) {
			t.Errorf("line for %v does not name it: %s", r, line)
		}
		if n := l.by[r].skipped.Load(); n != 49 {
			t.Errorf("%v: want the 49 refusals since counted for the next line, have %d", r, n)
		}
	}
}
