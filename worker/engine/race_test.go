//go:build race

package engine

// The race detector allocates on its own account: allocation budgets are
// held without it.
const raceEnabled = true
