// Package didyoumean suggests the known word a user most likely meant: a
// config parameter, a function, a profile, a control path.
//
// It only ever suggests a word from the list it is given, and none when the
// nearest is more than a third of the word away, so an error message never
// points a user at a guess.
package didyoumean

// Closest returns the candidate closest to word in edit distance, or "" when
// none is close enough to be a likely typo (more than a third of the word,
// and at least 2, wrong). Ties go to the earlier candidate so the answer is
// stable.
func Closest(word string, candidates []string) string {
	best, bestD := "", -1
	for _, c := range candidates {
		d := Distance(word, c)
		if bestD < 0 || d < bestD {
			best, bestD = c, d
		}
	}
	limit := max(len(word)/3, 2)
	if bestD < 0 || bestD > limit || bestD >= len(word) {
		return ""
	}
	return best
}

// maxLen bounds the words compared in full; longer ones are compared only
// for equality, so a hostile input costs little.
const maxLen = 256

// Distance is the Levenshtein distance, with a swap of two neighbours
// counting as one edit since that is the commonest typo.
func Distance(a, b string) int {
	if len(a) > maxLen || len(b) > maxLen {
		if a == b {
			return 0
		}
		return maxLen + 1
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
