package bridge

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	. "github.com/onsi/gomega"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/test/fixture"
)

// spanRecorder is an SDK tracer provider that exports every ended span at
// once to an in-memory exporter.
func spanRecorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	t.Helper()
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

func withTracing(tp trace.TracerProvider) func(*Options) {
	return func(o *Options) { o.TracerProvider = tp }
}

// spansNamed are the exported spans called name, in the order they ended.
func spansNamed(exp *tracetest.InMemoryExporter, name string) []tracetest.SpanStub {
	var out []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			out = append(out, s)
		}
	}
	return out
}

// waitSpans waits until n spans called name have ended, and returns them.
func waitSpans(t *testing.T, exp *tracetest.InMemoryExporter, name string, n int) []tracetest.SpanStub {
	t.Helper()
	var got []tracetest.SpanStub
	NewWithT(t).Eventually(func() int {
		got = spansNamed(exp, name)
		return len(got)
	}, eventually, 5*time.Millisecond).Should(BeNumerically(">=", n), "waiting for %d %q spans", n, name)
	return got
}

// attrs is a span's attributes by key, as strings.
func attrs(s tracetest.SpanStub) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}

// traceparent is the W3C header value naming s as the parent.
func traceparent(s tracetest.SpanStub) string {
	return fmt.Sprintf("00-%s-%s-01", s.SpanContext.TraceID(), s.SpanContext.SpanID())
}

// isChildOf: s is parent's child in parent's trace.
func isChildOf(s tracetest.SpanStub, parent trace.SpanContext) bool {
	return s.Parent.TraceID() == parent.TraceID() && s.Parent.SpanID() == parent.SpanID()
}

// TestTracingHTTPCall follows a call from a caller's span through the
// supervisor to a Streamable HTTP upstream, on the posted (JSON) path and
// the SDK path, and the connect and sync spans of the connection it used.
func TestTracingHTTPCall(t *testing.T) {
	httpForEachProtocol(t, func(t *testing.T, stateless bool) {
		g := NewWithT(t)
		up := httpServe(t, httpFixture(t, fixture.Options{Stateless: stateless}))
		tp, exp := spanRecorder(t)
		s, _ := startSupervisor(t, httpPolicy(up.URL()), withTracing(tp))
		waitFor(t, s, "ready", isReady)

		ctx, root := tp.Tracer("agent").Start(httpCtx(t), "agent")
		_, isError, err := s.CallToolJSON(ctx, fixture.ToolEcho, json.RawMessage(`{"text":"posted"}`))
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(isError).To(BeFalse())
		res, err := s.CallTool(ctx, fixture.ToolEcho, map[string]any{"text": "sdk"})
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(ResultError(res)).To(Succeed())
		root.End()

		version := httpStatefulVersion
		if stateless {
			version = httpStatelessVersion
		}
		port := strings.TrimPrefix(up.srv.URL, "http://127.0.0.1:")
		calls := waitSpans(t, exp, "tools/call echo", 2)
		g.Expect(calls).To(HaveLen(2))
		// _meta names the call's span (MCP's propagation). The header names
		// the span of the HTTP request that carried it: for CallTool (the
		// SDK's) a child of the call's, for CallToolJSON (which posts the
		// call itself) the call's own span, which carries the HTTP
		// attributes.
		metaOf := map[string]string{} // _meta traceparent -> header traceparent
		for _, r := range up.requests() {
			if r.RPCMethod == "tools/call" {
				metaOf[r.MetaTraceparent] = r.Header.Get("Traceparent")
			}
		}
		// An HTTP span ends when its answer's body is closed, which the
		// SDK may do after the call returned.
		var posts []tracetest.SpanStub
		g.Eventually(func() int {
			posts = spansNamed(exp, "POST")
			ended := 0
			for _, p := range posts {
				for _, header := range metaOf {
					if traceparent(p) == header {
						ended++
					}
				}
			}
			return ended
		}, eventually, 5*time.Millisecond).Should(Equal(1), "the SDK's call has an HTTP span")
		callAttrs := map[string]string{
			"mcp.method.name": "tools/call", "gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "echo",
			"mcpbridge.namespace": "ns", "mcpbridge.mcpserver": "srv", "mcpbridge.server_name": "fx",
			"network.transport": "tcp", "network.protocol.name": "http",
			"server.address": "127.0.0.1", "server.port": port,
			"mcpbridge.generation": "1", "mcp.protocol.version": version, "mcpbridge.outcome": "success",
		}
		raw := 0
		for _, c := range calls {
			g.Expect(c.SpanKind).To(Equal(trace.SpanKindClient))
			g.Expect(isChildOf(c, root.SpanContext())).To(BeTrue(), "a call's span is a child of the caller's")
			g.Expect(metaOf).To(HaveKey(traceparent(c)), "the upstream saw the call's trace context in _meta")
			g.Expect(c.Status.Code).To(Equal(codes.Unset))
			if metaOf[traceparent(c)] == traceparent(c) { // CallToolJSON's
				raw++
				want := maps.Clone(callAttrs)
				want["http.request.method"], want["http.response.status_code"] = "POST", "200"
				g.Expect(attrs(c)).To(Equal(want))
				for _, p := range posts {
					g.Expect(isChildOf(p, c.SpanContext)).To(BeFalse(), "the raw call's span is its request's")
				}
				continue
			}
			var post *tracetest.SpanStub
			for i := range posts {
				if traceparent(posts[i]) == metaOf[traceparent(c)] {
					post = &posts[i]
				}
			}
			g.Expect(post).NotTo(BeNil(), "the traceparent header names an HTTP span")
			g.Expect(isChildOf(*post, c.SpanContext)).To(BeTrue(), "the HTTP request is part of the call")
			g.Expect(post.SpanKind).To(Equal(trace.SpanKindClient))
			g.Expect(attrs(*post)).To(Equal(map[string]string{"http.request.method": "POST",
				"server.address": "127.0.0.1", "server.port": port, "http.response.status_code": "200"}))
			g.Expect(attrs(c)).To(Equal(callAttrs))
		}
		g.Expect(raw).To(Equal(1), "CallToolJSON's upstream request names its call's span")

		// The connect's span ends once connect has returned, which can be
		// after the phase said Ready and the calls above were answered.
		connect := waitSpans(t, exp, spanConnect, 1)
		g.Expect(connect).To(HaveLen(1))
		g.Expect(connect[0].Parent.IsValid()).To(BeFalse(), "a connect is a trace of its own")
		g.Expect(attrs(connect[0])).To(HaveKeyWithValue("mcpbridge.outcome", "success"))
		g.Expect(attrs(connect[0])).To(HaveKeyWithValue("mcpbridge.generation", "1"))
		g.Expect(attrs(connect[0])).To(HaveKeyWithValue("mcp.protocol.version", version))
		syncs := spansNamed(exp, spanSync)
		g.Expect(syncs).To(HaveLen(1))
		g.Expect(isChildOf(syncs[0], connect[0].SpanContext)).To(BeTrue(), "the first sync is part of its connect")
		g.Expect(attrs(syncs[0])).To(And(HaveKeyWithValue("mcpbridge.outcome", "success"),
			HaveKeyWithValue("mcpbridge.sync.trigger", "connect"), HaveKeyWithValue("mcp.method.name", "tools/list"),
			HaveKeyWithValue("mcpbridge.tools.fetched", strconv.Itoa(len(fixture.BuiltinTools))),
			HaveKeyWithValue("mcpbridge.tools.published", strconv.Itoa(len(fixture.BuiltinTools)))))
		list, ok := up.lastCall("tools/list")
		g.Expect(ok).To(BeTrue())
		var listPost []tracetest.SpanStub
		for _, p := range posts {
			if traceparent(p) == list.Header.Get("Traceparent") {
				listPost = append(listPost, p)
			}
		}
		g.Expect(listPost).To(HaveLen(1), "the sync's request carries the trace context of its HTTP span")
		g.Expect(isChildOf(listPost[0], syncs[0].SpanContext)).To(BeTrue(), "which is part of the sync")
	})
}

// TestTracingStdioCall: over stdio the trace context goes in the request's
// params._meta, which the fixture records.
func TestTracingStdioCall(t *testing.T) {
	g := NewWithT(t)
	events := eventsPath(t)
	tp, exp := spanRecorder(t)
	s, _ := startSupervisor(t, stdioPolicy("--events-file", events), withTracing(tp))
	waitFor(t, s, "ready", isReady)

	ctx, root := tp.Tracer("agent").Start(httpCtx(t), "agent")
	_, _, err := s.CallToolJSON(ctx, fixture.ToolEcho, json.RawMessage(`{"text":"json"}`))
	g.Expect(err).NotTo(HaveOccurred())
	_, err = s.CallTool(ctx, fixture.ToolEcho, map[string]any{"text": "sdk"})
	g.Expect(err).NotTo(HaveOccurred())
	root.End()

	calls := waitSpans(t, exp, "tools/call echo", 2)
	g.Expect(calls).To(HaveLen(2), "one span per call: the JSON call goes through CallTool's")
	evs, err := fixture.ReadEvents(events)
	g.Expect(err).NotTo(HaveOccurred())
	seen := map[string]bool{}
	for _, ev := range evs {
		if ev.Kind == fixture.EventCall {
			seen[ev.Traceparent] = true
		}
	}
	for _, c := range calls {
		g.Expect(isChildOf(c, root.SpanContext())).To(BeTrue())
		g.Expect(seen).To(HaveKey(traceparent(c)), "the server received the call's trace context in _meta")
		a := attrs(c)
		g.Expect(a).To(HaveKeyWithValue("network.transport", "pipe"))
		g.Expect(a).NotTo(HaveKey("server.address"))
		g.Expect(a).To(HaveKeyWithValue("mcpbridge.outcome", "success"))
	}
}

// TestTracingConnectFailures: a failed attempt's span says where it failed,
// as status lastError.stage does.
func TestTracingConnectFailures(t *testing.T) {
	for _, tc := range []struct {
		name      string
		policy    func(t *testing.T) *policy.Policy
		egress    []string
		stage     string
		errorType string
		syncFail  bool // the sync's own span failed too
	}{{
		name:      "initialize never answered",
		policy:    func(*testing.T) *policy.Policy { return stdioPolicy("--stall-initialize") },
		stage:     StageInitialize,
		errorType: "timeout",
	}, {
		name:      "tools/list page 1 never answered",
		policy:    func(*testing.T) *policy.Policy { return stdioPolicy("--stall-list-page", "1") },
		stage:     StageToolsList(1),
		errorType: "timeout",
		syncFail:  true,
	}, {
		name: "destination refused",
		policy: func(t *testing.T) *policy.Policy {
			return httpPolicy(httpServe(t, httpFixture(t, fixture.Options{})).URL())
		},
		egress:    []string{"10.0.0.0/8"}, // not loopback: refused
		stage:     StageTransportStart,
		errorType: "_OTHER",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			p := tc.policy(t)
			// Long enough for the fixture to start and answer what it does
			// answer on a loaded machine: the stage is where the stall is.
			p.ConnectionTimeout, p.FailOnStartupError = 2*time.Second, true
			tp, exp := spanRecorder(t)
			s, _ := startSupervisor(t, p, withTracing(tp), func(o *Options) {
				if tc.egress != nil {
					o.Egress = loopbackEgress(t, tc.egress...)
				}
			})
			sn := waitFor(t, s, "failed", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseFailed })
			connect := waitSpans(t, exp, spanConnect, 1)
			g.Expect(connect).To(HaveLen(1))
			a := attrs(connect[0])
			g.Expect(a).To(And(HaveKeyWithValue("mcpbridge.outcome", "error"), HaveKeyWithValue("mcpbridge.stage", tc.stage),
				HaveKeyWithValue("error.type", tc.errorType), HaveKeyWithValue("mcpbridge.generation", "1")))
			g.Expect(connect[0].Status.Code).To(Equal(codes.Error))
			g.Expect(connect[0].Status.Description).To(Equal(sn.LastError.Message()), "the status says what status lastError says")
			syncs := spansNamed(exp, spanSync)
			if !tc.syncFail {
				g.Expect(syncs).To(BeEmpty())
				return
			}
			g.Expect(syncs).To(HaveLen(1))
			g.Expect(isChildOf(syncs[0], connect[0].SpanContext)).To(BeTrue())
			g.Expect(attrs(syncs[0])).To(And(HaveKeyWithValue("mcpbridge.outcome", "error"),
				HaveKeyWithValue("mcpbridge.stage", tc.stage), HaveKeyWithValue("error.type", tc.errorType)))
		})
	}
}

// TestTracingResync: a re-sync on list_changed is a trace of its own.
func TestTracingResync(t *testing.T) {
	g := NewWithT(t)
	tp, exp := spanRecorder(t)
	s, _ := startSupervisor(t, stdioPolicy("--list-changed-after", "300ms"), withTracing(tp))
	waitFor(t, s, "the late tool", func(sn Snapshot) bool { return len(sn.Tools) == len(fixture.BuiltinTools)+1 })
	syncs := waitSpans(t, exp, spanSync, 2)
	g.Expect(syncs).To(HaveLen(2))
	re := syncs[1]
	g.Expect(re.Parent.IsValid()).To(BeFalse())
	g.Expect(attrs(re)).To(And(HaveKeyWithValue("mcpbridge.sync.trigger", "list_changed"),
		HaveKeyWithValue("mcpbridge.outcome", "success"),
		HaveKeyWithValue("mcpbridge.tools.fetched", strconv.Itoa(len(fixture.BuiltinTools)+1))))
}

// TestTracingCallFailures: the outcome and error.type of calls that fail,
// and a span for a call no generation took.
func TestTracingCallFailures(t *testing.T) {
	g := NewWithT(t)
	up := httpServe(t, httpFixture(t, fixture.Options{}))
	tp, exp := spanRecorder(t)
	p := httpPolicy(up.URL())
	p.ToolCallTimeout = 200 * time.Millisecond
	s, _ := startSupervisor(t, p, withTracing(tp))
	waitFor(t, s, "ready", isReady)
	ctx := httpCtx(t)

	_, isError, err := s.CallToolJSON(ctx, fixture.ToolFail, json.RawMessage(`{"text":"no"}`))
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(isError).To(BeTrue())
	_, _, err = s.CallToolJSON(ctx, fixture.ToolSleep, json.RawMessage(`{"ms":5000}`))
	g.Expect(err).To(MatchError(ContainSubstring("timed out after 200ms")))
	_, _, err = s.CallToolJSON(ctx, "no_such_tool", nil)
	g.Expect(err).To(HaveOccurred())

	for _, tc := range []struct{ name, outcome, errorType, status string }{
		{"tools/call fail", "tool_error", "tool_error", "The tool reported an error"},
		{"tools/call sleep", "error", "timeout", "The tool call timed out"},
		{"tools/call no_such_tool", "error", "-32602", "The server answered with JSON-RPC error -32602"},
	} {
		sp := waitSpans(t, exp, tc.name, 1)[0]
		g.Expect(attrs(sp)).To(And(HaveKeyWithValue("mcpbridge.outcome", tc.outcome),
			HaveKeyWithValue("error.type", tc.errorType)), tc.name)
		g.Expect(sp.Status).To(Equal(sdktrace.Status{Code: codes.Error, Description: tc.status}), tc.name)
	}

	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g.Expect(s.Dispose(dctx)).To(Succeed())
	_, _, err = s.CallToolJSON(ctx, fixture.ToolEcho, nil)
	g.Expect(err).To(MatchError(ErrUnavailable))
	sp := waitSpans(t, exp, "tools/call echo", 1)[0]
	g.Expect(attrs(sp)).To(And(HaveKeyWithValue("mcpbridge.outcome", "unavailable"),
		HaveKeyWithValue("error.type", "unavailable"), Not(HaveKey("mcpbridge.generation"))))
}

// TestTracingNoSecrets: a Secret's header value, a key in the URL, the
// arguments and the results never reach a span, whatever the call's fate.
func TestTracingNoSecrets(t *testing.T) {
	g := NewWithT(t)
	const secret = "s3cr3t"
	up := httpServe(t, httpFixture(t, fixture.Options{}))
	tp, exp := spanRecorder(t)
	p := httpPolicy(up.URL() + "?key=" + secret + "-url")
	p.HTTP.Headers = []policy.Header{{Name: "Authorization", Value: "Bearer " + secret + "-header"}}
	s, _ := startSupervisor(t, p, withTracing(tp))
	waitFor(t, s, "ready", isReady)
	ctx, root := tp.Tracer("agent").Start(httpCtx(t), "agent")
	args := json.RawMessage(`{"text":"` + secret + `-argument"}`)
	for _, tool := range []string{fixture.ToolEcho, fixture.ToolFail, fixture.ToolStructured, "no_such_tool"} {
		_, _, _ = s.CallToolJSON(ctx, tool, args)
		_, _ = s.CallTool(ctx, tool, map[string]any{"text": secret + "-argument"})
	}
	// A server whose JSON-RPC error quotes the arguments.
	up.setIntercept(func(w http.ResponseWriter, r httpRecord) bool {
		if r.RPCMethod != "tools/call" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32602,"message":"bad text %s-argument"}}`, r.RPCID, secret)
		return true
	})
	_, _, err := s.CallToolJSON(ctx, fixture.ToolEcho, args)
	g.Expect(err).To(MatchError(ContainSubstring(secret + "-argument")))
	_, err = s.CallTool(ctx, fixture.ToolEcho, map[string]any{"text": secret + "-argument"})
	g.Expect(err).To(MatchError(ContainSubstring(secret + "-argument")))
	root.End()
	waitSpans(t, exp, "tools/call no_such_tool", 2)
	g.Expect(waitSpans(t, exp, "tools/call echo", 4)).To(HaveLen(4))

	call, ok := up.lastCall("tools/call")
	g.Expect(ok).To(BeTrue())
	g.Expect(call.Header.Get("Authorization")).To(ContainSubstring(secret), "the secret header was sent")
	u, err := url.Parse(p.HTTP.URL)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(u.Query().Get("key")).To(ContainSubstring(secret))
	for _, sp := range exp.GetSpans() {
		if sp.Name == "agent" {
			continue
		}
		b, err := json.Marshal(sp)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(b)+fmt.Sprintf("%+v", sp)).NotTo(ContainSubstring(secret), "span %q", sp.Name)
	}
}

// TestTracingOff: without a provider, or with the no-op one the manager
// uses when no exporter is configured, nothing reaches the upstream and the
// instrumentation allocates nothing.
func TestTracingOff(t *testing.T) {
	for name, tp := range map[string]trace.TracerProvider{"nil": nil, "noop": noop.NewTracerProvider()} {
		t.Run(name, func(t *testing.T) {
			g := NewWithT(t)
			up := httpServe(t, httpFixture(t, fixture.Options{}))
			s, _ := startSupervisor(t, httpPolicy(up.URL()), withTracing(tp))
			waitFor(t, s, "ready", isReady)
			g.Expect(s.tracer.On()).To(BeFalse())
			httpEcho(t, s, "a")
			_, _, err := s.CallToolJSON(httpCtx(t), fixture.ToolEcho, json.RawMessage(`{"text":"b"}`))
			g.Expect(err).NotTo(HaveOccurred())
			for _, r := range up.requests() {
				g.Expect(r.Header.Get("Traceparent")).To(BeEmpty())
				g.Expect(r.MetaTraceparent).To(BeEmpty())
			}
			ctx := context.Background()
			allocs := testing.AllocsPerRun(100, func() {
				cctx, span := s.startCall(ctx, "echo")
				endCall(span, nil, "success", nil)
				_, span = s.startSync(cctx, nil)
				s.endSync(span, 0, "", nil)
			})
			g.Expect(allocs).To(BeZero())
		})
	}
}
