package ctl

import (
	"strings"

	"github.com/sipvisor/sipvisor/internal/didyoumean"
)

// didYouMean returns the candidate closest to word in edit distance, or
// failing that the shortest candidate that word begins, since a path cut
// short is the other common slip with control paths.
func didYouMean(word string, candidates []string) string {
	if best := didyoumean.Closest(word, candidates); best != "" {
		return best
	}
	best := ""
	for _, c := range candidates {
		if word != "" && strings.HasPrefix(c, word) && (best == "" || len(c) < len(best)) {
			best = c
		}
	}
	return best
}
