package gateway

import (
	"context"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/go-logr/logr/funcr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

func TestCutKeepsAgentStringsShortAndValid(t *testing.T) {
	long := strings.Repeat("x", 4<<20)
	for _, tc := range []struct {
		name, in, want string
	}{
		{"empty", "", ""},
		{"short", "mcp__fx__echo", "mcp__fx__echo"},
		{"exactly the limit", long[:128], long[:128]},
		{"one byte over", long[:129], long[:128]},
		{"4 MiB", long, long[:128]},
		{"a two-byte rune across the limit", "a" + strings.Repeat("é", 100), "a" + strings.Repeat("é", 63)},
		{"a four-byte rune across the limit", "abc" + strings.Repeat("😀", 40), "abc" + strings.Repeat("😀", 31)},
		{"runes that end at the limit", strings.Repeat("é", 80), strings.Repeat("é", 64)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := cut(tc.in)
			if got != tc.want {
				t.Errorf("cut = %q (%d bytes), want %q (%d bytes)", got, len(got), tc.want, len(tc.want))
			}
			if len(got) > maxAgentString || !utf8.ValidString(got) {
				t.Errorf("cut = %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
			}
		})
	}
}

// hugeToolName is what a hostile agent calls: far longer than any tool's
// name, ending in a two-byte rune across the cut.
var hugeToolName = "mcp__fx__" + strings.Repeat("n", 118) + strings.Repeat("é", 32<<10)

// The audit line of a call of a tool with a huge name holds its first 128
// bytes, not the name.
func TestAuditLineCutsTheToolName(t *testing.T) {
	logs := &logLines{}
	env := newTestEnv(t, envOptions{log: funcr.New(logs.add, funcr.Options{})})
	cs := env.agent(statefulProto)
	if _, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: hugeToolName}); err == nil {
		t.Fatal("a call of an unknown tool succeeded")
	}
	want := `"tool"="` + hugeToolName[:127] + `"` // 128 would split an é
	var found int
	for _, l := range logs.all() {
		if len(l) > 2048 {
			t.Errorf("a log line of %d bytes: %.200s...", len(l), l)
		}
		if strings.Contains(l, `"msg"="tools/call"`) && strings.Contains(l, want) {
			found++
		}
	}
	if found != 1 {
		t.Errorf("%d audit lines with the cut name, want 1", found)
	}
}

// Span names and attributes hold at most 128 bytes of what the agent chose:
// the tool's name and the JSON-RPC id.
func TestSpansCutToolNamesAndRequestIDs(t *testing.T) {
	g := NewWithT(t)
	tp, exp := spanRecorder(t)
	env := newTracedEnv(t, tp, testAccess())
	env.set("", agentToken("narrow-agent"))
	name := hugeToolName[:8191] // a header carries it too; 8191 ends between runes
	body, header := sessionlessCall(8, name, `{}`)
	_, answer := env.post(body, header)
	g.Expect(answer).To(ContainSubstring(`"error"`), "an unknown tool, answered as such")
	s := spanWith(t, exp, "the call of the huge tool", named("tools/call "+hugeToolName[:127], func(tracetest.SpanStub) bool { return true }))
	g.Expect(spanAttrs(s)).To(HaveKeyWithValue("gen_ai.tool.name", hugeToolName[:127]))

	// The fast path records the id.
	id := strings.Repeat("i", 4096)
	body, header = sessionlessCall(9, fxEcho, `{"text":"hi"}`)
	_, answer = env.post(strings.Replace(body, `"id":9`, `"id":"`+id+`"`, 1), header)
	g.Expect(answer).To(ContainSubstring(`"hi"`))
	s = spanWith(t, exp, "the call with a huge id", named("tools/call "+fxEcho, func(tracetest.SpanStub) bool { return true }))
	g.Expect(spanAttrs(s)).To(HaveKeyWithValue("jsonrpc.request.id", id[:128]))
	for _, sp := range exp.GetSpans() {
		g.Expect(len(sp.Name)).To(BeNumerically("<=", 256), "span name %.100s...", sp.Name)
		for k, v := range spanAttrs(sp) {
			g.Expect(len(v)).To(BeNumerically("<=", 256), "attribute %s of span %.100s", k, sp.Name)
		}
	}
}
