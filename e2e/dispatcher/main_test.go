package dispatcher

import (
	"testing"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// A test here runs a front end, two SIPp backends and a SIPp caller: two
// at once fit a 2-core machine.
func TestMain(m *testing.M) { harness.Main(m, 2) }
