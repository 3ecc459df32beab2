package sipscan

// Line is one logical header line of a message: its name is
// b[Start:NameEnd], its value b[ValStart:ValEnd] (folded continuation lines
// included, leading whitespace not trimmed) and the next line starts at
// Next.
type Line struct {
	Start, NameEnd, ValStart, ValEnd, Next int
}

// NextLine reads the header line at off of b into l, or reports the empty
// line that ends the headers (l.Next is then the body's offset). It is the
// reader Scan uses, so on a message Scan accepted it finds the same lines;
// on others it returns the Error Scan would.
func NextLine(b []byte, off int, l *Line) (done bool, err error) {
	var h header
	done, e := nextHeader(b, off, DefaultMaxLine, &h)
	if e != 0 {
		return false, e
	}
	*l = Line{Start: h.start, NameEnd: h.nameEnd, ValStart: h.valStart, ValEnd: h.valEnd, Next: h.next}
	return done, nil
}
