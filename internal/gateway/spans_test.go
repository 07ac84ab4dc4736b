package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr/testr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	"go.opentelemetry.io/otel/codes"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/bridge"
	"github.com/mcpbridge/operator/internal/egress"
	"github.com/mcpbridge/operator/internal/kubeauth"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/test/fixture"
)

// The tests of the gateway's spans (spans.go): real go-sdk agents and
// hand-made requests, a real gateway, a real supervisor and the in-repo
// fixture as a Streamable HTTP upstream, every span exported at once to
// the SDK's in-memory exporter. The supervisor's own spans and stdio's
// params._meta are internal/bridge's tests (spans_test.go there).

// upstreamRecord is what the upstream received of one POSTed message.
type upstreamRecord struct {
	method, header, meta string // JSON-RPC method, traceparent header, params._meta.traceparent
}

// recordingUpstream is the fixture behind a handler that keeps, for each
// POSTed message, its method and trace context.
type recordingUpstream struct {
	next http.Handler
	mu   sync.Mutex
	recs []upstreamRecord
}

func (u *recordingUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method == http.MethodPost {
		b, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(b))
		var m struct {
			Method string
			Params struct {
				Meta struct {
					Traceparent string `json:"traceparent"`
				} `json:"_meta"`
			}
		}
		_ = json.Unmarshal(b, &m)
		u.mu.Lock()
		u.recs = append(u.recs, upstreamRecord{m.Method, r.Header.Get("Traceparent"), m.Params.Meta.Traceparent})
		u.mu.Unlock()
	}
	u.next.ServeHTTP(w, r)
}

func (u *recordingUpstream) calls() []upstreamRecord {
	u.mu.Lock()
	defer u.mu.Unlock()
	var out []upstreamRecord
	for _, r := range u.recs {
		if r.method == "tools/call" {
			out = append(out, r)
		}
	}
	return out
}

// tracedEnv is a gateway whose one McpServer (fx) is a supervisor of the
// HTTP fixture, both traced to exp when tp is not nil.
type tracedEnv struct {
	t        *testing.T
	g        *Gateway
	upstream *recordingUpstream
	url      string
	hc       *http.Client
	// agentHeader, if set, is the traceparent the agents' HTTP client sends.
	agentHeader string
	token       string
	mu          sync.Mutex
}

// fxEcho is the public name of the fixture's echo tool.
var fxEcho = registry.PublicName("fx", fixture.ToolEcho)

func newTracedEnv(t *testing.T, tp trace.TracerProvider, auth *Access) *tracedEnv {
	t.Helper()
	return newUpstreamEnv(t, upstreamOptions{tracing: tp, auth: auth})
}

// upstreamOptions are those of a gateway in front of the real fixture.
type upstreamOptions struct {
	tracing trace.TracerProvider
	auth    *Access
	budgets Budgets
	fixture fixture.Options
}

// newUpstreamEnv is newTracedEnv with the fixture's options and the
// gateway's budgets.
func newUpstreamEnv(t *testing.T, o upstreamOptions) *tracedEnv {
	t.Helper()
	tp := o.tracing
	fx, err := fixture.NewHTTPHandler(o.fixture)
	if err != nil {
		t.Fatal(err)
	}
	up := &recordingUpstream{next: fx}
	upSrv := httptest.NewServer(up)
	reg := registry.New()
	sup := bridge.New(bridge.Options{Namespace: testNS, Name: "fx", Registry: reg, Log: testr.New(t), TracerProvider: tp,
		Egress: egress.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}),
		Policy: &policy.Policy{ServerName: "fx", Transport: v1alpha1.TransportStreamableHTTP, HTTP: &policy.HTTP{URL: upSrv.URL + "/mcp"},
			ToolCallTimeout: 10 * time.Second, ConnectionTimeout: 10 * time.Second,
			Reconnect: policy.Reconnect{Enabled: true, InitialDelay: 20 * time.Millisecond, MaxDelay: 200 * time.Millisecond, MaxAttempts: 5}}})
	ctx, cancel := context.WithCancel(context.Background())
	sup.Start(ctx)
	g := &Gateway{Registry: reg, Auth: o.auth, Log: testr.New(t), TracerProvider: tp, Budgets: o.budgets}
	srv := httptest.NewServer(g.Handler())
	started := make(chan struct{})
	go func() {
		defer close(started)
		_ = g.Start(ctx)
	}()
	env := &tracedEnv{t: t, g: g, upstream: up, url: srv.URL + "/namespaces/" + testNS + "/mcp"}
	env.hc = &http.Client{Transport: headerTransport{env: env, next: &http.Transport{}}}
	t.Cleanup(func() {
		cancel()
		<-started
		srv.CloseClientConnections()
		srv.Close()
		env.hc.CloseIdleConnections()
		dctx, dcancel := context.WithTimeout(context.Background(), waitLimit)
		defer dcancel()
		_ = sup.Dispose(dctx)
		upSrv.CloseClientConnections()
		upSrv.Close()
		_ = fx.Close()
	})
	waitFor(t, "the fixture's tools published", func() bool {
		_, _, ok := reg.Lookup(testNS, fxEcho)
		return ok
	})
	return env
}

// headerTransport sends the env's agent traceparent and bearer token.
type headerTransport struct {
	env  *tracedEnv
	next *http.Transport
}

func (h headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	h.env.mu.Lock()
	tp, token := h.env.agentHeader, h.env.token
	h.env.mu.Unlock()
	r = r.Clone(r.Context())
	if tp != "" {
		r.Header.Set("Traceparent", tp)
	}
	if token != "" {
		r.Header.Set("Authorization", "Bearer "+token)
	}
	return h.next.RoundTrip(r)
}

func (h headerTransport) CloseIdleConnections() { h.next.CloseIdleConnections() }

func (e *tracedEnv) set(agentHeader, token string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.agentHeader, e.token = agentHeader, token
}

func (e *tracedEnv) agent(proto string) *mcp.ClientSession {
	e.t.Helper()
	return connectAgent(e.t, e.url, e.hc, proto)
}

// post sends a hand-made message with the agent's headers.
func (e *tracedEnv) post(body string, header map[string]string) (int, string) {
	e.t.Helper()
	req, err := http.NewRequest(http.MethodPost, e.url, strings.NewReader(body))
	if err != nil {
		e.t.Fatal(err)
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func spanRecorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

func traceparentOf(sc trace.SpanContext) string {
	return fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())
}

func spanAttrs(s tracetest.SpanStub) map[string]string {
	m := map[string]string{}
	for _, kv := range s.Attributes {
		m[string(kv.Key)] = kv.Value.Emit()
	}
	return m
}

// spanWith is the one exported span that cond picks, once it has ended.
func spanWith(t *testing.T, exp *tracetest.InMemoryExporter, what string, cond func(tracetest.SpanStub) bool) tracetest.SpanStub {
	t.Helper()
	var found []tracetest.SpanStub
	NewWithT(t).Eventually(func() int {
		found = found[:0]
		for _, s := range exp.GetSpans() {
			if cond(s) {
				found = append(found, s)
			}
		}
		return len(found)
	}, waitLimit, 5*time.Millisecond).Should(Equal(1), "spans: %s", what)
	return found[0]
}

func childOf(parent tracetest.SpanStub) func(tracetest.SpanStub) bool {
	return func(s tracetest.SpanStub) bool { return s.Parent.SpanID() == parent.SpanContext.SpanID() }
}

func named(name string, and func(tracetest.SpanStub) bool) func(tracetest.SpanStub) bool {
	return func(s tracetest.SpanStub) bool { return s.Name == name && and(s) }
}

// TestTracingFollowsACallFromTheAgentToTheUpstream: one trace from the
// agent's traceparent header through the gateway's request span, its
// tools/call span, the supervisor's call and the HTTP request that
// carried it upstream, for both protocols. On the SDK's path each is a span;
// on the fast path the request span is the tools/call span and the
// supervisor's call is the upstream request's. The upstream sees the span
// of its request in its traceparent header and the supervisor's call in
// params._meta.
func TestTracingFollowsACallFromTheAgentToTheUpstream(t *testing.T) {
	tp, exp := spanRecorder(t)
	env := newTracedEnv(t, tp, nil)
	for _, proto := range []string{statefulProto, sessionlessProto} {
		for _, path := range []string{"fast", "sdk"} {
			t.Run(proto+"/"+path, func(t *testing.T) {
				g := NewWithT(t)
				_, agentSpan := tp.Tracer("agent").Start(context.Background(), "agent "+proto+" "+path)
				agentSpan.End()
				env.set(traceparentOf(agentSpan.SpanContext()), "")
				defer env.set("", "")
				cs := env.agent(proto)
				before := len(env.upstream.calls())
				if path == "fast" {
					res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: fxEcho, Arguments: map[string]any{"text": "hi"}})
					g.Expect(err).NotTo(HaveOccurred())
					g.Expect(res.IsError).To(BeFalse())
				} else {
					// The fast path leaves an id it would not echo as
					// written (7.0) to the SDK, which serves the call.
					body, header := statefulCall(7, fxEcho, `{"text":"hi"}`, cs.ID())
					if proto == sessionlessProto {
						body, header = sessionlessCall(7, fxEcho, `{"text":"hi"}`)
					}
					code, answer := env.post(strings.Replace(body, `"id":7`, `"id":7.0`, 1), header)
					g.Expect(code).To(Equal(http.StatusOK), answer)
					g.Expect(answer).To(ContainSubstring(`"text":"hi"`))
				}

				agent := agentSpan.SpanContext()
				httpAttrs := map[string]string{"http.request.method": "POST", "http.route": route,
					"network.protocol.name": "http", "network.protocol.version": "1.1", "network.transport": "tcp",
					"mcpbridge.namespace": testNS, "http.response.status_code": "200"}
				want := map[string]string{"mcp.method.name": "tools/call", "gen_ai.operation.name": "execute_tool",
					"gen_ai.tool.name": fxEcho, "mcpbridge.namespace": testNS, "network.transport": "tcp", "network.protocol.name": "http",
					"mcp.protocol.version": proto, "mcpbridge.mcpserver": "fx", "mcpbridge.server_name": "fx", "mcpbridge.outcome": "success"}
				var call, sup, upstreamSpan tracetest.SpanStub
				if path == "fast" {
					// One POST, one message: the request's SERVER span is
					// the tools/call span, and the supervisor's call is
					// the span the upstream's request names.
					call = spanWith(t, exp, "the gateway's tools/call span", named("tools/call "+fxEcho, func(s tracetest.SpanStub) bool {
						return s.Parent.SpanID() == agent.SpanID()
					}))
					g.Expect(call.SpanKind).To(Equal(trace.SpanKindServer))
					maps.Copy(want, httpAttrs)
					want["jsonrpc.request.id"] = spanAttrs(call)["jsonrpc.request.id"]
					g.Expect(want["jsonrpc.request.id"]).NotTo(BeEmpty())
					sup = spanWith(t, exp, "the supervisor's call", named("tools/call echo", childOf(call)))
					g.Expect(spanAttrs(sup)).To(HaveKeyWithValue("http.request.method", "POST"))
					g.Expect(spanAttrs(sup)).To(HaveKeyWithValue("http.response.status_code", "200"))
					g.Expect(hasChild(exp, sup, "POST")).To(BeFalse(), "the call's span is the request's")
					upstreamSpan = sup
				} else {
					request := spanWith(t, exp, "the request span of the call", func(s tracetest.SpanStub) bool {
						return s.Name == spanRequest && s.Parent.SpanID() == agent.SpanID() && spanAttrs(s)["mcpbridge.outcome"] == "" &&
							hasChild(exp, s, "tools/call "+fxEcho)
					})
					g.Expect(request.SpanKind).To(Equal(trace.SpanKindServer))
					g.Expect(spanAttrs(request)).To(Equal(httpAttrs))
					call = spanWith(t, exp, "the gateway's tools/call span", named("tools/call "+fxEcho, childOf(request)))
					sup = spanWith(t, exp, "the supervisor's call", named("tools/call echo", childOf(call)))
					upstreamSpan = spanWith(t, exp, "the upstream request", named("POST", childOf(sup)))
					g.Expect(upstreamSpan.SpanKind).To(Equal(trace.SpanKindClient))
				}
				g.Expect(spanAttrs(call)).To(Equal(want))
				g.Expect(call.Status.Code).To(Equal(codes.Unset))
				g.Expect(sup.SpanKind).To(Equal(trace.SpanKindClient))
				for _, s := range []tracetest.SpanStub{call, sup, upstreamSpan} {
					g.Expect(s.SpanContext.TraceID()).To(Equal(agent.TraceID()), "one trace: %s", s.Name)
				}

				calls := env.upstream.calls()
				g.Expect(calls).To(HaveLen(before + 1))
				g.Expect(calls[before]).To(Equal(upstreamRecord{method: "tools/call",
					header: traceparentOf(upstreamSpan.SpanContext), meta: traceparentOf(sup.SpanContext)}))
			})
		}
	}
}

// hasChild: one of s's children is called name.
func hasChild(exp *tracetest.InMemoryExporter, s tracetest.SpanStub, name string) bool {
	for _, c := range exp.GetSpans() {
		if c.Name == name && c.Parent.SpanID() == s.SpanContext.SpanID() {
			return true
		}
	}
	return false
}

// TestTracingContinuesAnAgentTraceFromParamsMeta: an agent that passes its
// trace context the MCP way, in params._meta and not as a header, has its
// trace continued from the tools/call span on, which links the request
// span; a header and _meta of one trace keep one span for both, the
// request's.
func TestTracingContinuesAnAgentTraceFromParamsMeta(t *testing.T) {
	g := NewWithT(t)
	tp, exp := spanRecorder(t)
	env := newTracedEnv(t, tp, nil)
	_, agentSpan := tp.Tracer("agent").Start(context.Background(), "agent")
	agentSpan.End()
	agent := agentSpan.SpanContext()
	body, header := sessionlessCall(3, fxEcho, `{"text":"meta"}`)
	body = strings.Replace(body, `"_meta":{`, `"_meta":{"traceparent":"`+traceparentOf(agent)+`",`, 1)
	code, answer := env.post(body, header)
	g.Expect(code).To(Equal(http.StatusOK), answer)

	call := spanWith(t, exp, "the gateway's tools/call span", named("tools/call "+fxEcho, func(s tracetest.SpanStub) bool {
		return s.Parent.SpanID() == agent.SpanID()
	}))
	g.Expect(call.SpanContext.TraceID()).To(Equal(agent.TraceID()))
	g.Expect(call.Links).To(HaveLen(1))
	request := spanWith(t, exp, "the request span", func(s tracetest.SpanStub) bool {
		return s.Name == spanRequest && s.SpanContext.SpanID() == call.Links[0].SpanContext.SpanID()
	})
	g.Expect(request.Parent.IsValid()).To(BeFalse(), "without a header the request is a trace of its own")
	sup := spanWith(t, exp, "the supervisor's call", named("tools/call echo", childOf(call)))
	g.Expect(sup.SpanContext.TraceID()).To(Equal(agent.TraceID()))

	// Header and _meta of the same trace: the request span stays the parent.
	env.set(traceparentOf(agent), "")
	body = strings.Replace(body, `"id":3`, `"id":4`, 1)
	code, answer = env.post(body, header)
	g.Expect(code).To(Equal(http.StatusOK), answer)
	// On the fast path the request span is the tools/call span.
	second := spanWith(t, exp, "the second tools/call span", named("tools/call "+fxEcho, func(s tracetest.SpanStub) bool {
		return s.Parent.SpanID() == agent.SpanID() && s.SpanKind == trace.SpanKindServer
	}))
	g.Expect(spanAttrs(second)).To(HaveKeyWithValue("http.route", route))
	g.Expect(second.Links).To(BeEmpty())
	g.Expect(second.SpanContext.TraceID()).To(Equal(agent.TraceID()))
}

// testAccess authenticates every token (its user is named after it) and
// lets it use the McpServer fx by name (reviewer, access_bench_test.go):
// the decisions are not under test here, what the spans record of them is.
func testAccess() *Access {
	o := kubeauth.Options{Audiences: []string{"mcpbridge.dev"}}
	servers := func(context.Context, string) ([]string, error) { return []string{"fx", "zz"}, nil }
	return NewAccess(kubeauth.NewAuthenticator(reviewer{}, o), kubeauth.NewAuthorizer(reviewer{}, o), servers, o)
}

// TestTracingRecordsRefusalsAndFailures: a refused request's span says why
// and with which status; a call of an unknown tool, of a tool of a server
// the caller may not use, and a tool's own error are failed spans whose
// error.type classifies them.
func TestTracingRecordsRefusalsAndFailures(t *testing.T) {
	g := NewWithT(t)
	tp, exp := spanRecorder(t)
	env := newTracedEnv(t, tp, testAccess())

	// A refused caller's sampled traceparent is not followed: the refusal
	// is a trace of its own, dated from the request's arrival.
	outsider := "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
	env.set(outsider, "")
	sent := time.Now()
	code, _ := env.post(initializeBody, nil)
	g.Expect(code).To(Equal(http.StatusUnauthorized))
	refused := spanWith(t, exp, "the refused request", func(s tracetest.SpanStub) bool {
		return s.Name == spanRequest && spanAttrs(s)["mcpbridge.outcome"] == "unauthorized"
	})
	g.Expect(spanAttrs(refused)).To(HaveKeyWithValue("http.response.status_code", "401"))
	g.Expect(refused.Status.Code).To(Equal(codes.Unset), "a 4xx is the client's error, not the server's")
	g.Expect(refused.Parent.IsValid()).To(BeFalse(), "a refused request continues no trace of the caller's")
	g.Expect(refused.SpanContext.TraceID().String()).NotTo(Equal("0af7651916cd43dd8448eb211c80319c"))
	g.Expect(refused.StartTime).To(BeTemporally(">=", sent))
	g.Expect(refused.StartTime).To(BeTemporally("<", refused.EndTime))
	env.set("", "")

	env.set("", agentToken("narrow-agent"))
	cs := env.agent(sessionlessProto)
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: registry.PublicName("fx", fixture.ToolFail),
		Arguments: map[string]any{"text": "no"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(res.IsError).To(BeTrue())
	_, err = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "mcp__zz__nothing"})
	g.Expect(err).To(HaveOccurred())

	// A method a client invents does not name a span.
	req, err := http.NewRequest("BREW", env.url, nil)
	g.Expect(err).NotTo(HaveOccurred())
	resp, err := env.hc.Do(req)
	g.Expect(err).NotTo(HaveOccurred())
	resp.Body.Close()
	brew := spanWith(t, exp, "the BREW request", named("_OTHER "+route, func(tracetest.SpanStub) bool { return true }))
	g.Expect(spanAttrs(brew)).To(And(HaveKeyWithValue("http.request.method", "_OTHER"),
		HaveKeyWithValue("http.response.status_code", strconv.Itoa(resp.StatusCode))))

	for _, tc := range []struct{ name, outcome, errorType, status string }{
		{"tools/call " + registry.PublicName("fx", fixture.ToolFail), "tool_error", "tool_error", "The tool reported an error"},
		{"tools/call mcp__zz__nothing", "unknown_tool", "-32602", "Unknown tool"},
	} {
		s := spanWith(t, exp, tc.name, named(tc.name, func(tracetest.SpanStub) bool { return true }))
		g.Expect(spanAttrs(s)).To(And(HaveKeyWithValue("mcpbridge.outcome", tc.outcome), HaveKeyWithValue("error.type", tc.errorType)), tc.name)
		g.Expect(s.Status).To(Equal(sdktrace.Status{Code: codes.Error, Description: tc.status}), tc.name)
	}
}

const initializeBody = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-11-25","capabilities":{},"clientInfo":{"name":"raw","version":"0"}}}`

// TestTracingNeverRecordsTokensArgumentsOrResults: the bearer token, a
// secret-looking argument and what the tool answers with it appear in no
// attribute, event, link or status of any span, on either path, answered
// or refused.
func TestTracingNeverRecordsTokensArgumentsOrResults(t *testing.T) {
	g := NewWithT(t)
	const secret = "sk-live-4f9a1c0b7e2d"
	tp, exp := spanRecorder(t)
	env := newTracedEnv(t, tp, testAccess())
	env.set("", agentToken("token")+secret) // the secret ends the signature
	for _, proto := range []string{statefulProto, sessionlessProto} {
		cs := env.agent(proto)
		for _, tool := range []string{fixture.ToolEcho, fixture.ToolFail, "nothing"} {
			_, _ = cs.CallTool(context.Background(), &mcp.CallToolParams{Name: registry.PublicName("fx", tool),
				Arguments: map[string]any{"text": "password=" + secret}})
		}
		body, header := statefulCall(9, fxEcho, `{"text":"`+secret+`"}`, cs.ID())
		if proto == sessionlessProto {
			body, header = sessionlessCall(9, fxEcho, `{"text":"`+secret+`"}`)
		}
		code, answer := env.post(strings.Replace(body, `"id":9`, `"id":9.0`, 1), header) // the SDK's path
		g.Expect(code).To(Equal(http.StatusOK))
		g.Expect(answer).To(ContainSubstring(secret), "the tool answered with the secret")
	}
	env.set("", "") // a refused request carries no token, so one with a bad scheme
	code, _ := env.post(initializeBody, map[string]string{"Authorization": "Basic " + secret})
	g.Expect(code).To(Equal(http.StatusUnauthorized))

	spanWith(t, exp, "the last SDK-path call", named("tools/call "+fxEcho, func(s tracetest.SpanStub) bool {
		return spanAttrs(s)["mcp.protocol.version"] == sessionlessProto && spanAttrs(s)["jsonrpc.request.id"] == ""
	}))
	g.Expect(len(exp.GetSpans())).To(BeNumerically(">", 20))
	for _, s := range exp.GetSpans() {
		b, err := json.Marshal(s)
		g.Expect(err).NotTo(HaveOccurred())
		g.Expect(string(b)+fmt.Sprintf("%+v", s)).NotTo(ContainSubstring(secret), "span %q", s.Name)
	}
}

// TestTracingOffGateway: without a tracer provider nothing is recorded or
// propagated, and an agent's traceparent is not passed upstream.
func TestTracingOffGateway(t *testing.T) {
	g := NewWithT(t)
	env := newTracedEnv(t, nil, nil)
	env.set("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "")
	cs := env.agent(statefulProto)
	_, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: fxEcho, Arguments: map[string]any{"text": "off"}})
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(env.upstream.calls()).To(HaveLen(1))
	g.Expect(env.upstream.calls()[0]).To(Equal(upstreamRecord{method: "tools/call"}))
}
