package gateway

import (
	"encoding/json"
	"unicode/utf8"

	"github.com/mcpbridge/operator/internal/jsonspan"
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
	i := jsonspan.SkipSpace(v, 0)
	if i >= len(v) || v[i] != '{' {
		return objectReader{}, false
	}
	return objectReader{data: v, i: i + 1}, true
}

// next returns the next member's raw name (quoted, as written) and value,
// or ok false after the last one.
func (o *objectReader) next() (name, value []byte, ok bool) {
	d := o.data
	i := jsonspan.SkipSpace(d, o.i)
	if i < len(d) && d[i] == ',' {
		i = jsonspan.SkipSpace(d, i+1)
	}
	if i >= len(d) || d[i] != '"' {
		return nil, nil, false // '}'
	}
	end := jsonspan.SkipString(d, i)
	name = d[i:end]
	i = jsonspan.SkipSpace(d, end)
	i = jsonspan.SkipSpace(d, i+1) // ':'
	end = jsonspan.SkipValue(d, i)
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
