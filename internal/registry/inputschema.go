package registry

import (
	"encoding/json"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/internal/jsonspan"
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
	if len(schema) == 0 || schema[0] != '{' {
		return false
	}
	var buf [16]member
	members, rest, err := readMembers(buf[:0], schema)
	if err != nil || len(rest) != 0 {
		return false
	}
	found := false
	for _, m := range members {
		if jsonspan.StringIs(m.name, "type") {
			found = jsonspan.StringIs(m.value, "object")
		}
	}
	return found
}
