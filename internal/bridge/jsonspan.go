package bridge

import (
	"bytes"
	"encoding/json"
	"iter"
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
		if keyIs(key, name) {
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
		i := skipSpace(data, 0)
		if i >= len(data) || data[i] != '{' {
			return
		}
		for i++; ; {
			i = skipSpace(data, i)
			if i >= len(data) || data[i] == '}' {
				return
			}
			if data[i] == ',' {
				i++
				continue
			}
			kEnd := skipString(data, i)
			key := data[i:kEnd]
			i = skipSpace(data, kEnd)
			if i >= len(data) || data[i] != ':' {
				return
			}
			i = skipSpace(data, i+1)
			vEnd := skipValue(data, i)
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

// keyIs: the JSON string key (with its quotes) is name.
func keyIs(key []byte, name string) bool {
	if len(key) < 2 {
		return false
	}
	if bytes.IndexByte(key, '\\') < 0 {
		return string(key[1:len(key)-1]) == name
	}
	var s string
	return json.Unmarshal(key, &s) == nil && s == name
}

func skipSpace(data []byte, i int) int {
	for i < len(data) && (data[i] == ' ' || data[i] == '\t' || data[i] == '\n' || data[i] == '\r') {
		i++
	}
	return i
}

// skipString returns the index after the string that starts at data[i]:
// after the first quote not escaped, one after an even run of
// backslashes. It looks for quotes with bytes.IndexByte rather than at
// every byte: a result may be one string of megabytes, walked on the
// call's path (docs/design.md, "Budgets").
func skipString(data []byte, i int) int {
	for j := i + 1; ; {
		k := bytes.IndexByte(data[j:], '"')
		if k < 0 {
			return len(data)
		}
		q := j + k
		slashes := 0
		for p := q - 1; p > i && data[p] == '\\'; p-- {
			slashes++
		}
		if slashes%2 == 0 {
			return q + 1
		}
		j = q + 1
	}
}

// nestedDeeperThan: the JSON data opens more than max objects and arrays
// inside one another.
func nestedDeeperThan(data []byte, max int) bool {
	depth := 0
	for i := 0; i < len(data); i++ {
		switch data[i] {
		case '"':
			i = skipString(data, i) - 1
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

// skipValue returns the index after the value that starts at data[i].
func skipValue(data []byte, i int) int {
	if i >= len(data) {
		return i
	}
	switch data[i] {
	case '"':
		return skipString(data, i)
	case '{', '[':
		depth := 0
		for j := i; j < len(data); j++ {
			switch data[j] {
			case '"':
				j = skipString(data, j) - 1
			case '{', '[':
				depth++
			case '}', ']':
				if depth--; depth == 0 {
					return j + 1
				}
			}
		}
		return len(data)
	}
	j := i
	for j < len(data) && !bytes.ContainsRune([]byte(",}] \t\r\n"), rune(data[j])) {
		j++
	}
	return j
}
