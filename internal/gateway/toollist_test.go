package gateway

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/internal/kubeauth"
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

// A view holds nothing per tool: each identity's view of a namespace of
// 2,000 tools costs what a view costs, not an entry per tool (about 330
// bytes a tool and view when the SDK held them, so that 20 identities in a
// namespace of 100,000 tools took 660 MB of every replica), and its first
// sync allocates nothing per tool either.
func TestAViewHoldsNoEntryPerTool(t *testing.T) {
	const n, identities = 2000, 20
	reg := registry.New()
	if _, err := reg.Swap(testNS, testNS+"/many", "many", manySchemaTools(n), &fakeCaller{}); err != nil {
		t.Fatal(err)
	}
	e := newEndpoint(testNS, &Gateway{Registry: reg})
	live := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	views := make([]*view, 0, identities)
	before := live()
	var allocBefore, allocAfter runtime.MemStats
	runtime.ReadMemStats(&allocBefore)
	for i := range identities {
		v := newView(e, &kubeauth.User{Name: fmt.Sprintf("agent-%d", i), Identity: fmt.Sprintf("agent-%d", i)})
		if err := v.ensureSynced(context.Background()); err != nil {
			t.Fatal(err)
		}
		views = append(views, v)
	}
	runtime.ReadMemStats(&allocAfter)
	// Signed: what earlier tests left running may free memory meanwhile.
	held := int64(live()) - int64(before)
	runtime.KeepAlive(views)
	perTool := func(b int64) int64 { return b / identities / n }
	t.Logf("%d views of %d tools: %d bytes held, %d allocated", identities, n, held, allocAfter.TotalAlloc-allocBefore.TotalAlloc)
	if got := perTool(held); got > 50 {
		t.Errorf("a view holds %d bytes per tool of its namespace, want at most 50", got)
	}
	if got := perTool(int64(allocAfter.TotalAlloc - allocBefore.TotalAlloc)); got > 50 {
		t.Errorf("a view's first sync allocates %d bytes per tool of its namespace, want at most 50", got)
	}
	var res mcp.ListToolsResult
	if err := views[identities-1].page(&res, ""); err != nil || len(res.Tools) != listPageSize {
		t.Errorf("a view lists %d tools (%v), want a page of %d", len(res.Tools), err, listPageSize)
	}
}

// What a view lists is the registry's schemas, input and output, as the
// registry holds them, on every page (1,000 tools a page, as the SDK's);
// a tool whose input schema is not an object is not served, nor one that
// binds a header in a way the SDK refuses, and the others are.
func TestAViewListsTheSchemasTheRegistryHolds(t *testing.T) {
	const n = 1200
	e := newTestEnv(t, envOptions{})
	tools := append(manySchemaTools(n), &mcp.Tool{Name: "array_input", InputSchema: json.RawMessage(`{"type":"array"}`)},
		&mcp.Tool{Name: "no_type", InputSchema: json.RawMessage(`{"Type":"object"}`)},
		// The SDK refuses a header bound to an array; it takes such tools.
		&mcp.Tool{Name: "bad_header", InputSchema: json.RawMessage(
			`{"type":"object","properties":{"r":{"type":"array","x-mcp-header":"R"}}}`)})
	if _, err := e.g.Registry.Swap(testNS, testNS+"/many", "many", tools, e.fake); err != nil {
		t.Fatal(err)
	}
	want := map[string]*mcp.Tool{}
	for _, t := range e.g.Registry.Tools(testNS) {
		want[t.Name] = t.Upstream()
	}
	// The go-sdk's client leaves out a tool with a header binding it
	// refuses; the view must not list one either.
	var res mcp.ListToolsResult
	for first := true; first || res.NextCursor != ""; first = false {
		if err := e.view().page(&res, res.NextCursor); err != nil {
			t.Fatal(err)
		}
		for _, tool := range res.Tools {
			if tool.Name == registry.PublicName("many", "bad_header") {
				t.Error("the view lists a tool whose header binding the SDK refused")
			}
		}
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
			for _, name := range []string{"array_input", "no_type", "bad_header"} {
				if _, ok := listed[registry.PublicName("many", name)]; ok {
					t.Errorf("%s is listed; the SDK would not serve it", name)
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

// A page follows the name the previous one ended with, even if that tool
// went in between; a cursor the view did not give is refused as the SDK
// refuses one.
func TestAViewPagesByName(t *testing.T) {
	const n = 2500
	e := newTestEnv(t, envOptions{})
	tools := manySchemaTools(n)
	if _, err := e.g.Registry.Swap(testNS, testNS+"/many", "many", tools, e.fake); err != nil {
		t.Fatal(err)
	}
	v := e.view()
	var first mcp.ListToolsResult
	if err := v.page(&first, ""); err != nil {
		t.Fatal(err)
	}
	if len(first.Tools) != listPageSize || first.NextCursor == "" {
		t.Fatalf("first page: %d tools, next cursor %q", len(first.Tools), first.NextCursor)
	}
	last := first.Tools[len(first.Tools)-1].Name
	// The page's last tool goes before the next page is asked for.
	rest := make([]*mcp.Tool, 0, n)
	for _, tool := range tools {
		if registry.PublicName("many", tool.Name) != last {
			rest = append(rest, tool)
		}
	}
	if _, err := e.g.Registry.Swap(testNS, testNS+"/many", "many", rest, e.fake); err != nil {
		t.Fatal(err)
	}
	if err := v.refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	var second mcp.ListToolsResult
	if err := v.page(&second, first.NextCursor); err != nil {
		t.Fatal(err)
	}
	if len(second.Tools) == 0 || second.Tools[0].Name <= last {
		t.Fatalf("the second page starts at %v, want the first name after %s", second.Tools, last)
	}
	var k int
	if _, err := fmt.Sscanf(strings.TrimPrefix(last, registry.PublicName("many", "tool_")), "%d", &k); err != nil {
		t.Fatalf("the first page ends at %s, not a tool of many: %v", last, err)
	}
	if want := registry.PublicName("many", fmt.Sprintf("tool_%04d", k+1)); second.Tools[0].Name != want {
		t.Errorf("the second page starts at %s, want %s", second.Tools[0].Name, want)
	}
	for _, cursor := range []string{"%%%", "not base64!", base64.URLEncoding.EncodeToString([]byte("not gob"))} {
		var res mcp.ListToolsResult
		var jerr *jsonrpc.Error
		if err := v.page(&res, cursor); !errors.As(err, &jerr) || jerr.Code != jsonrpc.CodeInvalidParams {
			t.Errorf("cursor %q: %v, want the SDK's invalid params", cursor, err)
		}
	}
	var res mcp.ListToolsResult
	if err := v.page(&res, encodeCursor("~")); err != nil || len(res.Tools) != 0 || res.NextCursor != "" {
		t.Errorf("a cursor past the last name: %d tools, next %q, %v; want none", len(res.Tools), res.NextCursor, err)
	}
}

// A tool the view's identity can see that is added, changed or removed is
// announced to the view's sessions as notifications/tools/list_changed,
// though the SDK holds none of them.
func TestAChangeAViewCanSeeIsAnnounced(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	var changes atomic.Int32
	client := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "v0"}, &mcp.ClientOptions{
		ToolListChangedHandler: func(context.Context, *mcp.ToolListChangedRequest) { changes.Add(1) },
	})
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: e.url, HTTPClient: e.hc, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: "2025-11-25"})
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	if _, err := cs.ListTools(ctx, nil); err != nil { // the view is synced; its GET stream is open
		t.Fatal(err)
	}
	for i, tools := range [][]*mcp.Tool{manySchemaTools(3), manySchemaTools(2), nil} {
		seen := changes.Load()
		if _, err := e.g.Registry.Swap(testNS, testNS+"/many", "many", tools, e.fake); err != nil {
			t.Fatal(err)
		}
		for changes.Load() == seen {
			select {
			case <-ctx.Done():
				t.Fatalf("change %d was not announced", i)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}
}

// What an identity sees changes only with a tool it may use, of an input
// schema the gateway serves, that is added, removed or published anew.
func TestSameVisible(t *testing.T) {
	reg := registry.New()
	swap := func(server string, tools ...*mcp.Tool) []registry.Tool {
		if _, err := reg.Swap(testNS, testNS+"/"+server, server, tools, &fakeCaller{}); err != nil {
			t.Fatal(err)
		}
		return reg.Tools(testNS)
	}
	obj := json.RawMessage(`{"type":"object"}`)
	base := swap("a", &mcp.Tool{Name: "x", InputSchema: obj})
	base = swap("b", &mcp.Tool{Name: "y", InputSchema: obj})
	onlyA := map[string]bool{"a": true}
	bChanged := swap("b", &mcp.Tool{Name: "y", Description: "new", InputSchema: obj})
	unserved := swap("a", &mcp.Tool{Name: "x", InputSchema: obj}, &mcp.Tool{Name: "z", InputSchema: json.RawMessage(`{"type":"array"}`)})
	aChanged := swap("a", &mcp.Tool{Name: "x", Description: "new", InputSchema: obj})
	for _, tc := range []struct {
		name     string
		a        []registry.Tool
		aAllowed map[string]bool
		b        []registry.Tool
		bAllowed map[string]bool
		want     bool
	}{
		{"the same snapshot", base, nil, base, nil, true},
		{"from nothing", nil, nil, base, nil, false},
		{"a server it may use changed", base, nil, bChanged, nil, false},
		{"a server it may not use changed", base, onlyA, bChanged, onlyA, true},
		{"a tool it is not served came", bChanged, onlyA, unserved, onlyA, true},
		{"a server it may use changed, per server", unserved, onlyA, aChanged, onlyA, false},
		{"a server it may no longer use", base, nil, base, onlyA, false},
		{"no server it may use", base, map[string]bool{}, bChanged, map[string]bool{}, true},
	} {
		if got := sameVisible(tc.a, tc.aAllowed, tc.b, tc.bAllowed); got != tc.want {
			t.Errorf("%s: sameVisible = %v, want %v", tc.name, got, tc.want)
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
	var res mcp.ListToolsResult
	if err := v.page(&res, ""); err != nil {
		t.Fatal(err)
	}
	served := false
	for _, tool := range res.Tools {
		served = served || tool.Name == registry.PublicName("many", "late")
	}
	if !served {
		t.Error("a tool added to the registry is not listed after a refresh")
	}
}

// A cursor is the SDK's: a replica of the version before, whose SDK server
// paged the tools, reads the view's and the view reads its, so that an
// agent paging during an upgrade goes on where it was.
func TestCursorsAreTheSDKs(t *testing.T) {
	server := mcp.NewServer(&mcp.Implementation{Name: "sdk", Version: "v0"}, nil)
	for i := range listPageSize + 5 {
		server.AddTool(&mcp.Tool{Name: fmt.Sprintf("tool_%04d", i), InputSchema: &jsonschema.Schema{Type: "object"}},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) { return nil, nil })
	}
	st, ct := mcp.NewInMemoryTransports()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	ss, err := server.Connect(ctx, st, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ss.Close()
	cs, err := mcp.NewClient(&mcp.Implementation{Name: "agent", Version: "v0"}, nil).Connect(ctx, ct, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer cs.Close()
	first, err := cs.ListTools(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if name, ok := decodeCursor(first.NextCursor); !ok || name != "tool_0999" {
		t.Errorf("the SDK's cursor reads as %q, %v; want tool_0999", name, ok)
	}
	second, err := cs.ListTools(ctx, &mcp.ListToolsParams{Cursor: encodeCursor("tool_1002")})
	if err != nil {
		t.Fatalf("the SDK refuses the view's cursor: %v", err)
	}
	if len(second.Tools) != 2 || second.Tools[0].Name != "tool_1003" {
		t.Errorf("the SDK pages from the view's cursor to %d tools, first %v; want tool_1003 and tool_1004", len(second.Tools), second.Tools)
	}
}

// A tool that binds a header is served by the SDK's entry; when a change
// makes the SDK refuse it, its previous entry goes too: it is neither
// listed nor called, and a call gets the answer to an unknown tool.
func TestAHeaderToolTheSDKRefusesGoes(t *testing.T) {
	e := newTestEnv(t, envOptions{})
	cs := e.agent("2025-11-25") // its headers are not checked: the SDK's entry alone decides
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	public := registry.PublicName(testServer, regionTool)
	call := func() error {
		_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: public, Arguments: map[string]any{"region": "eu"}})
		return err
	}
	if err := call(); err != nil {
		t.Fatalf("the header tool is not served: %v", err)
	}
	refused := []*mcp.Tool{
		{Name: echoTool, InputSchema: json.RawMessage(`{"type":"object"}`)},
		{Name: regionTool, InputSchema: json.RawMessage(`{"type":"object","properties":{"region":{"type":"array","x-mcp-header":"Region"}}}`)},
	}
	if _, err := e.g.Registry.Swap(testNS, testNS+"/"+testServer, testServer, refused, e.fake); err != nil {
		t.Fatal(err)
	}
	if err := e.view().refresh(ctx); err != nil {
		t.Fatal(err)
	}
	if err := call(); err == nil || !strings.Contains(err.Error(), "unknown tool") {
		t.Errorf("a call of the refused tool got %v, want the answer to an unknown tool", err)
	}
	for tool, err := range cs.Tools(ctx, nil) {
		if err != nil {
			t.Fatal(err)
		}
		if tool.Name == public {
			t.Error("the refused tool is listed")
		}
	}
}
