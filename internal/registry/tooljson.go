package registry

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// ToolJSON decodes an mcp.Tool whose schemas stay the JSON they are written
// in: decoded into maps, a schema of many small members takes about fifteen
// times its JSON, and a server's list may be 16 MiB (docs/design.md, "Tool
// sync"). Its own schema fields, shallower than the embedded Tool's, take
// those members; the Tool takes every other.
type ToolJSON struct {
	*mcp.Tool
	InputSchema  json.RawMessage `json:"inputSchema"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	Meta         json.RawMessage `json:"_meta,omitempty"`
}

// MaxMetaMembers bounds the members of a tool's _meta: it is held as a map
// of their JSON values, and each member costs a map entry besides its bytes.
const MaxMetaMembers = 64

// Decoded is the tool with its schemas as json.RawMessage, nil where the
// JSON had null or nothing (as decoding into an mcp.Tool leaves them), and
// its _meta as the JSON of each member (CompactSchemas); nil for a null tool.
func (r *ToolJSON) Decoded() (*mcp.Tool, error) {
	if r == nil {
		return nil, nil
	}
	t := r.Tool
	if t == nil {
		t = new(mcp.Tool)
	}
	t.InputSchema, t.OutputSchema = compactJSON(r.InputSchema), compactJSON(r.OutputSchema)
	meta, err := metaJSON(r.Meta)
	if err != nil {
		return nil, fmt.Errorf("the tool %q: %w", t.Name, err)
	}
	t.Meta = meta
	return t, nil
}

// metaJSON is the members of the JSON object raw, each value as its JSON,
// compacted; nil for null or nothing. It reads no further than
// MaxMetaMembers members.
func metaJSON(raw json.RawMessage) (mcp.Meta, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil, errors.New("its _meta is not a JSON object")
	}
	meta := mcp.Meta{}
	for dec.More() {
		if len(meta) == MaxMetaMembers {
			return nil, fmt.Errorf("its _meta has more than %d members", MaxMetaMembers)
		}
		tok, err := dec.Token()
		key, ok := tok.(string)
		var value json.RawMessage
		if err != nil || !ok || dec.Decode(&value) != nil {
			return nil, errors.New("its _meta cannot be decoded")
		}
		meta[key] = compactJSON(value)
	}
	return meta, nil
}

// compactJSON is s (a schema, a _meta member) compacted, or nil for null or
// nothing. Compacted, since what is held is what the limits count (each
// tool as json.Marshal writes it): a server could pad a schema with
// megabytes of spaces otherwise.
func compactJSON(s json.RawMessage) any {
	if len(s) == 0 || string(s) == "null" {
		return nil
	}
	if isCompact(s) {
		return s
	}
	var b bytes.Buffer
	if err := json.Compact(&b, s); err != nil {
		return s // not valid JSON: encoding it fails the fetch
	}
	return json.RawMessage(bytes.Clone(b.Bytes()))
}

// isCompact: s has no whitespace outside its strings (a description's
// spaces do not make a schema worth compacting again).
func isCompact(s []byte) bool {
	inString := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case !inString && (c == ' ' || c == '\t' || c == '\r' || c == '\n'):
			return false
		}
	}
	return true
}

// DecodedTools is Decoded of each of tools.
func DecodedTools(tools []*ToolJSON) ([]*mcp.Tool, error) {
	out := make([]*mcp.Tool, len(tools))
	for i, t := range tools {
		var err error
		if out[i], err = t.Decoded(); err != nil {
			return nil, err
		}
	}
	return out, nil
}
