package overload

import (
	"testing"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// The tests here wait on sockets and processes far more than they compute:
// four at once fit a 2-core machine.
func TestMain(m *testing.M) { harness.Main(m, 4) }
