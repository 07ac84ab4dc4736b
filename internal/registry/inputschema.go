package registry

import (
	"bytes"
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ObjectInput says whether t's input schema, compact JSON as the registry
// holds it, is an object whose member "type" is the string "object" (the
// last such member, as encoding/json takes it). MCP requires it of every
// tool, and the gateway serves no other: the go-sdk's server refuses to
// add one. Read in place, once per tool at publish.
func ObjectInput(t *mcp.Tool) bool {
	raw, ok := t.InputSchema.(json.RawMessage)
	return ok && objectType(raw)
}

func objectType(schema []byte) bool {
	if len(schema) < 2 || schema[0] != '{' || schema[1] == '}' {
		return false
	}
	src, found := schema[1:], false
	for {
		n := valueEnd(src)
		if n == 0 || n >= len(src) || src[0] != '"' || src[n] != ':' {
			return false
		}
		name := src[:n]
		src = src[n+1:]
		v := valueEnd(src)
		if v == 0 || v >= len(src) {
			return false
		}
		if stringIs(name, "type") {
			found = stringIs(src[:v], "object")
		}
		end := src[v]
		src = src[v+1:]
		switch end {
		case '}':
			return found
		case ',':
		default:
			return false
		}
	}
}

// stringIs: quoted, a JSON value, is the string s. Only a string with an
// escape in it needs decoding.
func stringIs(quoted []byte, s string) bool {
	if len(quoted) < 2 || quoted[0] != '"' {
		return false
	}
	if bytes.IndexByte(quoted, '\\') < 0 {
		return string(quoted[1:len(quoted)-1]) == s
	}
	var d string
	return json.Unmarshal(quoted, &d) == nil && d == s
}
