//go:build !race

package location

const raceEnabled = false
