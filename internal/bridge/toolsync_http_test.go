package bridge

import (
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
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

// answerList makes up intercept tools/list with result.
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
// decodes every tool's schema again through a 32 KiB buffer (32 MiB of
// garbage for 1,000 tools), which made listing most of the manager's
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
	// 17 times the list's bytes, against 200 times through the SDK.
	if got, limit := after.TotalAlloc-before.TotalAlloc, uint64(50*len(list)); got > limit {
		t.Errorf("listing %d tools (%d bytes of JSON) allocated %d bytes, want at most %d", n, len(list), got, limit)
	}
}

// A tool that binds a parameter to a header (x-mcp-header, 2026-07-28) is
// called with that header: the SDK's CallTool finds the binding only in
// tools its own ListTools listed, so such a server is listed through it.
func TestToolsBindingHeadersAreCalledWithTheirHeaders(t *testing.T) {
	up := httpServe(t, httpFixture(t, fixture.Options{Stateless: true}))
	results := map[string]string{
		"tools/list": `{"tools":[{"name":"regional","inputSchema":{"type":"object",` +
			`"properties":{"region":{"type":"string","x-mcp-header":"Region"}}}}]}`,
		"tools/call": `{"content":[{"type":"text","text":"ok"}]}`,
	}
	up.setIntercept(func(w http.ResponseWriter, r httpRecord) bool {
		result, ok := results[r.RPCMethod]
		if ok {
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":%s}`+"\n", r.RPCID, result)
		}
		return ok
	})
	s, _ := startSupervisor(t, httpPolicy(up.URL()))
	sn := waitFor(t, s, "Ready", isReady)
	if !hasTool(sn.Tools, "regional") || !sn.Tools[0].ParamHeaders {
		t.Fatalf("regional not published with its header binding: %+v", sn.Tools)
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
