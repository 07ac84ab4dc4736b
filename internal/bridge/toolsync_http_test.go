package bridge

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"testing"

	"github.com/mcpbridge/operator/test/fixture"
)

// manyTools is a tools/list result of n tools, each with a small object
// schema, as a server with a large catalogue lists it.
func manyTools(n int) string {
	var b strings.Builder
	b.WriteString(`{"tools":[`)
	for i := range n {
		if i > 0 {
			b.WriteByte(',')
		}
		fmt.Fprintf(&b, `{"name":"tool_%d","description":"tool number %d","inputSchema":{"type":"object",`+
			`"properties":{"text":{"type":"string","description":"what to send"},"count":{"type":"integer"}},`+
			`"required":["text"]}}`, i, i)
	}
	b.WriteString(`]}`)
	return b.String()
}

// answerList makes up answer every tools/list with result.
func answerList(up *httpUpstream, result string) {
	up.setIntercept(func(w http.ResponseWriter, r httpRecord) bool {
		if r.RPCMethod != "tools/list" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", r.RPCID, result)
		return true
	})
}

// Listing a server's tools over Streamable HTTP costs memory in proportion
// to what it lists, not a fixed buffer per tool: the SDK's ListTools
// decodes every tool's schema again through a 32 KiB buffer (40 MB of
// garbage for these 1,000 tools), which made listing most of the manager's
// garbage while a fleet connected, and let a server that changes its list
// every millisecond cost the gateway a tenth of its CPU.
func TestListingOverHTTPAllocatesInProportionToTheTools(t *testing.T) {
	const n = 1000
	list := manyTools(n)
	up := httpServe(t, httpFixture(t, fixture.Options{}))
	answerList(up, list)
	s, _ := startSupervisor(t, httpPolicy(up.URL()))
	waitFor(t, s, "Ready", isReady)
	s.mu.Lock()
	g := s.live
	s.mu.Unlock()

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	tools, _, err := s.fetchTools(httpCtx(t), g)
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if len(tools) != n {
		t.Fatalf("fetched %d tools, want %d", len(tools), n)
	}
	// The process's allocations, the test server's answer included: about
	// 18 times the list's bytes, against 200 times through the SDK.
	if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(50*len(list)); got > limit {
		t.Errorf("listing %d tools (%d bytes of JSON) allocated %d bytes, want at most %d", n, len(list), got, limit)
	}
}

// A tool that binds a parameter to a header (x-mcp-header, 2026-07-28) is
// called with that header: the SDK's CallTool finds the binding only in
// tools its own ListTools listed, so such a server is listed through it,
// whichever page the tool is on.
func TestToolsBindingHeadersAreCalledWithTheirHeaders(t *testing.T) {
	up := httpServe(t, httpFixture(t, fixture.Options{Stateless: true}))
	results := map[string]string{
		"tools/list": `{"tools":[{"name":"plain","inputSchema":{"type":"object"}}],"nextCursor":"p2"}`,
		"tools/list p2": `{"tools":[{"name":"regional","inputSchema":{"type":"object",` +
			`"properties":{"region":{"type":"string","x-mcp-header":"Region"}}}}]}`,
		"tools/call": `{"content":[{"type":"text","text":"ok"}]}`,
	}
	up.setIntercept(func(w http.ResponseWriter, r httpRecord) bool {
		result, ok := results[strings.TrimSpace(r.RPCMethod+" "+r.Cursor)]
		if ok {
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", r.RPCID, result)
		}
		return ok
	})
	s, _ := startSupervisor(t, httpPolicy(up.URL()))
	sn := waitFor(t, s, "Ready", isReady)
	if len(sn.Tools) != 2 || !hasTool(sn.Tools, "plain") || sn.Tools[1].RawName != "regional" || !sn.Tools[1].ParamHeaders {
		t.Fatalf("want plain, and regional with its header binding: %+v", sn.Tools)
	}
	if _, err := s.CallTool(httpCtx(t), "regional", json.RawMessage(`{"region":"eu-west"}`)); err != nil {
		t.Fatal(err)
	}
	call, ok := up.lastCall("tools/call")
	if !ok {
		t.Fatal("the call did not reach the server")
	}
	if got := call.Header.Get("Mcp-Param-Region"); got != "eu-west" {
		t.Errorf("Mcp-Param-Region = %q, want %q (headers %v)", got, "eu-west", call.Header)
	}
}

// Every page of a long list is asked for with the cursor of the page
// before it, and every tool of every page is published.
func TestListingOverHTTPFollowsEveryPage(t *testing.T) {
	httpForEachProtocol(t, func(t *testing.T, stateless bool) {
		up := httpServe(t, httpFixture(t, fixture.Options{Stateless: stateless, Tools: 25, PageSize: 10}))
		s, _ := startSupervisor(t, httpPolicy(up.URL()))
		sn := waitFor(t, s, "Ready", isReady)
		for i := range 25 {
			if name := fmt.Sprintf("tool_%04d", i); !hasTool(sn.Tools, name) {
				t.Errorf("%s not published: %v", name, httpRawNames(sn.Tools))
			}
		}
		var cursors []string
		for _, r := range up.requests() {
			if r.RPCMethod == "tools/list" && strings.HasPrefix(string(r.RPCID), `"mcpbridge-`) {
				cursors = append(cursors, r.Cursor)
			}
		}
		// The fixture's built-in tools and 25 more, 10 to a page.
		if len(cursors) < 3 || cursors[0] != "" || slices.Contains(cursors[1:], "") {
			t.Errorf("tools/list requests with cursors %q, want one without a cursor, then one per later page", cursors)
		}
	})
}

// A message the server sends on a request's own stream before the answer
// is not lost: a list_changed there re-lists the tools, as one on the
// session's stream does.
func TestListChangedOnACallsStreamResyncs(t *testing.T) {
	up := httpServe(t, httpFixture(t, fixture.Options{}))
	s, _ := startSupervisor(t, httpPolicy(up.URL()))
	waitFor(t, s, "Ready", isReady)
	up.setIntercept(func(w http.ResponseWriter, r httpRecord) bool {
		switch r.RPCMethod {
		case "tools/call":
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = fmt.Fprintf(w, "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/tools/list_changed\"}\n\n"+
				"event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[]}}\n\n", r.RPCID)
		case "tools/list":
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"late","inputSchema":{"type":"object"}}]}}`+"\n", r.RPCID)
		default:
			return false
		}
		return true
	})
	if _, _, err := s.CallToolJSON(httpCtx(t), fixture.ToolEcho, json.RawMessage(`{"text":"hi"}`)); err != nil {
		t.Fatal(err)
	}
	waitFor(t, s, "the tools listed again", func(sn Snapshot) bool { return hasTool(sn.Tools, "late") })
}

func TestDecodeToolsPage(t *testing.T) {
	nested := func(depth int) string {
		return `{"tools":[{"name":"deep","inputSchema":{"type":"object","default":` +
			strings.Repeat("[", depth-4) + strings.Repeat("]", depth-4) + `}}]}`
	}
	for _, tc := range []struct {
		name, page string
		tools      []string
		errHas     string
	}{
		{name: "a page", page: `{"tools":[{"name":"a","inputSchema":{"type":"object"}}],"nextCursor":"c"}`, tools: []string{"a"}},
		{name: "brackets in strings do not nest", page: `{"tools":[{"name":"` + strings.Repeat("[{", 2000) + `"}]}`,
			tools: []string{strings.Repeat("[{", 2000)}},
		{name: "as deep as the SDK decodes", page: nested(1000), tools: []string{"deep"}},
		{name: "deeper than the SDK decodes", page: nested(1001), errHas: "nested deeper than 1000 levels"},
		{name: "member names match exactly", page: `{"Tools":[{"name":"a"}]}`},
		{name: "data after the result", page: `{"tools":[]} {}`, errHas: "cannot be decoded"},
		{name: "not a list", page: `{"tools":"a"}`, errHas: "cannot be decoded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := decodeToolsPage([]byte(tc.page))
			if tc.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tc.errHas) {
					t.Fatalf("err = %v, want one with %q", err, tc.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, tool := range res.Tools {
				names = append(names, tool.Name)
			}
			if !slices.Equal(names, tc.tools) {
				t.Errorf("tools %q, want %q", names, tc.tools)
			}
		})
	}
}

// A listed page keeps each tool's schemas as the JSON they came in: decoded
// into maps, schemas of many small members take about fifteen times their
// JSON, and a fetch may be 16 MiB, which would be most of the manager's
// memory for one server's list.
func TestToolsPagesKeepTheirSchemasAsJSON(t *testing.T) {
	var sb strings.Builder
	sb.WriteString(`{"tools":[`)
	for i := 0; sb.Len() < 4<<20; i++ {
		if i > 0 {
			sb.WriteByte(',')
		}
		fmt.Fprintf(&sb, `{"name":"t%d","inputSchema":{"type":"object","properties":{`, i)
		for j := range 200 {
			fmt.Fprintf(&sb, `%s"p%d":{"type":"string"}`, map[bool]string{true: ",", false: ""}[j > 0], j)
		}
		sb.WriteString(`}},"outputSchema":null}`)
	}
	sb.WriteString(`]}`)
	raw := []byte(sb.String())
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	res, err := decodeToolsPage(raw)
	runtime.GC()
	runtime.ReadMemStats(&after)
	if err != nil {
		t.Fatal(err)
	}
	if live, limit := int64(after.HeapAlloc)-int64(before.HeapAlloc), int64(3*len(raw)); live > limit {
		t.Errorf("%d bytes of tools held %d bytes once decoded, want at most %d", len(raw), live, limit)
	}
	for _, tool := range res.Tools {
		if _, ok := tool.InputSchema.(json.RawMessage); !ok || !objectSchema(tool.InputSchema) || tool.OutputSchema != nil {
			t.Fatalf("tool %s: input schema %T (an object schema: %v), output schema %v; want the JSON, and no output schema for null",
				tool.Name, tool.InputSchema, objectSchema(tool.InputSchema), tool.OutputSchema)
		}
	}
	runtime.KeepAlive(res)
}
