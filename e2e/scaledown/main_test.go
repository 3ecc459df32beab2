// Package scaledown holds the end-to-end tests of a group shrinking under
// calls over UDP, TCP and TLS: nothing a draining worker holds may be lost.
// They scale down by a profile whose threshold ordinary load stays under,
// so they may run beside e2e/load; among themselves they run one at a
// time, as each waits for its own group's drains.
package scaledown

import (
	"testing"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

func TestMain(m *testing.M) { harness.Main(m, 1) }
