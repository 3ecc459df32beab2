// Package scaledown holds the end-to-end tests of a group shrinking under
// calls over UDP, TCP and TLS: nothing a draining worker holds may be lost.
// They scale down by a profile whose threshold ordinary load stays under,
// and mostly wait for their groups' drains: they run two at a time, beside
// e2e/load.
package scaledown

import (
	"testing"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

func TestMain(m *testing.M) { harness.Main(m, 2) }
