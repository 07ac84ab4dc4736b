package jsonspan

// AppendCompact appends d, a valid JSON value (Valid), to dst without the
// whitespace between its tokens: the bytes encoding/json's Compact writes
// for it (FuzzAppendCompactAgreesWithEncodingJSON). A string is copied in
// one step, found by its closing quote, where Compact reads it byte by
// byte: the arguments of a call, up to 4 MiB, are compacted into the
// request posted upstream (BenchmarkCompact*).
func AppendCompact(dst, d []byte) []byte {
	for i := 0; i < len(d); {
		switch d[i] {
		case ' ', '\t', '\n', '\r':
			i++
		case '"':
			j := SkipString(d, i)
			dst = append(dst, d[i:j]...)
			i = j
		default:
			j := i + 1
			for j < len(d) && !tokenEnd(d[j]) {
				j++
			}
			dst = append(dst, d[i:j]...)
			i = j
		}
	}
	return dst
}

// tokenEnd: c ends a run of bytes outside strings that AppendCompact
// copies as it is.
func tokenEnd(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '"' }
