package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"slices"

	"github.com/mcpbridge/operator/internal/jsonspan"
)

// canonicalJSON is src, a JSON value as json.Marshal writes it (valid and
// compact), with the members of every object in the order of their names,
// as json.Marshal writes a map. Two listings of one tool that differ only
// in member order have one canonical form, which is what a Swap compares.
//
// It reorders the bytes and decodes nothing: decoding a schema into maps to
// let json.Marshal sort it left about 3 KiB of small garbage per tool,
// interleaved with the registry's own entries, on every replica for every
// tool of the cluster (docs/design.md, "Replicas and ownership": memory).
func canonicalJSON(src []byte) ([]byte, error) {
	out, rest, err := appendCanonical(make([]byte, 0, len(src)), src)
	if err == nil && (len(rest) != 0 || len(out) != len(src)) {
		err = errNotCompact
	}
	return out, err
}

var errNotCompact = errors.New("not compact JSON")

// appendCanonical appends the canonical form of the value at the start of
// src to dst, and returns what follows the value.
func appendCanonical(dst, src []byte) (out, rest []byte, err error) {
	if len(src) == 0 {
		return dst, src, errNotCompact
	}
	switch src[0] {
	case '{':
		return appendObject(dst, src)
	case '[':
		return appendArray(dst, src)
	}
	n := jsonspan.SkipValue(src, 0)
	return append(dst, src[:n]...), src[n:], nil
}

func appendArray(dst, src []byte) ([]byte, []byte, error) {
	dst, src = append(dst, '['), src[1:]
	if len(src) > 0 && src[0] == ']' {
		return append(dst, ']'), src[1:], nil
	}
	for {
		var err error
		if dst, src, err = appendCanonical(dst, src); err != nil {
			return dst, src, err
		}
		if len(src) == 0 || src[0] != ',' && src[0] != ']' {
			return dst, src, errNotCompact
		}
		dst, src = append(dst, src[0]), src[1:]
		if dst[len(dst)-1] == ']' {
			return dst, src, nil
		}
	}
}

// member is one member of an object: its name as written (quotes and
// escapes included) and its value's JSON.
type member struct{ name, value []byte }

func appendObject(dst, src []byte) ([]byte, []byte, error) {
	var buf [16]member // most schema objects have fewer members: no garbage
	members, src, err := readMembers(buf[:0], src)
	if err != nil {
		return dst, src, err
	}
	if len(members) == 0 {
		return append(dst, "{}"...), src, nil
	}
	slices.SortStableFunc(members, func(a, b member) int { return compareNames(a.name, b.name) })
	dst = append(dst, '{')
	for i, m := range members {
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = append(append(dst, m.name...), ':')
		var err error
		if dst, _, err = appendCanonical(dst, m.value); err != nil {
			return dst, src, err
		}
	}
	return append(dst, '}'), src, nil
}

// readMembers appends to members those of the compact JSON object at the
// start of src, in the order written, and returns what follows it.
func readMembers(members []member, src []byte) ([]member, []byte, error) {
	src = src[1:]
	if len(src) > 0 && src[0] == '}' {
		return members, src[1:], nil
	}
	for {
		n := jsonspan.SkipValue(src, 0)
		if n == 0 || n >= len(src) || src[0] != '"' || src[n] != ':' {
			return members, src, errNotCompact
		}
		name := src[:n]
		src = src[n+1:]
		v := jsonspan.SkipValue(src, 0)
		if v == 0 || v >= len(src) {
			return members, src, errNotCompact
		}
		members = append(members, member{name: name, value: src[:v]})
		end := src[v]
		src = src[v+1:]
		if end == '}' {
			return members, src, nil
		}
		if end != ',' {
			return members, src, errNotCompact
		}
	}
}

// compareNames orders two quoted member names as the strings they encode,
// the order json.Marshal gives a map's keys. Only a name with an escape in
// it needs decoding.
func compareNames(a, b []byte) int {
	if bytes.IndexByte(a, '\\') < 0 && bytes.IndexByte(b, '\\') < 0 {
		return bytes.Compare(a[1:len(a)-1], b[1:len(b)-1])
	}
	var sa, sb string
	_ = json.Unmarshal(a, &sa)
	_ = json.Unmarshal(b, &sb)
	switch {
	case sa < sb:
		return -1
	case sa > sb:
		return 1
	}
	return 0
}
