package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// registryTestCaller is a Caller that only identifies itself.
type registryTestCaller struct{ id string }

func (c *registryTestCaller) CallTool(context.Context, string, any) (*mcp.CallToolResult, error) {
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: c.id}}}, nil
}

// registryTestTool returns a fresh tool as an SDK client would decode it.
func registryTestTool(name string) *mcp.Tool {
	return &mcp.Tool{
		Name:        name,
		Description: "does " + name,
		InputSchema: map[string]any{
			"type":       "object",
			"properties": map[string]any{"q": map[string]any{"type": "string", "maxLength": float64(10)}},
		},
	}
}

func registryTestTools(names ...string) []*mcp.Tool {
	out := make([]*mcp.Tool, len(names))
	for i, n := range names {
		out[i] = registryTestTool(n)
	}
	return out
}

// registryTestJSON is ts as JSON, each tool with its Upstream.
func registryTestJSON(ts []Tool) string {
	type entry struct {
		Tool
		Upstream *mcp.Tool
	}
	out := make([]entry, len(ts))
	for i, t := range ts {
		out[i] = entry{Tool: t, Upstream: t.Upstream()}
	}
	b, _ := json.Marshal(out)
	return string(b)
}

// registryTestNames returns the public names of ts, in order.
func registryTestNames(ts []Tool) []string {
	out := make([]string, len(ts))
	for i, t := range ts {
		out[i] = t.Name
	}
	return out
}

func registryTestMustSwap(t *testing.T, r *Registry, ns, owner, serverName string, tools []*mcp.Tool, c Caller) bool {
	t.Helper()
	changed, err := r.Swap(ns, owner, serverName, tools, c)
	if err != nil {
		t.Fatalf("Swap(%s, %s, %s): %v", ns, owner, serverName, err)
	}
	return changed
}

// registryTestPending reports whether a signal is pending on s.C.
func registryTestPending(s *Subscription) bool {
	select {
	case <-s.C:
		return true
	default:
		return false
	}
}

func TestRegistrySwapReplacesTheWholeSet(t *testing.T) {
	r := New()
	c1, c2 := &registryTestCaller{"1"}, &registryTestCaller{"2"}
	if !registryTestMustSwap(t, r, "agents", "agents/gh", "gh", registryTestTools("a", "b", "c"), c1) {
		t.Fatal("first Swap reported no change")
	}
	if !registryTestMustSwap(t, r, "agents", "agents/gh", "gh", registryTestTools("c", "d"), c2) {
		t.Fatal("second Swap reported no change")
	}
	want := []string{"mcp__gh__c", "mcp__gh__d"}
	if got := registryTestNames(r.Tools("agents")); !slices.Equal(got, want) {
		t.Errorf("Tools = %v, want %v", got, want)
	}
	if got := registryTestNames(r.Owned("agents", "agents/gh")); !slices.Equal(got, want) {
		t.Errorf("Owned = %v, want %v", got, want)
	}
	for _, gone := range []string{"mcp__gh__a", "mcp__gh__b"} {
		if _, _, ok := r.Lookup("agents", gone); ok {
			t.Errorf("Lookup(%s) found a tool that was swapped out", gone)
		}
	}
	tool, c, ok := r.Lookup("agents", "mcp__gh__d")
	if !ok || c != c2 || tool.RawName != "d" || tool.ServerName != "gh" || tool.Owner != "agents/gh" || tool.Upstream().Name != "d" {
		t.Errorf("Lookup(mcp__gh__d) = %+v, %v, %v", tool, c, ok)
	}
	if tool, c, _ := r.Lookup("agents", "mcp__gh__c"); c != c2 || tool.Upstream().Description != "does c" {
		t.Errorf("Lookup(mcp__gh__c) = %+v, %v: want the new caller", tool, c)
	}
}

// TestRegistrySwapIsAtomic alternates an owner between two sets while readers
// check that they only ever see one whole set, never a mix or an empty set.
func TestRegistrySwapIsAtomic(t *testing.T) {
	r := New()
	setA := []string{"mcp__s__a1", "mcp__s__a2", "mcp__s__a3"}
	setB := []string{"mcp__s__a3", "mcp__s__b1", "mcp__s__b2", "mcp__s__b3"}
	registryTestMustSwap(t, r, "ns", "ns/s", "s", registryTestTools("a1", "a2", "a3"), nil)

	const rounds = 300
	var wg sync.WaitGroup
	stop := make(chan struct{})
	errs := make(chan string, 3)
	for range 3 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				for _, got := range [][]string{registryTestNames(r.Tools("ns")), registryTestNames(r.Owned("ns", "ns/s"))} {
					if !slices.Equal(got, setA) && !slices.Equal(got, setB) {
						errs <- fmt.Sprintf("reader saw %v", got)
						return
					}
				}
				_, _, okA := r.Lookup("ns", "mcp__s__a3")
				if !okA {
					errs <- "mcp__s__a3, present in both sets, was missing"
					return
				}
			}
		}()
	}
	for i := range rounds {
		names := []string{"a1", "a2", "a3"}
		if i%2 == 0 {
			names = []string{"b3", "a3", "b1", "b2"}
		}
		registryTestMustSwap(t, r, "ns", "ns/s", "s", registryTestTools(names...), nil)
	}
	close(stop)
	wg.Wait()
	close(errs)
	for e := range errs {
		t.Error(e)
	}
}

func TestRegistryUnchangedSwapSignalsNothing(t *testing.T) {
	r := New()
	sub := r.Subscribe()
	defer sub.Close()
	c1, c2 := &registryTestCaller{"1"}, &registryTestCaller{"2"}
	registryTestMustSwap(t, r, "ns", "ns/s", "s", registryTestTools("x", "y", "z"), c1)
	sub.Drain()
	before := r.Tools("ns")
	beforeOwned := r.Owned("ns", "ns/s")

	// A reconnect lists the same tools again, as fresh values, in another
	// order, and hands in a new caller.
	changed, err := r.Swap("ns", "ns/s", "s", registryTestTools("z", "x", "y"), c2)
	if err != nil || changed {
		t.Fatalf("Swap(unchanged) = %v, %v; want false, nil", changed, err)
	}
	if registryTestPending(sub) {
		t.Error("unchanged Swap signalled subscribers")
	}
	if got := sub.Drain(); len(got) != 0 {
		t.Errorf("Drain after unchanged Swap = %v, want none", got)
	}
	after := r.Tools("ns")
	if !reflect.DeepEqual(before, after) {
		t.Errorf("entries changed:\nbefore %+v\nafter  %+v", before, after)
	}
	for i := range after {
		if after[i].Upstream() != before[i].Upstream() {
			t.Errorf("entry %s was replaced by an equal one; want the identical entry", after[i].Name)
		}
	}
	if !reflect.DeepEqual(beforeOwned, r.Owned("ns", "ns/s")) {
		t.Error("Owned changed after an unchanged Swap")
	}
	if _, c, _ := r.Lookup("ns", "mcp__s__x"); c != c2 {
		t.Errorf("Lookup caller = %v, want the caller of the latest Swap", c)
	}
}

func TestRegistrySwapDetectsEveryPublishedDifference(t *testing.T) {
	tests := []struct {
		name       string
		serverName string
		edit       func([]*mcp.Tool) []*mcp.Tool
	}{
		{name: "description", edit: func(ts []*mcp.Tool) []*mcp.Tool { ts[0].Description = "new"; return ts }},
		{name: "input schema", edit: func(ts []*mcp.Tool) []*mcp.Tool {
			ts[1].InputSchema = map[string]any{"type": "object", "required": []any{"q"}}
			return ts
		}},
		{name: "output schema", edit: func(ts []*mcp.Tool) []*mcp.Tool {
			ts[1].OutputSchema = map[string]any{"type": "object"}
			return ts
		}},
		{name: "annotations", edit: func(ts []*mcp.Tool) []*mcp.Tool {
			ts[0].Annotations = &mcp.ToolAnnotations{ReadOnlyHint: true}
			return ts
		}},
		{name: "title", edit: func(ts []*mcp.Tool) []*mcp.Tool { ts[0].Title = "T"; return ts }},
		{name: "meta", edit: func(ts []*mcp.Tool) []*mcp.Tool { ts[0].Meta = mcp.Meta{"k": "v"}; return ts }},
		{name: "tool added", edit: func(ts []*mcp.Tool) []*mcp.Tool { return append(ts, registryTestTool("c")) }},
		{name: "tool removed", edit: func(ts []*mcp.Tool) []*mcp.Tool { return ts[:1] }},
		{name: "tool renamed", edit: func(ts []*mcp.Tool) []*mcp.Tool { ts[1].Name = "c"; return ts }},
		{name: "all tools removed", edit: func([]*mcp.Tool) []*mcp.Tool { return nil }},
		{name: "serverName", serverName: "t", edit: func(ts []*mcp.Tool) []*mcp.Tool { return ts }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New()
			sub := r.Subscribe()
			defer sub.Close()
			registryTestMustSwap(t, r, "ns", "ns/s", "s", registryTestTools("a", "b"), nil)
			sub.Drain()
			before := r.Tools("ns")
			serverName := "s"
			if tt.serverName != "" {
				serverName = tt.serverName
			}
			if !registryTestMustSwap(t, r, "ns", "ns/s", serverName, tt.edit(registryTestTools("a", "b")), nil) {
				t.Fatal("Swap reported no change")
			}
			if !registryTestPending(sub) {
				t.Error("no signal")
			}
			if got := sub.Drain(); !slices.Equal(got, []string{"ns"}) {
				t.Errorf("Drain = %v, want [ns]", got)
			}
			if reflect.DeepEqual(before, r.Tools("ns")) {
				t.Error("Tools unchanged")
			}
		})
	}
}

// TestRegistryConflictRefusesNewOwner is the example of docs/design.md,
// "Tool registry and names": serverName a__b with tool c, then serverName a
// with tool b__c.
func TestRegistryConflictRefusesNewOwner(t *testing.T) {
	r := New()
	sub := r.Subscribe()
	defer sub.Close()
	first := &registryTestCaller{"first"}
	registryTestMustSwap(t, r, "agents", "agents/first", "a__b", registryTestTools("c", "d"), first)
	sub.Drain()

	changed, err := r.Swap("agents", "agents/second", "a", registryTestTools("e", "b__c"), &registryTestCaller{"second"})
	if changed {
		t.Error("refused Swap reported a change")
	}
	var ce *ConflictError
	if !errors.As(err, &ce) {
		t.Fatalf("Swap err = %v, want *ConflictError", err)
	}
	want := ConflictError{PublicName: "mcp__a__b__c", RawName: "b__c", HeldBy: "agents/first"}
	if *ce != want {
		t.Errorf("ConflictError = %+v, want %+v", *ce, want)
	}
	if registryTestPending(sub) {
		t.Error("refused Swap signalled subscribers")
	}
	if got := r.Owned("agents", "agents/second"); len(got) != 0 {
		t.Errorf("refused owner has tools %v", registryTestNames(got))
	}
	if got, want := registryTestNames(r.Tools("agents")), []string{"mcp__a__b__c", "mcp__a__b__d"}; !slices.Equal(got, want) {
		t.Errorf("Tools = %v, want %v", got, want)
	}
	tool, c, ok := r.Lookup("agents", "mcp__a__b__c")
	if !ok || c != first || tool.Owner != "agents/first" || tool.RawName != "c" {
		t.Errorf("Lookup(mcp__a__b__c) = %+v, %v, %v: want the first owner's tool", tool, c, ok)
	}
	// The refused owner's other tool was not published either.
	if _, _, ok := r.Lookup("agents", "mcp__a__e"); ok {
		t.Error("part of a refused set was published")
	}
}

func TestRegistryConflictOnResyncKeepsPreviousSet(t *testing.T) {
	r := New()
	sub := r.Subscribe()
	defer sub.Close()
	holder, old, newer := &registryTestCaller{"holder"}, &registryTestCaller{"old"}, &registryTestCaller{"new"}
	registryTestMustSwap(t, r, "ns", "ns/holder", "a__b", registryTestTools("c"), holder)
	registryTestMustSwap(t, r, "ns", "ns/later", "a", registryTestTools("x", "y"), old)
	sub.Drain()
	before := r.Owned("ns", "ns/later")

	// list_changed: the server now also lists b__c, whose public name is held.
	changed, err := r.Swap("ns", "ns/later", "a", registryTestTools("x", "b__c"), newer)
	var ce *ConflictError
	if changed || !errors.As(err, &ce) || ce.HeldBy != "ns/holder" || ce.PublicName != "mcp__a__b__c" {
		t.Fatalf("Swap = %v, %v; want a conflict with ns/holder", changed, err)
	}
	if registryTestPending(sub) {
		t.Error("refused Swap signalled subscribers")
	}
	if after := r.Owned("ns", "ns/later"); !reflect.DeepEqual(before, after) {
		t.Errorf("previous set not kept: before %v, after %v", registryTestNames(before), registryTestNames(after))
	}
	if _, c, ok := r.Lookup("ns", "mcp__a__y"); !ok || c != old {
		t.Errorf("Lookup(mcp__a__y) = %v, %v: want the previous set with its previous caller", c, ok)
	}
	if _, c, _ := r.Lookup("ns", "mcp__a__b__c"); c != holder {
		t.Errorf("conflicting name now served by %v, want the holder", c)
	}

	// Once the holder goes away, the retry succeeds.
	r.Remove("ns", "ns/holder")
	if !registryTestMustSwap(t, r, "ns", "ns/later", "a", registryTestTools("x", "b__c"), newer) {
		t.Error("retry after the holder left reported no change")
	}
	if tool, c, ok := r.Lookup("ns", "mcp__a__b__c"); !ok || c != newer || tool.Owner != "ns/later" {
		t.Errorf("Lookup(mcp__a__b__c) = %+v, %v, %v after retry", tool, c, ok)
	}
}

func TestRegistryRefusesInvalidSets(t *testing.T) {
	// "a_b_<hash>" is a valid name that equals the hashed public name of "a.b".
	hashed := PublicName("s", "a.b")
	spoof := strings.TrimPrefix(hashed, "mcp__s__")
	tests := []struct {
		name     string
		tools    []*mcp.Tool
		conflict *ConflictError
		errHas   string
	}{
		{name: "raw name listed twice", tools: []*mcp.Tool{registryTestTool("x"), registryTestTool("dup"), registryTestTool("dup")},
			errHas: `tool "dup" is listed twice`},
		{name: "two raw names with one public name", tools: registryTestTools("a.b", spoof),
			conflict: &ConflictError{PublicName: hashed, RawName: spoof, HeldBy: "ns/s"}},
		{name: "nil tool", tools: []*mcp.Tool{registryTestTool("x"), nil}, errHas: "nil"},
		{name: "schema that cannot be encoded", tools: []*mcp.Tool{{Name: "x", InputSchema: map[string]any{"maximum": math.NaN()}}},
			errHas: `tool "x" cannot be encoded`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := New()
			sub := r.Subscribe()
			defer sub.Close()
			c := &registryTestCaller{"prev"}
			registryTestMustSwap(t, r, "ns", "ns/s", "s", registryTestTools("prev"), c)
			sub.Drain()
			before := r.Tools("ns")

			changed, err := r.Swap("ns", "ns/s", "s", tt.tools, &registryTestCaller{"next"})
			if changed || err == nil {
				t.Fatalf("Swap = %v, %v; want refusal", changed, err)
			}
			if tt.conflict != nil {
				var ce *ConflictError
				if !errors.As(err, &ce) || *ce != *tt.conflict {
					t.Errorf("err = %#v, want %+v", err, *tt.conflict)
				}
			} else if !strings.Contains(err.Error(), tt.errHas) {
				t.Errorf("err = %q, want it to contain %q", err, tt.errHas)
			}
			if !reflect.DeepEqual(before, r.Tools("ns")) {
				t.Error("refused Swap changed the published set")
			}
			if _, got, _ := r.Lookup("ns", "mcp__s__prev"); got != c {
				t.Error("refused Swap replaced the caller")
			}
			if registryTestPending(sub) {
				t.Error("refused Swap signalled subscribers")
			}
			// A fresh owner with the same list is refused too and leaves no entry.
			if _, err := r.Swap("ns2", "ns2/fresh", "s", tt.tools, nil); err == nil {
				t.Error("fresh owner: Swap accepted the invalid set")
			}
			if got := r.Tools("ns2"); len(got) != 0 {
				t.Errorf("fresh owner: refused Swap published %v", registryTestNames(got))
			}
			if registryTestPending(sub) {
				t.Error("fresh owner: refused Swap signalled subscribers")
			}
		})
	}
}

func TestRegistryNamespacesAreIsolated(t *testing.T) {
	r := New()
	sub := r.Subscribe()
	defer sub.Close()
	ca, cb := &registryTestCaller{"a"}, &registryTestCaller{"b"}
	// The same serverName and the same tool in two namespaces: no conflict.
	registryTestMustSwap(t, r, "team-a", "team-a/gh", "gh", registryTestTools("issue", "only-a"), ca)
	registryTestMustSwap(t, r, "team-b", "team-b/gh", "gh", registryTestTools("issue"), cb)
	if got := sub.Drain(); !slices.Equal(got, []string{"team-a", "team-b"}) {
		t.Errorf("Drain = %v", got)
	}

	if got, want := registryTestNames(r.Tools("team-b")), []string{"mcp__gh__issue"}; !slices.Equal(got, want) {
		t.Errorf("Tools(team-b) = %v, want %v", got, want)
	}
	if _, _, ok := r.Lookup("team-b", "mcp__gh__only-a"); ok {
		t.Error("team-a's tool is visible in team-b")
	}
	if _, c, _ := r.Lookup("team-a", "mcp__gh__issue"); c != ca {
		t.Error("team-a's tool is served by another caller")
	}
	if _, c, _ := r.Lookup("team-b", "mcp__gh__issue"); c != cb {
		t.Error("team-b's tool is served by another caller")
	}
	if got := r.Owned("team-b", "team-a/gh"); got != nil {
		t.Errorf("Owned(team-b, team-a/gh) = %v", registryTestNames(got))
	}

	r.Remove("team-a", "team-a/gh")
	if got := sub.Drain(); !slices.Equal(got, []string{"team-a"}) {
		t.Errorf("Drain after Remove in team-a = %v, want [team-a]", got)
	}
	if len(r.Tools("team-a")) != 0 || len(r.Tools("team-b")) != 1 {
		t.Errorf("after Remove in team-a: team-a %v, team-b %v", registryTestNames(r.Tools("team-a")), registryTestNames(r.Tools("team-b")))
	}
	if len(r.Tools("nowhere")) != 0 {
		t.Error("unknown namespace has tools")
	}
}

func TestRegistryRemove(t *testing.T) {
	r := New()
	sub := r.Subscribe()
	defer sub.Close()
	registryTestMustSwap(t, r, "ns", "ns/a", "a", registryTestTools("x", "y"), nil)
	registryTestMustSwap(t, r, "ns", "ns/b", "b", registryTestTools("x"), nil)
	sub.Drain()

	if !r.Remove("ns", "ns/a") {
		t.Error("Remove of an owner with tools reported no change")
	}
	if got := sub.Drain(); !slices.Equal(got, []string{"ns"}) {
		t.Errorf("Drain = %v, want [ns]", got)
	}
	if got, want := registryTestNames(r.Tools("ns")), []string{"mcp__b__x"}; !slices.Equal(got, want) {
		t.Errorf("Tools = %v, want %v", got, want)
	}
	if _, _, ok := r.Lookup("ns", "mcp__a__x"); ok {
		t.Error("removed tool still found")
	}
	if r.Owned("ns", "ns/a") != nil {
		t.Error("removed owner still owns tools")
	}
	if r.Remove("ns", "ns/a") || r.Remove("ns", "ns/never") || r.Remove("other", "ns/b") {
		t.Error("Remove of an owner without tools reported a change")
	}
	if registryTestPending(sub) {
		t.Error("Remove without change signalled")
	}
	// A removed owner's public names are free again.
	if _, err := r.Swap("ns", "ns/c", "a", registryTestTools("x"), nil); err != nil {
		t.Errorf("Swap of a name freed by Remove: %v", err)
	}
}

func TestRegistryEmptySet(t *testing.T) {
	r := New()
	sub := r.Subscribe()
	defer sub.Close()
	if changed := registryTestMustSwap(t, r, "ns", "ns/empty", "e", nil, nil); changed {
		t.Error("Swap of an empty set for a new owner reported a change")
	}
	if registryTestPending(sub) {
		t.Error("empty set for a new owner signalled")
	}
	registryTestMustSwap(t, r, "ns", "ns/empty", "e", registryTestTools("t"), nil)
	sub.Drain()
	if changed := registryTestMustSwap(t, r, "ns", "ns/empty", "e", []*mcp.Tool{}, nil); !changed {
		t.Error("Swap of an empty set over tools reported no change")
	}
	if got := sub.Drain(); !slices.Equal(got, []string{"ns"}) {
		t.Errorf("Drain = %v, want [ns]", got)
	}
	if len(r.Tools("ns")) != 0 || len(r.Owned("ns", "ns/empty")) != 0 {
		t.Error("tools left after swapping in an empty set")
	}
	if r.Remove("ns", "ns/empty") {
		t.Error("Remove of an owner with an empty set reported a change")
	}
}

func TestRegistryToolsSortedByPublicName(t *testing.T) {
	r := New()
	registryTestMustSwap(t, r, "ns", "ns/zeta", "zeta", registryTestTools("b", "a"), nil)
	registryTestMustSwap(t, r, "ns", "ns/alpha", "alpha", registryTestTools("z", "with space", "Upper", "m"), nil)
	registryTestMustSwap(t, r, "ns", "ns/mid", "mid", registryTestTools("k"), nil)

	want := []string{
		"mcp__alpha__Upper",
		"mcp__alpha__m",
		PublicName("alpha", "with space"), // mcp__alpha__with_space_<hash>
		"mcp__alpha__z",
		"mcp__mid__k",
		"mcp__zeta__a",
		"mcp__zeta__b",
	}
	if got := registryTestNames(r.Tools("ns")); !slices.Equal(got, want) {
		t.Errorf("Tools = %v\nwant    %v", got, want)
	}
	if got := registryTestNames(r.Owned("ns", "ns/alpha")); !slices.Equal(got, want[:4]) {
		t.Errorf("Owned(alpha) = %v, want %v", got, want[:4])
	}
	if got := registryTestNames(r.Owned("ns", "ns/zeta")); !slices.Equal(got, want[5:]) {
		t.Errorf("Owned(zeta) = %v, want %v", got, want[5:])
	}
}

// TestRegistrySnapshotsAreImmutable checks copy-on-write: a snapshot taken
// before a Swap keeps its contents, and mutating the tools handed to Swap does
// not reach the published entries.
func TestRegistrySnapshotsAreImmutable(t *testing.T) {
	r := New()
	in := registryTestTools("a", "b")
	registryTestMustSwap(t, r, "ns", "ns/s", "s", in, nil)
	snap := r.Tools("ns")
	owned := r.Owned("ns", "ns/s")
	want := registryTestJSON(snap)

	in[0].Description = "mutated"
	in[0].InputSchema.(map[string]any)["type"] = "mutated"
	// Same size first, so an implementation reusing the old backing array
	// would overwrite snap.
	registryTestMustSwap(t, r, "ns", "ns/s", "s", registryTestTools("c", "d"), nil)
	_ = r.Tools("ns")
	registryTestMustSwap(t, r, "ns", "ns/s", "s", registryTestTools("c"), nil)
	registryTestMustSwap(t, r, "ns", "ns/t", "t", registryTestTools("a"), nil)
	_ = r.Tools("ns")

	if got := registryTestJSON(snap); got != want {
		t.Errorf("snapshot changed after later Swaps:\nbefore %s\nafter  %s", want, got)
	}
	if got := registryTestJSON(owned); got != want {
		t.Errorf("Owned snapshot changed after later Swaps:\nbefore %s\nafter  %s", want, got)
	}
	// Appending to a snapshot must not write into the registry's storage.
	cur := r.Tools("ns")
	_ = append(cur, Tool{Name: "zzz"})
	_ = append(r.Owned("ns", "ns/s"), Tool{Name: "zzz"})
	if got := registryTestNames(r.Tools("ns")); !slices.Equal(got, registryTestNames(cur)) {
		t.Errorf("append to a snapshot changed the registry: %v", got)
	}
	if n := len(r.Owned("ns", "ns/t")); n != 1 {
		t.Errorf("append to a snapshot changed another owner: %d tools", n)
	}
}

func TestRegistryPublishedToolMatchesUpstream(t *testing.T) {
	r := New()
	ro := true
	in := &mcp.Tool{
		Name:         "get.issue",
		Title:        "Get issue",
		Description:  "Gets an issue",
		InputSchema:  json.RawMessage(`{"type":"object","properties":{"n":{"type":"integer","maximum":9007199254740991}}}`),
		OutputSchema: map[string]any{"type": "object"},
		Annotations:  &mcp.ToolAnnotations{ReadOnlyHint: ro, Title: "t"},
		Meta:         mcp.Meta{"x": "y"},
	}
	wantJSON, err := json.Marshal(in)
	if err != nil {
		t.Fatal(err)
	}
	registryTestMustSwap(t, r, "ns", "ns/gh", "gh", []*mcp.Tool{in}, nil)
	tool, _, ok := r.Lookup("ns", PublicName("gh", "get.issue"))
	if !ok {
		t.Fatal("tool not found by its public name")
	}
	if tool.Upstream() == in {
		t.Error("Upstream is the caller's value, not a copy")
	}
	if tool.Upstream().Name != "get.issue" || tool.RawName != "get.issue" {
		t.Errorf("Upstream.Name = %q, RawName = %q; want the raw name", tool.Upstream().Name, tool.RawName)
	}
	var got, want any
	gotJSON, _ := json.Marshal(tool.Upstream())
	_ = json.Unmarshal(gotJSON, &got)
	_ = json.Unmarshal(wantJSON, &want)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("published tool differs from the listed one:\ngot  %s\nwant %s", gotJSON, wantJSON)
	}
	// An equal tool given in another Go representation is unchanged.
	again := *in
	again.InputSchema = map[string]any{"properties": map[string]any{"n": map[string]any{"maximum": float64(9007199254740991), "type": "integer"}}, "type": "object"}
	if changed := registryTestMustSwap(t, r, "ns", "ns/gh", "gh", []*mcp.Tool{&again}, nil); changed {
		t.Error("same tool in another Go representation reported a change")
	}
}

func TestRegistryConflictErrorMessage(t *testing.T) {
	err := &ConflictError{PublicName: "mcp__a__b__c", RawName: "b__c", HeldBy: "agents/other"}
	want := `tool "b__c" would be published as "mcp__a__b__c", already held by agents/other`
	if err.Error() != want {
		t.Errorf("Error() = %q, want %q", err.Error(), want)
	}
}

func TestRegistrySubscriptionCoalesces(t *testing.T) {
	r := New()
	sub := r.Subscribe()
	defer sub.Close()
	for i := range 100 {
		ns := []string{"zeta", "alpha", "mid"}[i%3]
		registryTestMustSwap(t, r, ns, ns+"/s", "s", registryTestTools(fmt.Sprintf("t%d", i)), nil)
	}
	if n := len(sub.C); n != 1 {
		t.Fatalf("%d signals pending after 100 changes, want exactly 1", n)
	}
	<-sub.C
	if got, want := sub.Drain(), []string{"alpha", "mid", "zeta"}; !slices.Equal(got, want) {
		t.Errorf("Drain = %v, want %v", got, want)
	}
	if got := sub.Drain(); len(got) != 0 {
		t.Errorf("second Drain = %v, want none", got)
	}
	if registryTestPending(sub) {
		t.Error("signal pending after Drain with no new change")
	}

	// A change between the receive and the Drain is reported by that Drain
	// and leaves no stale signal behind.
	registryTestMustSwap(t, r, "alpha", "alpha/s", "s", registryTestTools("u"), nil)
	<-sub.C
	registryTestMustSwap(t, r, "beta", "beta/s", "s", registryTestTools("u"), nil)
	if got, want := sub.Drain(), []string{"alpha", "beta"}; !slices.Equal(got, want) {
		t.Errorf("Drain = %v, want %v", got, want)
	}
	if registryTestPending(sub) {
		t.Error("stale signal after Drain")
	}
}

func TestRegistrySubscriptionsAreIndependent(t *testing.T) {
	r := New()
	s1, s2 := r.Subscribe(), r.Subscribe()
	defer s1.Close()
	defer s2.Close()
	registryTestMustSwap(t, r, "ns", "ns/s", "s", registryTestTools("a"), nil)
	if got := s1.Drain(); !slices.Equal(got, []string{"ns"}) {
		t.Errorf("s1.Drain = %v", got)
	}
	if !registryTestPending(s2) {
		t.Error("s2 lost its signal when s1 drained")
	}
	if got := s2.Drain(); !slices.Equal(got, []string{"ns"}) {
		t.Errorf("s2.Drain = %v", got)
	}
}

func TestRegistrySubscriptionCloseStopsDelivery(t *testing.T) {
	r := New()
	closed, open := r.Subscribe(), r.Subscribe()
	defer open.Close()
	registryTestMustSwap(t, r, "ns", "ns/s", "s", registryTestTools("a"), nil)
	closed.Close()
	if registryTestPending(closed) {
		t.Error("signal pending on a closed subscription")
	}
	registryTestMustSwap(t, r, "ns", "ns/s", "s", registryTestTools("b"), nil)
	registryTestMustSwap(t, r, "other", "other/s", "s", registryTestTools("b"), nil)
	if registryTestPending(closed) {
		t.Error("closed subscription received a signal")
	}
	if got := closed.Drain(); got != nil {
		t.Errorf("Drain after Close = %v, want nil", got)
	}
	closed.Close() // idempotent
	if got := open.Drain(); !slices.Equal(got, []string{"ns", "other"}) {
		t.Errorf("open subscription Drain = %v", got)
	}
	r.mu.RLock()
	n := len(r.subs)
	r.mu.RUnlock()
	if n != 1 {
		t.Errorf("registry holds %d subscriptions, want 1 after Close", n)
	}
}

// TestRegistryConcurrentStress runs Swap, Remove, Tools, Owned, Lookup and
// subscribers concurrently (meant for -race) and checks every snapshot is
// sorted and consistent.
func TestRegistryConcurrentStress(t *testing.T) {
	r := New()
	const (
		writers    = 4
		readers    = 4
		iterations = 400
	)
	namespaces := []string{"a", "b"}
	var wg sync.WaitGroup
	errs := make(chan error, writers+readers+1)
	done := make(chan struct{})

	sub := r.Subscribe()
	var subWG sync.WaitGroup
	subWG.Add(1)
	go func() {
		defer subWG.Done()
		for {
			select {
			case <-done:
				return
			case <-sub.C:
				for _, ns := range sub.Drain() {
					if ns != "a" && ns != "b" {
						errs <- fmt.Errorf("Drain returned unknown namespace %q", ns)
						return
					}
				}
			}
		}
	}()

	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			owner := fmt.Sprintf("o%d", w)
			c := &registryTestCaller{owner}
			for i := range iterations {
				ns := namespaces[i%len(namespaces)]
				switch i % 7 {
				case 5:
					r.Remove(ns, owner)
				case 6:
					// Conflicts with the shared name held by writer 0.
					if w != 0 {
						if _, err := r.Swap(ns, owner, "shared", registryTestTools("x"), c); err != nil {
							var ce *ConflictError
							if !errors.As(err, &ce) {
								errs <- err
								return
							}
						}
						r.Remove(ns, owner)
					}
				default:
					names := []string{"x", "y", fmt.Sprintf("n%d", i%3)}
					sn := owner
					if w == 0 {
						sn = "shared"
					}
					if _, err := r.Swap(ns, owner, sn, registryTestTools(names[:1+i%3]...), c); err != nil {
						// Writer 0 may find "shared" names taken by another
						// writer's short-lived registration (case 6).
						var ce *ConflictError
						if !errors.As(err, &ce) {
							errs <- err
							return
						}
					}
				}
			}
		}()
	}
	for range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range iterations {
				ns := namespaces[i%len(namespaces)]
				ts := r.Tools(ns)
				if !slices.IsSortedFunc(ts, func(a, b Tool) int { return strings.Compare(a.Name, b.Name) }) {
					errs <- fmt.Errorf("Tools(%s) not sorted: %v", ns, registryTestNames(ts))
					return
				}
				for j := 1; j < len(ts); j++ {
					if ts[j].Name == ts[j-1].Name {
						errs <- fmt.Errorf("Tools(%s) has %s twice", ns, ts[j].Name)
						return
					}
				}
				for _, tool := range ts {
					if tool.Name != PublicName(tool.ServerName, tool.RawName) || tool.Upstream().Name != tool.RawName {
						errs <- fmt.Errorf("inconsistent entry %+v", tool)
						return
					}
					if got, c, ok := r.Lookup(ns, tool.Name); ok {
						if got.Name != tool.Name || c == nil {
							errs <- fmt.Errorf("Lookup(%s) = %+v, %v", tool.Name, got, c)
							return
						}
					}
				}
				owned := r.Owned(ns, fmt.Sprintf("o%d", i%writers))
				if !slices.IsSortedFunc(owned, func(a, b Tool) int { return strings.Compare(a.Name, b.Name) }) {
					errs <- fmt.Errorf("Owned not sorted: %v", registryTestNames(owned))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(done)
	subWG.Wait()
	sub.Close()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
}
