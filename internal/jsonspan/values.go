package jsonspan

// Values counts the values in d as a decoder into interface values would
// make them: the top value, and every element and member value. It counts
// the commas, brackets and braces outside strings, so an empty array or
// object counts one more than it holds, and d is not checked: what it
// measures is how much decoding d may cost, before anything decodes it
// (docs/design.md, "Budgets").
func Values(d []byte) int {
	n := 0
	for i := 0; i < len(d); {
		switch d[i] {
		case '"':
			i = SkipString(d, i)
			continue
		case ',', '[', '{':
			n++
		}
		i++
	}
	if SkipSpace(d, 0) < len(d) {
		n++
	}
	return n
}
