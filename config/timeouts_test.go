package config

import (
	"strings"
	"testing"
	"time"

	"github.com/sipvisor/sipvisor/overload/sessions"
)

// A drain shorter than a ringing INVITE may stay pending would kill a
// worker holding a call still ringing: the file is refused, at the line of
// the setting, with the reason.
func TestDrainTimeoutMustOutlastAPendingInvite(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		drain   string
		want    time.Duration
		refused bool
	}{
		{"", sessions.DrainTimeout, false},
		{"152s", sessions.PendingInvite, false},
		{"3m", 3 * time.Minute, false},
		{"151s", 0, true},
		{"1m30s", 0, true},
		{"0", 0, true},
	} {
		t.Run(tc.drain, func(t *testing.T) {
			src := "log_level = info\n"
			if tc.drain != "" {
				src += "worker_drain_timeout = " + tc.drain + "\n"
			}
			c, err := Load("drain.cfg", []byte(src))
			if tc.refused {
				if err == nil {
					t.Fatalf("worker_drain_timeout = %s loaded; want it refused", tc.drain)
				}
				msg := err.Error()
				for _, part := range []string{"drain.cfg:2:", "worker_drain_timeout = " + tc.drain, "ringing INVITE"} {
					if !strings.Contains(msg, part) {
						t.Errorf("error %q does not say %q", msg, part)
					}
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if c.Workers.DrainTimeout != tc.want {
				t.Errorf("drain timeout %v, want %v", c.Workers.DrainTimeout, tc.want)
			}
		})
	}
}

// The default drain is derived from what it must outlast.
func TestDefaultDrainOutlastsAPendingInvite(t *testing.T) {
	t.Parallel()
	if d := Default().Workers.DrainTimeout; d != sessions.DrainTimeout || d < sessions.PendingInvite {
		t.Fatalf("default drain timeout %v: want sessions.DrainTimeout %v, at least a pending INVITE's %v", d, sessions.DrainTimeout, sessions.PendingInvite)
	}
}
