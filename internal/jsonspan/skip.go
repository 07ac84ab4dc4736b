package jsonspan

import (
	"bytes"
	"encoding/json"
)

// SkipSpace returns the index of the first byte at or after i that is not
// JSON whitespace.
func SkipSpace(d []byte, i int) int {
	for i < len(d) && isSpace(d[i]) {
		i++
	}
	return i
}

// isSpace: c is JSON whitespace.
func isSpace(c byte) bool { return c == ' ' || c == '\t' || c == '\n' || c == '\r' }

// SkipString returns the index after the string that starts at d[i]:
// after the first quote that an even run of backslashes precedes, or
// len(d) if there is none.
func SkipString(d []byte, i int) int {
	for j := i + 1; ; {
		k := bytes.IndexByte(d[j:], '"')
		if k < 0 {
			return len(d)
		}
		q := j + k
		slashes := 0
		for p := q - 1; p > i && d[p] == '\\'; p-- {
			slashes++
		}
		if slashes%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
}

// SkipValue returns the index after the value that starts at d[i]: a
// string up to its closing quote, an object or array up to its closing
// bracket, anything else up to the next comma, closing bracket or
// whitespace.
func SkipValue(d []byte, i int) int {
	if i >= len(d) {
		return i
	}
	switch d[i] {
	case '"':
		return SkipString(d, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(d); j++ {
			switch d[j] {
			case '"':
				j = SkipString(d, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(d)
	}
	if end := bytes.IndexAny(d[i:], ",}] \t\r\n"); end >= 0 {
		return i + end
	}
	return len(d)
}

// NestedDeeperThan: d opens more than max objects and arrays inside one
// another.
func NestedDeeperThan(d []byte, max int) bool {
	depth := 0
	for i := 0; i < len(d); i++ {
		switch d[i] {
		case '"':
			i = SkipString(d, i) - 1
		case '{', '[':
			if depth++; depth > max {
				return true
			}
		case '}', ']':
			depth--
		}
	}
	return false
}

// StringIs: quoted, a JSON value as written, is the string s. Only a
// string with an escape in it needs decoding.
func StringIs(quoted []byte, s string) bool {
	if len(quoted) < 2 || quoted[0] != '"' {
		return false
	}
	if bytes.IndexByte(quoted, '\\') < 0 {
		return string(quoted[1:len(quoted)-1]) == s
	}
	var d string
	return json.Unmarshal(quoted, &d) == nil && d == s
}
