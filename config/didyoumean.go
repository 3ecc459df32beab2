package config

import "github.com/sipvisor/sipvisor/internal/didyoumean"

func didYouMean(word string, candidates []string) string {
	return didyoumean.Closest(word, candidates)
}
