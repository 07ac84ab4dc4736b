package registry

import (
	"errors"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// paddedTools are n tools of about size bytes of JSON each.
func paddedTools(prefix string, n, size int) []*mcp.Tool {
	out := make([]*mcp.Tool, n)
	for i := range out {
		t := registryTestTool(prefix + string(rune('a'+i)))
		t.Description = strings.Repeat("d", size)
		out[i] = t
	}
	return out
}

// A namespace's published tools stay under its budget: a set that would
// pass it is refused with a ToolBudgetError and changes nothing, other
// namespaces have budgets of their own, a set that shrinks is always
// taken, and room made by another server lets the refused set in.
func TestSwapRefusesASetOverTheNamespaceToolBudget(t *testing.T) {
	reg := New()
	reg.MaxToolBytesPerNamespace = 100 << 10
	c := &registryTestCaller{id: "c"}
	if _, err := reg.Swap("ns", "ns/a", "a", paddedTools("t", 6, 10<<10), c); err != nil { // ~60 KiB
		t.Fatal(err)
	}
	_, err := reg.Swap("ns", "ns/b", "b", paddedTools("t", 5, 10<<10), c) // ~50 KiB more
	var be *ToolBudgetError
	if !errors.As(err, &be) || !strings.Contains(err.Error(), FlagMaxToolBytesPerNamespace) {
		t.Fatalf("over the budget: got %v, want a ToolBudgetError naming the flag", err)
	}
	if got := len(reg.Tools("ns")); got != 6 {
		t.Fatalf("a refused set changed the namespace: %d tools, want 6", got)
	}
	if reg.Fits("ns", "ns/b", be.Bytes) || !reg.Fits("ns", "ns/b", be.Bytes/2) || !reg.Fits("ns", "ns/a", be.Bytes) {
		t.Fatalf("Fits says otherwise than Swap: %d bytes for b with a's %d published", be.Bytes, be.Others)
	}
	if _, err := reg.Swap("other", "other/b", "b", paddedTools("t", 5, 10<<10), c); err != nil {
		t.Fatalf("another namespace was held to this one's budget: %v", err)
	}
	reg.MaxToolBytesPerNamespace = 40 << 10 // lowered under what a publishes
	if _, err := reg.Swap("ns", "ns/a", "a", paddedTools("t", 3, 10<<10), c); err != nil {
		t.Fatalf("a set that shrinks was refused: %v", err)
	}
	reg.MaxToolBytesPerNamespace = 100 << 10
	if !reg.Fits("ns", "ns/b", be.Bytes) {
		t.Fatal("Fits says the refused set still does not fit once a shrank")
	}
	if _, err := reg.Swap("ns", "ns/b", "b", paddedTools("t", 5, 10<<10), c); err != nil {
		t.Fatalf("the set fits once a shrank: %v", err)
	}
	reg.Remove("ns", "ns/b")
	if _, err := reg.Swap("ns", "ns/c", "c", paddedTools("t", 6, 10<<10), c); err != nil {
		t.Fatalf("a removed server's bytes were not given back: %v", err)
	}
}

// With replicas, a replica's own registry keeps one budget per namespace
// with the others: what the shared (mirrored) registry holds beyond its
// own sets counts, its own sets once mirrored count once, and another
// namespace's tools do not count.
func TestSwapCountsWhatOtherReplicasPublishTowardTheBudget(t *testing.T) {
	c := &registryTestCaller{id: "c"}
	shared := New()
	shared.MaxToolBytesPerNamespace = 1 << 30
	if _, err := shared.Swap("ns", "ns/elsewhere", "elsewhere", paddedTools("t", 5, 10<<10), c); err != nil { // ~50 KiB, another replica's
		t.Fatal(err)
	}
	if _, err := shared.Swap("other", "other/big", "big", paddedTools("t", 9, 10<<10), c); err != nil {
		t.Fatal(err)
	}
	local := New()
	local.MaxToolBytesPerNamespace = 100 << 10
	local.Shared = shared
	if _, err := local.Swap("ns", "ns/a", "a", paddedTools("t", 4, 10<<10), c); err != nil { // ~40 KiB: 90 in all
		t.Fatalf("a set that fits beside the other replica's was refused: %v", err)
	}
	if _, err := shared.Swap("ns", "ns/a", "a", paddedTools("t", 4, 10<<10), c); err != nil { // mirrored
		t.Fatal(err)
	}
	_, err := local.Swap("ns", "ns/b", "b", paddedTools("t", 2, 10<<10), c) // ~20 KiB more: 110
	var be *ToolBudgetError
	if !errors.As(err, &be) {
		t.Fatalf("over the budget with the other replica's tools: got %v, want a ToolBudgetError", err)
	}
	if be.Others < 85<<10 || be.Others > 95<<10 {
		t.Fatalf("the refusal counts %d bytes of others, want about 90 KiB (a's own set once)", be.Others)
	}
	sub := local.Subscribe()
	defer sub.Close()
	shared.Remove("ns", "ns/elsewhere")
	if got := sub.Drain(); len(got) != 1 || got[0] != "ns" {
		t.Fatalf("a local subscriber heard %v of the other replica's change, want [ns]: a refused set waits for it", got)
	}
	if _, err := local.Swap("ns", "ns/b", "b", paddedTools("t", 2, 10<<10), c); err != nil {
		t.Fatalf("the set fits once the other replica's server is gone: %v", err)
	}
}

// A swap that changes one tool keeps the other entries as they were, so
// that the gateway's views re-add only that one; x-mcp-header parameters
// are found at publish.
func TestSwapKeepsTheEntriesOfUnchangedTools(t *testing.T) {
	reg := New()
	c := &registryTestCaller{id: "c"}
	tools := registryTestTools("a", "b")
	if _, err := reg.Swap("ns", "ns/s", "s", tools, c); err != nil {
		t.Fatal(err)
	}
	before := reg.Owned("ns", "ns/s")
	changed := registryTestTools("a", "b")
	changed[1].Description = "changed"
	changed[1].InputSchema = map[string]any{"type": "object", "properties": map[string]any{
		"region": map[string]any{"type": "string", "x-mcp-header": "Region"}}}
	if ok, err := reg.Swap("ns", "ns/s", "s", changed, c); err != nil || !ok {
		t.Fatalf("swap: changed=%v, %v", ok, err)
	}
	after := reg.Owned("ns", "ns/s")
	if after[0].Upstream() != before[0].Upstream() {
		t.Error("the unchanged tool got a new entry")
	}
	if after[1].Upstream() == before[1].Upstream() || after[1].Upstream().Description != "changed" {
		t.Error("the changed tool kept its old entry")
	}
	if after[0].ParamHeaders || !after[1].ParamHeaders {
		t.Errorf("ParamHeaders = %v, %v; want false, true", after[0].ParamHeaders, after[1].ParamHeaders)
	}
}

// A budget refusal words each size in a unit that keeps its digits.
func TestToolBudgetErrorWordsSizes(t *testing.T) {
	for _, tc := range []struct {
		err  ToolBudgetError
		want string
	}{
		{ToolBudgetError{Bytes: 20_000, Others: 64<<20 - 10_000, Max: 64 << 20},
			"the server's tools take 19.5 KiB as JSON and the namespace's other servers publish 63.99 MiB: together over the namespace's budget of 64.00 MiB"},
		{ToolBudgetError{Bytes: 700, Others: 900, Max: 1500},
			"the server's tools take 700 bytes as JSON and the namespace's other servers publish 900 bytes: together over the namespace's budget of 1.5 KiB"},
		{ToolBudgetError{Bytes: 3 << 20, Others: 0, Max: 2 << 20},
			"the server's tools take 3.00 MiB as JSON and the namespace's other servers publish 0 bytes: together over the namespace's budget of 2.00 MiB"},
	} {
		if got := tc.err.Error(); got != tc.want+" ("+FlagMaxToolBytesPerNamespace+")" {
			t.Errorf("%+v: %q, want %q", tc.err, got, tc.want)
		}
	}
}
