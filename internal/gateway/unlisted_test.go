package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"runtime"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/internal/registry"
)

// manySchemaTools is n tools of one server with a schema like the
// fixture's echo (input and output).
func manySchemaTools(n int) []*mcp.Tool {
	tools := make([]*mcp.Tool, n)
	for i := range tools {
		tools[i] = &mcp.Tool{
			Name: fmt.Sprintf("tool_%04d", i),
			InputSchema: json.RawMessage(fmt.Sprintf(`{"type":"object","properties":{"text":{"type":"string",`+
				`"description":"what tool %d says back"}},"required":["text"],"additionalProperties":false}`, i)),
			OutputSchema: json.RawMessage(`{"type":"object","properties":{"text":{"type":"string"}}}`),
		}
	}
	return tools
}

// A view adds a tool without having the SDK decode its schemas: a first
// session in a namespace of 40,000 tools made each replica allocate about
// 3 GB that way (unlistedSchema).
func TestAViewAddsToolsWithoutDecodingTheirSchemas(t *testing.T) {
	const n = 2000
	e := newTestEnv(t, envOptions{})
	if _, err := e.g.Registry.Swap(testNS, testNS+"/many", "many", manySchemaTools(n), e.fake); err != nil {
		t.Fatal(err)
	}
	// The registry decodes nothing here (Swap keeps its copies); what is
	// measured is the view's first sync.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	v := e.view()
	runtime.ReadMemStats(&after)
	if got := len(v.published); got != n+2 {
		t.Fatalf("the view serves %d tools, want %d", got, n+2)
	}
	// About 1.7 KB a tool this way, against about 105 KB through AddTool's
	// own decoding.
	t.Logf("adding %d tools to a view allocated %d bytes", n, after.TotalAlloc-before.TotalAlloc)
	if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(10_000*n); got > limit {
		t.Errorf("adding %d tools to a view allocated %d bytes, want at most %d", n, got, limit)
	}
}

// What a view lists is the registry's schemas, input and output, as the
// registry holds them, on every page (the SDK's pages are 1,000 tools); a
// tool whose input schema is not an object is not served, as the SDK would
// refuse it, and the others are.
func TestAViewListsTheSchemasTheRegistryHolds(t *testing.T) {
	const n = 1200
	e := newTestEnv(t, envOptions{})
	tools := append(manySchemaTools(n), &mcp.Tool{Name: "array_input", InputSchema: json.RawMessage(`{"type":"array"}`)},
		&mcp.Tool{Name: "no_type", InputSchema: json.RawMessage(`{"Type":"object"}`)})
	if _, err := e.g.Registry.Swap(testNS, testNS+"/many", "many", tools, e.fake); err != nil {
		t.Fatal(err)
	}
	want := map[string]*mcp.Tool{}
	for _, t := range e.g.Registry.Tools(testNS) {
		want[t.Name] = t.Upstream()
	}
	for _, proto := range []string{"2025-11-25", registry.SessionlessProtocol} {
		t.Run(proto, func(t *testing.T) {
			cs := e.agent(proto)
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			listed := map[string]*mcp.Tool{}
			for tool, err := range cs.Tools(ctx, nil) {
				if err != nil {
					t.Fatal(err)
				}
				listed[tool.Name] = tool
			}
			for _, name := range []string{"array_input", "no_type"} {
				if _, ok := listed[registry.PublicName("many", name)]; ok {
					t.Errorf("%s is listed; its input schema is not an object", name)
				}
			}
			if got := len(listed); got != n+2 { // and the fake's echo and region
				t.Errorf("%d tools listed, want %d", got, n+2)
			}
			for name, got := range listed {
				up := want[name]
				if up == nil {
					t.Fatalf("%s is listed, not in the registry", name)
				}
				for _, s := range []struct {
					which     string
					got, want any
				}{{"input", got.InputSchema, up.InputSchema}, {"output", got.OutputSchema, up.OutputSchema}} {
					g, _ := json.Marshal(s.got)
					w, _ := json.Marshal(s.want)
					if !jsonEqual(g, w) {
						t.Errorf("%s's %s schema is listed as %s, want %s", name, s.which, g, w)
					}
				}
			}
		})
	}
}

func TestObjectSchema(t *testing.T) {
	for _, tc := range []struct {
		schema string
		want   bool
	}{
		{`{"type":"object"}`, true},
		{`{"properties":{},"type":"object"}`, true},
		{`{"type":"array"}`, false},
		{`{"type":["object"]}`, false},
		{`{"Type":"object"}`, false},
		{`{}`, false},
		{`[]`, false},
		{`null`, false},
		{`"object"`, false},
	} {
		if got := objectSchema(json.RawMessage(tc.schema)); got != tc.want {
			t.Errorf("objectSchema(%s) = %v, want %v", tc.schema, got, tc.want)
		}
	}
}

// What a view's first sync costs for 2,000 tools of one server (the SDK's
// AddTool of each, docs/design.md "Tool sync"):
//
//	go test -run XXX -bench ViewFirstSync -benchmem ./internal/gateway/
func BenchmarkViewFirstSync(b *testing.B) {
	reg := registry.New()
	if _, err := reg.Swap(testNS, testNS+"/many", "many", manySchemaTools(2000), &fakeCaller{}); err != nil {
		b.Fatal(err)
	}
	g := &Gateway{Registry: reg}
	b.ReportAllocs()
	for b.Loop() {
		e := newEndpoint(testNS, g)
		v := newView(e, nil)
		if err := v.ensureSynced(context.Background()); err != nil {
			b.Fatal(err)
		}
	}
}

// A refresh that finds the registry's snapshot and the identity's access as
// the last one left them does nothing: every page of a tools/list
// refreshes the view, and walking 40,000 tools took a replica about 10 ms
// and a map of them a page. A change of the registry is still served.
func TestAnUnchangedViewIsNotWalkedAgain(t *testing.T) {
	const n = 2000
	e := newTestEnv(t, envOptions{})
	if _, err := e.g.Registry.Swap(testNS, testNS+"/many", "many", manySchemaTools(n), e.fake); err != nil {
		t.Fatal(err)
	}
	v := e.view()
	ctx := context.Background()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for range 10 {
		if err := v.refresh(ctx); err != nil {
			t.Fatal(err)
		}
	}
	runtime.ReadMemStats(&after)
	if got := after.TotalAlloc - before.TotalAlloc; got > 10_000 {
		t.Errorf("10 refreshes of an unchanged view of %d tools allocated %d bytes, want at most 10000", n, got)
	}
	more := append(manySchemaTools(n), &mcp.Tool{Name: "late", InputSchema: json.RawMessage(`{"type":"object"}`)})
	if _, err := e.g.Registry.Swap(testNS, testNS+"/many", "many", more, e.fake); err != nil {
		t.Fatal(err)
	}
	if err := v.refresh(ctx); err != nil {
		t.Fatal(err)
	}
	v.mu.Lock()
	_, served := v.published[registry.PublicName("many", "late")]
	v.mu.Unlock()
	if !served {
		t.Error("a tool added to the registry is not served after a refresh")
	}
}
