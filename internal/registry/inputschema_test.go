package registry

import (
	"encoding/json"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

func TestObjectInput(t *testing.T) {
	for _, tc := range []struct {
		schema any
		want   bool
	}{
		{json.RawMessage(`{"type":"object"}`), true},
		{json.RawMessage(`{"properties":{"type":{"type":"string"}},"type":"object"}`), true},
		{json.RawMessage(`{"type":"array","x":{"type":"object"}}`), false},
		{json.RawMessage(`{"type":"object","type":"array"}`), false}, // the last one counts
		{json.RawMessage(`{"type":"array","type":"object"}`), true},
		{json.RawMessage(`{"\u0074ype":"obj\u0065ct"}`), true},
		{json.RawMessage(`{"type":["object"]}`), false},
		{json.RawMessage(`{"Type":"object"}`), false},
		{json.RawMessage(`{"type":"object"`), false},
		{json.RawMessage(`{}`), false},
		{json.RawMessage(`[]`), false},
		{json.RawMessage(`null`), false},
		{json.RawMessage(`"object"`), false},
		{nil, false},
		{map[string]any{"type": "object"}, false}, // the registry holds schemas as JSON
	} {
		if got := ObjectInput(&mcp.Tool{InputSchema: tc.schema}); got != tc.want {
			t.Errorf("ObjectInput(%s) = %v, want %v", tc.schema, got, tc.want)
		}
	}
}

// A swap that leaves a tool equal keeps its entry, which readers compare
// with SameEntry; a tool that changed is another entry.
func TestSameEntry(t *testing.T) {
	r := New()
	tool := func(desc string) []*mcp.Tool {
		return []*mcp.Tool{
			{Name: "a", InputSchema: json.RawMessage(`{"type":"object"}`)},
			{Name: "b", Description: desc, InputSchema: json.RawMessage(`{"type":"object"}`)},
		}
	}
	if _, err := r.Swap("ns", "ns/s", "s", tool("one"), nil); err != nil {
		t.Fatal(err)
	}
	before := r.Tools("ns")
	if !before[0].ObjectInput || !before[1].ObjectInput {
		t.Errorf("ObjectInput not set at publish: %+v", before)
	}
	if _, err := r.Swap("ns", "ns/s", "s", tool("two"), nil); err != nil {
		t.Fatal(err)
	}
	after := r.Tools("ns")
	if !before[0].SameEntry(after[0]) {
		t.Error("an unchanged tool is not the same entry after a swap")
	}
	if before[1].SameEntry(after[1]) {
		t.Error("a changed tool is the same entry after a swap")
	}
}
