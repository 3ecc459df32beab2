package security

import (
	"testing"

	"github.com/sipvisor/sipvisor/e2e/internal/harness"
)

// The tests here run the built-in config against attackers' tools and
// phones; they wait on sockets far more than they compute.
func TestMain(m *testing.M) { harness.Main(m, 3) }
