package gateway

import (
	"bytes"
	"encoding/json"
	"unicode/utf8"
)

// Reading the members of a JSON object that is already known to be valid
// JSON (json.Valid), in place: decodeMessage reads an agent's message this
// way in one pass, where decoding it into maps scanned the body three times
// and copied every member's value (BenchmarkFramingDecode*). The results are
// those of encoding/json: member names unescaped and matched exactly, the
// last of two equal names wins, and a value is the bytes as written.

// objectReader walks the members of one JSON object.
type objectReader struct {
	data []byte
	i    int
}

// readObject starts reading v, a valid JSON value; ok is false when v is
// not an object.
func readObject(v []byte) (o objectReader, ok bool) {
	i := skipSpace(v, 0)
	if i >= len(v) || v[i] != '{' {
		return objectReader{}, false
	}
	return objectReader{data: v, i: i + 1}, true
}

// next returns the next member's raw name (quoted, as written) and value,
// or ok false after the last one.
func (o *objectReader) next() (name, value []byte, ok bool) {
	d := o.data
	i := skipSpace(d, o.i)
	if i < len(d) && d[i] == ',' {
		i = skipSpace(d, i+1)
	}
	if i >= len(d) || d[i] != '"' {
		return nil, nil, false // '}'
	}
	end := skipString(d, i)
	name = d[i:end]
	i = skipSpace(d, end)
	i = skipSpace(d, i+1) // ':'
	end = skipValue(d, i)
	o.i = end
	return name, d[i:end], true
}

// memberName is a raw member name unescaped, as encoding/json gives it.
// Names without escapes or non-ASCII bytes, the usual ones, are only
// sliced, so that a switch on them allocates nothing.
func memberName(raw []byte) []byte {
	if inner := raw[1 : len(raw)-1]; plainASCII(inner) {
		return inner
	}
	var s string
	_ = json.Unmarshal(raw, &s) // valid JSON: cannot fail
	return []byte(s)
}

// stringValue decodes a member's value into a string as json.Unmarshal
// does: a JSON string, or null for "", and ok false for anything else.
func stringValue(raw []byte) (string, bool) {
	switch {
	case len(raw) == 0:
		return "", false
	case raw[0] == 'n':
		return "", true // null
	case raw[0] != '"':
		return "", false
	}
	if inner := raw[1 : len(raw)-1]; plainASCII(inner) {
		return string(inner), true
	}
	var s string
	return s, json.Unmarshal(raw, &s) == nil
}

// plainASCII: b has no escape and no byte that encoding/json could replace
// (invalid UTF-8); printable ASCII is taken as it is.
func plainASCII(b []byte) bool {
	for _, c := range b {
		if c == '\\' || c >= utf8.RuneSelf {
			return false
		}
	}
	return true
}

func skipSpace(d []byte, i int) int {
	for i < len(d) && (d[i] == ' ' || d[i] == '\t' || d[i] == '\n' || d[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string that starts at d[i].
func skipString(d []byte, i int) int {
	for i++; i < len(d); i++ {
		switch d[i] {
		case '\\':
			i++
		case '"':
			return i + 1
		}
	}
	return i
}

// skipValue returns the index after the value that starts at d[i].
func skipValue(d []byte, i int) int {
	switch d[i] {
	case '"':
		return skipString(d, i)
	case '{', '[':
		depth := 0
		for i < len(d) {
			switch d[i] {
			case '"':
				i = skipString(d, i)
				continue
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return i + 1
				}
			}
			i++
		}
		return i
	}
	// A number, true, false or null ends where its delimiter starts.
	end := bytes.IndexAny(d[i:], ",}] \t\r\n")
	if end < 0 {
		return len(d)
	}
	return i + end
}
