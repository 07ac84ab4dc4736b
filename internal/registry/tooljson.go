package registry

import (
	"bytes"
	"encoding/json"

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
}

// Decoded is the tool with its schemas as json.RawMessage, nil where the
// JSON had null or nothing (as decoding into an mcp.Tool leaves them), or
// nil for a null tool.
func (r *ToolJSON) Decoded() *mcp.Tool {
	if r == nil {
		return nil
	}
	t := r.Tool
	if t == nil {
		t = new(mcp.Tool)
	}
	t.InputSchema, t.OutputSchema = schemaJSON(r.InputSchema), schemaJSON(r.OutputSchema)
	return t
}

// schemaJSON is s compacted, or nil for null or nothing. Compacted, since
// what is held is what the limits count (each tool as json.Marshal writes
// it): a server could pad a schema with megabytes of spaces otherwise.
func schemaJSON(s json.RawMessage) any {
	if len(s) == 0 || string(s) == "null" {
		return nil
	}
	if bytes.IndexAny(s, " \t\r\n") < 0 {
		return s
	}
	var b bytes.Buffer
	if err := json.Compact(&b, s); err != nil {
		return s // not valid JSON: encoding it fails the fetch
	}
	return json.RawMessage(bytes.Clone(b.Bytes()))
}

// DecodedTools is Decoded of each of tools.
func DecodedTools(tools []*ToolJSON) []*mcp.Tool {
	out := make([]*mcp.Tool, len(tools))
	for i, t := range tools {
		out[i] = t.Decoded()
	}
	return out
}
