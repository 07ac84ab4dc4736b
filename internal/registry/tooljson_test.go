package registry

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
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
			got, err := tj.Decoded()
			if err != nil {
				t.Fatal(err)
			}
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

// A tool's _meta is held as the JSON of each member, and one with more
// members than MaxMetaMembers, or that is not an object, is refused.
func TestToolJSONKeepsMetaMembersAsJSON(t *testing.T) {
	var members []string
	for i := range MaxMetaMembers + 1 {
		members = append(members, fmt.Sprintf(`"k%d":{"a": [1, 2]}`, i))
	}
	for _, tc := range []struct {
		name, meta string
		want       map[string]string // member: JSON; nil: refused
	}{
		{"members", `{"ui":{"b": 1, "a": [true]},"n":null}`, map[string]string{"ui": `{"b":1,"a":[true]}`, "n": ""}},
		{"as many as allowed", "{" + strings.Join(members[:MaxMetaMembers], ",") + "}", map[string]string{"k0": `{"a":[1,2]}`}},
		{"one too many", "{" + strings.Join(members, ",") + "}", nil},
		{"not an object", `"x"`, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var tj ToolJSON
			if err := json.Unmarshal([]byte(`{"name":"a","inputSchema":{"type":"object"},"_meta":`+tc.meta+`}`), &tj); err != nil {
				t.Fatal(err)
			}
			got, err := tj.Decoded()
			if tc.want == nil {
				if err == nil {
					t.Fatalf("_meta %.60s accepted, want it refused", tc.meta)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for k, want := range tc.want {
				raw, isJSON := got.Meta[k].(json.RawMessage)
				if want == "" && got.Meta[k] != nil || want != "" && (!isJSON || string(raw) != want) {
					t.Errorf("_meta[%s] = %T %s, want %s", k, got.Meta[k], raw, want)
				}
			}
		})
	}
}

// The registry holds a published tool's _meta as the JSON of each member,
// not as decoded maps, whichever way the tool came in.
func TestPublishedToolsHoldMetaAsJSON(t *testing.T) {
	reg := New()
	tool := registryTestTool("a")
	tool.Meta = map[string]any{"ui": map[string]any{"b": 1.0, "a": []any{true}}}
	if _, err := reg.Swap("ns", "ns/s", "s", []*mcp.Tool{tool}, nil); err != nil {
		t.Fatal(err)
	}
	got := reg.Owned("ns", "ns/s")[0].Upstream().Meta["ui"]
	if raw, ok := got.(json.RawMessage); !ok || string(raw) != `{"a":[true],"b":1}` {
		t.Fatalf("_meta.ui held as %T %v, want its JSON", got, got)
	}
}

// A tool binds a parameter to a header when x-mcp-header is a member name,
// wherever in its schema, however it is written; not when it is a value.
func TestBindsParamHeadersInTheListedJSON(t *testing.T) {
	for _, tc := range []struct {
		schema string
		binds  bool
	}{
		{`{"type":"object","properties":{"r":{"type":"string","x-mcp-header":"Region"}}}`, true},
		{`{"type":"object","properties":{"r":{"type":"string", "x-mcp-header" : "Region"}}}`, true},
		{`{"type":"object","properties":{"r":{"type":"string","x-mcp-\u0068eader":"Region"}}}`, true},
		{`{"type":"object","properties":{"r":{"enum":["x-mcp-header"],"description":"\"x-mcp-header\": no"}}}`, false},
		{`{"type":"object"}`, false},
	} {
		tool := &mcp.Tool{Name: "t", InputSchema: json.RawMessage(tc.schema)}
		if got := BindsParamHeaders(tool); got != tc.binds {
			t.Errorf("%s: binds %v, want %v", tc.schema, got, tc.binds)
		}
		var decoded map[string]any
		if err := json.Unmarshal([]byte(tc.schema), &decoded); err != nil {
			t.Fatal(err)
		}
		if got := BindsParamHeaders(&mcp.Tool{InputSchema: decoded}); got != tc.binds {
			t.Errorf("%s: decoded, binds %v; as JSON %v", tc.schema, got, tc.binds)
		}
	}
}
