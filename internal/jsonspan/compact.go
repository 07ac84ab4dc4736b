package jsonspan

// AppendCompact appends d, a valid JSON value (Valid), to dst without the
// whitespace between its tokens: the bytes encoding/json's Compact writes
// for it (FuzzAppendCompactAgreesWithEncodingJSON). A string is copied in
// one step, found by its closing quote, where Compact reads it byte by
// byte: the arguments of a call, up to 4 MiB, are compacted into the
// request posted upstream (BenchmarkCompact*).
func AppendCompact(dst, d []byte) []byte {
	for i := SkipSpace(d, 0); i < len(d); i = SkipSpace(d, i) {
		// A string, or a run of other bytes up to the next space or string.
		j := i + 1
		if d[i] == '"' {
			j = SkipString(d, i)
		} else {
			for j < len(d) && !isSpace(d[j]) && d[j] != '"' {
				j++
			}
		}
		dst = append(dst, d[i:j]...)
		i = j
	}
	return dst
}
