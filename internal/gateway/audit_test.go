package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/internal/registry"
)

// logLines collects what a logger writes.
type logLines struct {
	mu    sync.Mutex
	lines []string
}

func (l *logLines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, prefix+" "+args)
}

func (l *logLines) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.lines...)
}

// Every tools/call, through the fast path or the SDK, answered or not,
// writes one audit line with the tool, its server and the outcome, and no
// line holds an argument or a result, even at the most verbose level.
func TestAuditLinesNeverHoldArgumentsOrResults(t *testing.T) {
	const secret = "sk-live-4f9a1c0b7e2d"
	logs := &logLines{}
	env := newTestEnv(t, envOptions{log: funcr.New(logs.add, funcr.Options{Verbosity: 10})})
	env.fake.setHandle(func(context.Context, json.RawMessage) (json.RawMessage, bool, error) {
		return json.RawMessage(`{"content":[{"type":"text","text":"` + secret + `"}]}`), false, nil
	})
	env.fake.setSDKHandle(func(context.Context) (*mcp.CallToolResult, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: secret}}}, nil
	})
	cs := env.agent(statefulProto)
	ctx := context.Background()
	for _, tool := range []string{echoPublic, regionPublic} { // fast path, SDK path
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: map[string]any{"password": secret, "region": "eu-" + secret}})
		if err != nil || textOf(res) != secret {
			t.Fatalf("%s: %v, %q", tool, err, textOf(res))
		}
	}
	if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "mcp__fx__nope", Arguments: map[string]any{"password": secret}}); err == nil {
		t.Fatal("a call of an unknown tool succeeded")
	}
	if jsonCalls, sdkCalls := env.fake.counts(); jsonCalls != 1 || sdkCalls != 1 {
		t.Fatalf("fast path %d calls, SDK path %d; want one each", jsonCalls, sdkCalls)
	}

	want := map[string]string{echoPublic: `"server"="fx" "outcome"="success"`,
		regionPublic: `"server"="fx" "outcome"="success"`, "mcp__fx__nope": `"server"="" "outcome"="unknown_tool"`}
	// The fast path audits a call after its answer is written: wait for it.
	NewWithT(t).Eventually(func(g Gomega) {
		for tool, rest := range want {
			var found []string
			for _, l := range logs.all() {
				if strings.Contains(l, `"msg"="tools/call"`) && strings.Contains(l, fmt.Sprintf(`"tool"=%q`, tool)) {
					found = append(found, l)
				}
			}
			g.Expect(found).To(HaveLen(1), "audit lines of %s", tool)
			g.Expect(found[0]).To(SatisfyAll(ContainSubstring(`"user"="anonymous" "tool"=`), ContainSubstring(rest),
				ContainSubstring(`"durationSeconds"=`), ContainSubstring(`"namespace"="agents"`)), "audit line of %s", tool)
		}
	}, 10*time.Second, 10*time.Millisecond).Should(Succeed())
	for _, l := range logs.all() {
		if strings.Contains(l, secret) {
			t.Errorf("a log line holds the secret: %s", l)
		}
	}
}

func TestRefusalFoldWritesOneLineASecond(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	var f refusalFold
	for _, step := range []struct {
		at         time.Duration
		write      bool
		wantFolded int
	}{
		{0, true, 0},
		{10 * time.Millisecond, false, 0},
		{999 * time.Millisecond, false, 0},
		{time.Second, true, 2},
		{time.Second + time.Millisecond, false, 0},
		{5 * time.Second, true, 1},
		{7 * time.Second, true, 0},
	} {
		folded, write := f.admit(t0.Add(step.at))
		if write != step.write || folded != step.wantFolded {
			t.Errorf("at %v: write %v with %d folded, want %v with %d", step.at, write, folded, step.write, step.wantFolded)
		}
	}
}

// A refused call folded into the next line is counted there; other
// outcomes are never folded.
func TestRefusedCallsAuditLinesAreFolded(t *testing.T) {
	logs := &logLines{}
	v := &view{e: &endpoint{auditLog: funcr.New(logs.add, funcr.Options{})}}
	tool := registry.Tool{Owner: "ns/fx"}
	v.refusals.last = time.Now().Add(time.Hour) // every refusal now falls in the current second
	v.audit("mcp__fx__echo", tool, "refused", 0)
	v.audit("mcp__fx__echo", tool, "refused", 0)
	v.audit("mcp__fx__echo", tool, "success", 0)
	v.refusals.last = time.Time{} // the second has passed
	v.audit("mcp__fx__echo", tool, "refused", 0)
	lines := logs.all()
	if len(lines) != 2 || !strings.Contains(lines[0], `"outcome"="success"`) ||
		!strings.Contains(lines[1], `"outcome"="refused"`) || !strings.Contains(lines[1], `"foldedRefusals"=2`) {
		t.Fatalf("audit lines %q, want the success, then one refused line with foldedRefusals 2", lines)
	}
}
