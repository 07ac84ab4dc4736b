package registry

import (
	"encoding/json"
	"strings"
	"testing"
)

// ToolJSON keeps a tool's schemas as JSON, compacted: what is held is what
// the limits count, so spaces in a schema cannot take memory uncounted.
func TestToolJSONKeepsSchemasCompact(t *testing.T) {
	for _, tc := range []struct {
		name, tool, input, output string
	}{
		{"compact", `{"name":"a","inputSchema":{"type":"object"}}`, `{"type":"object"}`, ""},
		{"padded", `{"name":"a","inputSchema":{"type":"object"` + strings.Repeat(" ", 1<<20) + `},"outputSchema":` + "\n" + `{ "type" : "object" }}`,
			`{"type":"object"}`, `{"type":"object"}`},
		{"spaces in strings stay", `{"name":"a","inputSchema":{"description":"a  b","type":"object"}}`, `{"description":"a  b","type":"object"}`, ""},
		{"null schemas", `{"name":"a","inputSchema":null,"outputSchema":null}`, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tj ToolJSON
			if err := json.Unmarshal([]byte(tc.tool), &tj); err != nil {
				t.Fatal(err)
			}
			got := tj.Decoded()
			for _, c := range []struct {
				what   string
				schema any
				want   string
			}{{"input", got.InputSchema, tc.input}, {"output", got.OutputSchema, tc.output}} {
				raw, _ := c.schema.(json.RawMessage)
				if c.want == "" && c.schema != nil || c.want != "" && string(raw) != c.want {
					t.Errorf("%s schema %T %.80q, want %q", c.what, c.schema, raw, c.want)
				}
				if cap(raw) > 2*len(raw)+64 {
					t.Errorf("%s schema holds %d bytes for %d", c.what, cap(raw), len(raw))
				}
			}
			if got.Name != "a" {
				t.Errorf("name %q, want a", got.Name)
			}
		})
	}
}
