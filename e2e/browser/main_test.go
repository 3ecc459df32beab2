package browser

import (
	"testing"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// One browser test at a time: Chromium is the heaviest process of the
// suite.
func TestMain(m *testing.M) { harness.Main(m, 1) }
