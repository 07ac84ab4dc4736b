package gateway

import (
	"encoding/json"
	"errors"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// unlistedSchema is the input schema a view gives the SDK for a tool that
// binds no header, in place of the registry's JSON. The SDK's AddTool
// decodes a schema of any other Go type into maps to check its type and its
// x-mcp-header bindings, two or three times a tool, each decode allocating
// a 32 KiB buffer: 70–105 KB of garbage a tool, about 3 GB on each replica
// for a first session in a namespace of 40,000 tools (docs/design.md,
// "Tool sync"). Of this one, AddTool reads the type, and its search for
// bindings ends at once because the schema cannot be encoded (Type and
// Types both set): a tool that binds no header has none. Nothing may list
// it: the view lists such a tool as the registry holds it (view.listed).
var unlistedSchema = &jsonschema.Schema{Type: "object", Types: []string{"object"}}

// errInputNotObject refuses, as AddTool would, a tool added without its
// schemas whose input schema is not an object.
var errInputNotObject = errors.New(`its input schema does not have type "object", as the SDK requires`)

// withoutSchemas checks t's schemas as AddTool would and replaces them by
// unlistedSchema and nothing. A schema the registry does not hold as JSON
// is left to AddTool.
func withoutSchemas(t *mcp.Tool) error {
	in, ok := t.InputSchema.(json.RawMessage)
	if !ok {
		return nil
	}
	if !objectSchema(in) {
		return errInputNotObject
	}
	// An output schema the registry holds is valid JSON, which is all
	// AddTool checks of it.
	if _, ok := t.OutputSchema.(json.RawMessage); !ok && t.OutputSchema != nil {
		return nil
	}
	t.InputSchema, t.OutputSchema = unlistedSchema, nil
	return nil
}

// objectSchema says whether schema, valid JSON as the registry holds it, is
// an object whose member "type" is the string "object", as AddTool
// requires; read in place (jsonscan.go).
func objectSchema(schema json.RawMessage) bool {
	o, ok := readObject(schema)
	if !ok {
		return false
	}
	var typ []byte
	for name, value, ok := o.next(); ok; name, value, ok = o.next() {
		if string(memberName(name)) == "type" {
			typ = value // the last of two, as encoding/json takes it
		}
	}
	s, ok := stringValue(typ)
	return ok && s == "object"
}

// listed puts in res, a page of the SDK's tools/list, each tool as the
// view serves it: the registry's definition under its public name, the
// schemas of a tool added without them included. A tool that a refresh
// removed since the SDK read the page is left out, as a list a moment
// later would.
func (v *view) listed(res *mcp.ListToolsResult) {
	v.mu.Lock()
	defer v.mu.Unlock()
	out := res.Tools[:0]
	served := make([]mcp.Tool, 0, len(res.Tools)) // one allocation a page
	for _, t := range res.Tools {
		up := v.published[t.Name]
		if up == nil {
			continue
		}
		served = append(served, *up)
		s := &served[len(served)-1]
		s.Name = t.Name
		out = append(out, s)
	}
	res.Tools = out
}
