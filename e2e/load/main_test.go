// Package load holds the end-to-end tests that measure goodput and timing
// under load on the machine's cores. They run one at a time: none is
// Parallel, and no other package holds such a test, since two of them at
// once on a small machine would falsify each other.
package load

import (
	"testing"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

func TestMain(m *testing.M) { harness.Main(m, 1) }
