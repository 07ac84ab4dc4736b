package registry

import (
	"encoding/json"
	"errors"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// encodedTestSet is a tool set held as JSON, as a publisher of SwapEncoded
// holds it, with a count of its decodes.
type encodedTestSet struct {
	raw     []byte
	decodes int
}

func newEncodedTestSet(t *testing.T, tools []*mcp.Tool) *encodedTestSet {
	t.Helper()
	raw, err := json.Marshal(tools)
	if err != nil {
		t.Fatal(err)
	}
	return &encodedTestSet{raw: raw}
}

func (s *encodedTestSet) decode() ([]*mcp.Tool, error) {
	s.decodes++
	var tools []*ToolJSON
	if err := json.Unmarshal(s.raw, &tools); err != nil {
		return nil, err
	}
	return DecodedTools(tools)
}

func (s *encodedTestSet) mustSwap(t *testing.T, r *Registry, owner string) bool {
	t.Helper()
	tools, err := s.decode()
	if err != nil {
		t.Fatal(err)
	}
	s.decodes = 0
	changed, err := r.SwapEncoded("ns", owner, "s", tools, s.decode, nil)
	if err != nil {
		t.Fatalf("SwapEncoded: %v", err)
	}
	return changed
}

// A set published encoded is decoded once, on the first Upstream of any of
// its tools, into what Swap would have published; until then it is listed
// and looked up by name without a decode.
func TestSwapEncodedDecodesOnceOnTheFirstUpstream(t *testing.T) {
	r := New()
	set := newEncodedTestSet(t, registryTestTools("a", "b"))
	if !set.mustSwap(t, r, "ns/s") {
		t.Fatal("the first set reported no change")
	}
	tool, _, ok := r.Lookup("ns", PublicName("s", "b"))
	if !ok || tool.RawName != "b" || len(r.Tools("ns")) != 2 {
		t.Fatalf("Lookup = %+v, %v; Tools = %v", tool, ok, registryTestNames(r.Tools("ns")))
	}
	if set.decodes != 0 {
		t.Fatalf("%d decodes before any Upstream, want 0", set.decodes)
	}

	eager := New()
	registryTestMustSwap(t, eager, "ns", "ns/s", "s", registryTestTools("a", "b"), nil)
	if got, want := registryTestJSON(r.Tools("ns")), registryTestJSON(eager.Tools("ns")); got != want {
		t.Errorf("decoded set differs from Swap's:\ngot  %s\nwant %s", got, want)
	}
	first := r.Tools("ns")[0].Upstream()
	if first != r.Tools("ns")[0].Upstream() || set.decodes != 1 {
		t.Errorf("Upstream is not kept: %d decodes, want 1", set.decodes)
	}
}

// A swap that leaves a tool equal keeps its Upstream, decoded or not, as
// Swap does: the gateway's views compare pointers to see what changed.
func TestSwapEncodedKeepsTheUpstreamOfAnUnchangedTool(t *testing.T) {
	r := New()
	registryTestMustSwap(t, r, "ns", "ns/s", "s", registryTestTools("a", "b"), nil)
	before := r.Owned("ns", "ns/s")
	changedTools := registryTestTools("a", "b")
	changedTools[1].Description = "changed"
	if !newEncodedTestSet(t, changedTools).mustSwap(t, r, "ns/s") {
		t.Fatal("a changed set reported no change")
	}
	after := r.Owned("ns", "ns/s")
	if after[0].Upstream() != before[0].Upstream() {
		t.Error("the unchanged tool got a new Upstream")
	}
	if after[1].Upstream() == before[1].Upstream() || after[1].Upstream().Description != "changed" {
		t.Errorf("the changed tool: %+v", after[1].Upstream())
	}
}

// A set that cannot be decoded again (which publishers rule out) has no
// Upstream; its names stay published.
func TestSwapEncodedWithoutItsDecodeHasNoUpstream(t *testing.T) {
	r := New()
	tools := registryTestTools("a")
	if _, err := r.SwapEncoded("ns", "ns/s", "s", tools, func() ([]*mcp.Tool, error) { return nil, errors.New("gone") }, nil); err != nil {
		t.Fatal(err)
	}
	got := r.Tools("ns")
	if len(got) != 1 || got[0].Upstream() != nil {
		t.Errorf("Tools = %+v, want one tool without an Upstream", got)
	}
}
