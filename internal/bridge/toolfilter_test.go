package bridge

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/registry"
)

// spec.tools and the limits of one fetch.
// See docs/design.md, "Tool sync".

func rawNames(tools []registry.Tool) []string {
	out := make([]string, len(tools))
	for i, t := range tools {
		out[i] = t.RawName
	}
	slices.Sort(out)
	return out
}

func TestToolFilterPublishesOnlyWhatPasses(t *testing.T) {
	p := stdioPolicy("--tools=3")
	p.Tools = policy.ToolFilter{Include: []string{"e*", "p?d", "tool_*"}, Exclude: []string{"env", "tool_0001"}}
	s, reg := startSupervisor(t, p)
	sn := waitFor(t, s, "Ready", isReady)
	g := NewWithT(t)
	want := []string{"echo", "pid", "tool_0000", "tool_0002"}
	g.Expect(rawNames(sn.Tools)).To(Equal(want))
	g.Expect(rawNames(reg.Tools("ns"))).To(Equal(want))

	// A filtered tool cannot be called through the supervisor either.
	_, err := s.CallTool(context.Background(), "env", nil)
	g.Expect(err).To(MatchError(ContainSubstring(`tool "env" is not published: spec.tools filters it out`)))
	_, _, err = s.CallToolJSON(context.Background(), "fail", nil)
	g.Expect(err).To(MatchError(ContainSubstring("filters it out")))
	res, err := s.CallTool(context.Background(), "echo", map[string]any{"text": "hi"})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(RenderText(res)).To(Equal("hi"))
}

func TestToolFilterChangesInPlaceWithoutReconnecting(t *testing.T) {
	p := stdioPolicy("--tools=3")
	p.Tools = policy.ToolFilter{Exclude: []string{"tool_*"}}
	s, reg := startSupervisor(t, p)
	sn := waitFor(t, s, "Ready", isReady)
	gen := sn.Generation
	pid := pidOf(t, mustCall(t, s, "pid"))
	g := NewWithT(t)
	g.Expect(rawNames(sn.Tools)).NotTo(ContainElement(HavePrefix("tool_")))
	s.DrainEvents()

	g.Expect(s.SetToolFilter(policy.ToolFilter{Include: []string{"tool_*", "pid"}, Exclude: []string{"tool_0002"}})).To(BeTrue())
	want := []string{"pid", "tool_0000", "tool_0001"}
	g.Eventually(func() []string { return rawNames(reg.Tools("ns")) }, eventually, 5*time.Millisecond).Should(Equal(want))
	g.Eventually(func() []string { return rawNames(s.Snapshot().Tools) }, eventually, 5*time.Millisecond).Should(Equal(want))
	sn = s.Snapshot()
	g.Expect(sn.Phase).To(Equal(v1alpha1.PhaseReady))
	g.Expect(sn.Generation).To(Equal(gen), "the same connection")
	g.Expect(pidOf(t, mustCall(t, s, "pid"))).To(Equal(pid), "the same server process")
	// publish emits its event after the swap and the snapshot.
	var events []Event
	g.Eventually(func() []Event { events = append(events, s.DrainEvents()...); return events }, eventually, 5*time.Millisecond).
		Should(ContainElement(Event{Reason: "ToolsChanged", Message: "Tools changed: 2 added, 7 removed, 3 published"}))
	_, err := s.CallTool(context.Background(), "echo", nil)
	g.Expect(err).To(MatchError(ContainSubstring("filters it out")))

	// A filter that publishes the same set changes nothing: no registry
	// signal, no event. publish signals the supervisor's change channel
	// when it is done, and nothing else does while the connection idles.
	sub := reg.Subscribe()
	defer sub.Close()
	drain(s.Changes())
	g.Expect(s.SetToolFilter(policy.ToolFilter{Include: []string{"pid", "tool_000[01]"}})).To(BeTrue())
	g.Eventually(s.Changes(), eventually).Should(Receive())
	g.Expect(sub.Drain()).To(BeEmpty())
	g.Expect(s.DrainEvents()).To(BeEmpty())
	g.Expect(rawNames(reg.Tools("ns"))).To(Equal(want))
}

// A fetch that is published whole is kept as the registry's copies, not
// a second set of the generation's own; a filter then narrows and widens
// from those without a fetch.
func TestAWhollyPublishedFetchIsKeptAsTheRegistrysCopies(t *testing.T) {
	s, reg := startSupervisor(t, stdioPolicy("--tools=3"))
	sn := waitFor(t, s, "Ready", isReady)
	g := NewWithT(t)
	published := map[*mcp.Tool]bool{}
	for _, tool := range reg.Owned("ns", "ns/srv") {
		published[tool.Upstream()] = true
	}
	s.syncMu.Lock()
	s.mu.Lock()
	kept := s.live.fetched
	s.mu.Unlock()
	s.syncMu.Unlock()
	g.Expect(kept).To(HaveLen(len(sn.Tools)))
	for _, tool := range kept {
		g.Expect(published[tool]).To(BeTrue(), "the kept tool %q is the registry's (the same pointer)", tool.Name)
	}

	all := rawNames(sn.Tools)
	g.Expect(s.SetToolFilter(policy.ToolFilter{Include: []string{"tool_*"}})).To(BeTrue())
	g.Eventually(func() []string { return rawNames(reg.Tools("ns")) }, eventually, 5*time.Millisecond).
		Should(Equal([]string{"tool_0000", "tool_0001", "tool_0002"}))
	g.Expect(s.SetToolFilter(policy.ToolFilter{})).To(BeTrue())
	g.Eventually(func() []string { return rawNames(reg.Tools("ns")) }, eventually, 5*time.Millisecond).Should(Equal(all))
	g.Expect(s.Snapshot().Generation).To(Equal(sn.Generation), "the same connection")
}

func TestToolFilterIsNotAppliedInPlaceWithoutALiveConnection(t *testing.T) {
	p := stdioPolicy()
	p.Stdio.Command = "/nonexistent/mcp-server"
	s, _ := startSupervisor(t, p)
	waitFor(t, s, "a failed attempt", func(sn Snapshot) bool { return sn.FailedAttempts >= 1 })
	NewWithT(t).Expect(s.SetToolFilter(policy.ToolFilter{Include: []string{"echo"}})).To(BeFalse())
}

// TestToolListByteCap: a server whose tools add up to more than 16 MiB of
// JSON is refused like any failed fetch, naming the limit and the page.
func TestToolListByteCap(t *testing.T) {
	// 1,100 tools with 16,000-byte schemas: about 17.6 MB over 11 pages.
	p := stdioPolicy("--tools=1100", "--schema-bytes=16000", "--page-size=100")
	p.ConnectionTimeout = 60 * time.Second
	s, reg := startSupervisor(t, p)
	// 17.6 MB of JSON through a pipe takes tens of seconds under -race on a
	// loaded machine; the bound follows the connection timeout.
	sn := waitForWithin(t, s, "a failed attempt", p.ConnectionTimeout, func(sn Snapshot) bool { return sn.FailedAttempts >= 1 })
	g := NewWithT(t)
	g.Expect(sn.LastError.Message()).To(Equal("the server's tools exceed 16 MiB of JSON"))
	g.Expect(sn.LastError.Stage).To(MatchRegexp(`^tools-list page 1[01]$`), "16 MiB is crossed on page 10 or 11")
	g.Expect(reg.Tools("ns")).To(BeEmpty())

	// Just under the cap is fine.
	p = stdioPolicy("--tools=1000", "--schema-bytes=16000", "--page-size=100")
	p.ConnectionTimeout = 60 * time.Second
	s, reg = startSupervisor(t, p)
	waitForWithin(t, s, "Ready", p.ConnectionTimeout, isReady)
	g.Expect(reg.Tools("ns")).To(HaveLen(1000 + 8))
}

// TestOneToolByteCap: a tool of more than 1 MiB of JSON fails the fetch,
// naming the tool and the limit (publishing it would decode its schema
// into maps in the registry and in every gateway view); 1 MiB is fine.
func TestOneToolByteCap(t *testing.T) {
	g := NewWithT(t)
	s, reg := startSupervisor(t, stdioPolicy("--tools=1", "--schema-bytes=1100000"))
	sn := waitFor(t, s, "a failed attempt", func(sn Snapshot) bool { return sn.FailedAttempts >= 1 })
	g.Expect(sn.LastError.Message()).To(MatchRegexp(`^the tool "tool_0000" takes 11\d{5} bytes as JSON, over the 1 MiB one tool may take$`))
	g.Expect(sn.LastError.Stage).To(Equal("tools-list page 1"))
	g.Expect(reg.Tools("ns")).To(BeEmpty())

	s, reg = startSupervisor(t, stdioPolicy("--tools=1", "--schema-bytes=1000000"))
	waitFor(t, s, "Ready", isReady)
	g.Expect(reg.Tools("ns")).To(HaveLen(1 + 8))
}

func mustCall(t *testing.T, s *Supervisor, tool string) *mcp.CallToolResult {
	t.Helper()
	res, err := s.CallTool(context.Background(), tool, nil)
	if err != nil {
		t.Fatalf("call %s: %v", tool, err)
	}
	return res
}

func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

// TestJSONAnswerCap: an answer the SDK reads whole (application/json, here
// to initialize) is cut at 16 MiB, like an SSE event or a stdio frame.
func TestJSONAnswerCap(t *testing.T) {
	up := httpServe(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"jsonrpc":"2.0","id":1,"result":{"padding":"`)
		chunk := strings.Repeat("x", 1<<20)
		for range 17 {
			if _, err := io.WriteString(w, chunk); err != nil {
				return
			}
		}
		_, _ = io.WriteString(w, `"}}`)
	}))
	s, _ := startSupervisor(t, httpPolicy(up.URL()))
	sn := waitFor(t, s, "a failed attempt", func(sn Snapshot) bool { return sn.FailedAttempts >= 1 })
	NewWithT(t).Expect(sn.LastError.Message()).To(ContainSubstring("a message from the server exceeds 16 MiB"))
}
