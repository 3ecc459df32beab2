package ctl

import "strings"

// didYouMean returns the candidate closest to word in edit distance, or ""
// when none is close enough to be a likely typo; failing that, the shortest
// candidate that word begins, since a path cut short is the other common
// slip. Ties go to the earlier candidate so the answer is stable. (The config package has its own copy:
// ctl stays free of sipvisor imports.)
func didYouMean(word string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		d := editDistance(word, c)
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	limit := max(len(word)/6, 2)
	if bestD >= 0 && bestD <= limit && bestD < len(word) {
		return best
	}
	best = ""
	for _, c := range candidates {
		if word != "" && strings.HasPrefix(c, word) && (best == "" || len(c) < len(best)) {
			best = c
		}
	}
	return best
}

// editDistance is the Levenshtein distance, with a swap of two neighbours
// counting as one edit since that is the commonest typo. Long inputs are
// compared only for equality, so a hostile path costs little.
func editDistance(a, b string) int {
	const most = 256
	if len(a) > most || len(b) > most {
		if a == b {
			return 0
		}
		return most + 1
	}
	prev2 := make([]int, len(b)+1)
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
			if i > 1 && j > 1 && a[i-1] == b[j-2] && a[i-2] == b[j-1] {
				cur[j] = min(cur[j], prev2[j-2]+1)
			}
		}
		prev2, prev, cur = prev, cur, prev2
	}
	return prev[len(b)]
}
