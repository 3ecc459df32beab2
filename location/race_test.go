//go:build race

package location

// The race detector allocates on its own account: allocation counts are
// held without it.
const raceEnabled = true
