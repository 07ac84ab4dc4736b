package bridge

import (
	"bytes"
	"encoding/json"
	"iter"

	"github.com/mcpbridge/operator/internal/jsonspan"
)

// Finding a member of a JSON object without copying it: a result is
// forwarded as the bytes the server sent, and the message it came in is the
// only copy the manager holds (see docs/design.md, "Budgets").

// memberValue is the value of the top-level member name of the JSON object
// data, as a slice of data (the last one, as encoding/json would take it),
// or nil. data must be valid JSON (json.Unmarshal accepted it).
func memberValue(data []byte, name string) []byte {
	var found []byte
	for key, value := range members(data) {
		if jsonspan.StringIs(key, name) {
			found = value
		}
	}
	return found
}

// members yields the top-level members of the JSON object data: each key
// as written (quoted) and its value, as slices of data. It yields nothing
// when data is not an object. data must be valid JSON.
func members(data []byte) iter.Seq2[[]byte, []byte] {
	return func(yield func(key, value []byte) bool) {
		i := jsonspan.SkipSpace(data, 0)
		if i >= len(data) || data[i] != '{' {
			return
		}
		for i++; ; {
			i = jsonspan.SkipSpace(data, i)
			if i >= len(data) || data[i] == '}' {
				return
			}
			if data[i] == ',' {
				i++
				continue
			}
			kEnd := jsonspan.SkipString(data, i)
			key := data[i:kEnd]
			i = jsonspan.SkipSpace(data, kEnd)
			if i >= len(data) || data[i] != ':' {
				return
			}
			i = jsonspan.SkipSpace(data, i+1)
			vEnd := jsonspan.SkipValue(data, i)
			if !yield(key, data[i:vEnd]) {
				return
			}
			i = vEnd
		}
	}
}

// fieldIs: the JSON string key (with its quotes) selects a struct field
// tagged name for encoding/json, which takes an exact match or one that
// differs in case only.
func fieldIs(key []byte, name string) bool {
	if len(key) < 2 {
		return false
	}
	if bytes.IndexByte(key, '\\') < 0 {
		return bytes.EqualFold(key[1:len(key)-1], []byte(name))
	}
	var s string
	return json.Unmarshal(key, &s) == nil && bytes.EqualFold([]byte(s), []byte(name))
}
