package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/tracing"
)

// The gateway's spans: one SERVER span per HTTP request to an endpoint
// (spanRequest, refusals included, in a trace of their own: requestTrace), and inside it one span per MCP message
// the SDK answers ("tools/call <public name>", "tools/list", ...). A
// tools/call the fast path answers is the request span itself, renamed
// (startFastMethod). A tools/call span is the parent of the supervisor's
// call. Each checks whether the tracer is on before it builds
// an attribute, so that tracing off costs a branch. The bearer token, the
// session id, the arguments and the result are never recorded.
// See docs/design.md, "Tracing".

// spanRequest names the span of an HTTP request, after its route.
const spanRequest = "POST /namespaces/{namespace}/mcp"

const route = "/namespaces/{namespace}/mcp"

// requestTrace is the tracing of one HTTP request to the gateway. Its span
// starts, dated from the request's arrival, once the gateway knows whether
// it serves the caller: a request it serves continues the agent's
// traceparent header (served); one it refuses is a trace of its own (end),
// so that a caller turned away neither decides whether it is sampled (a
// ratio sampler follows a sampled parent) nor adds spans to a trace of its
// choosing. See docs/design.md, "Tracing".
type requestTrace struct {
	g       *Gateway
	r       *http.Request
	ns      string
	arrival time.Time
	w       answerWriter
	span    trace.Span // nil until started
	outcome string     // why the request was refused
}

func (g *Gateway) traceRequest(w http.ResponseWriter, r *http.Request, ns string) *requestTrace {
	rt := &requestTrace{g: g, r: r, ns: ns, arrival: time.Now()}
	rt.w.ResponseWriter = w
	return rt
}

// served starts the span of a request the gateway serves, a child of the
// agent's traceparent header if it sent one, and returns ctx with it.
func (rt *requestTrace) served(ctx context.Context) context.Context {
	if rt == nil {
		return ctx
	}
	ctx, rt.span = rt.start(rt.g.tracer.Extract(ctx, rt.r.Header, nil))
	return ctx
}

func (rt *requestTrace) start(ctx context.Context) (context.Context, trace.Span) {
	method, name := knownMethod(rt.r.Method)
	return rt.g.tracer.StartAt(ctx, rt.arrival, name, trace.SpanKindServer,
		semconv.HTTPRequestMethodKey.String(method), semconv.HTTPRoute(route),
		semconv.NetworkProtocolName("http"), semconv.NetworkProtocolVersion(protocolVersion(rt.r)),
		semconv.NetworkTransportTCP, tracing.Namespace.String(rt.ns))
}

// refuse counts a request turned away before MCP saw it, and keeps why for
// its span; rt is nil with tracing off.
func (rt *requestTrace) refuse(outcome string) {
	refused(outcome)
	if rt != nil {
		rt.outcome = outcome
	}
}

// end ends the request's span with the status it was answered with, and
// why it was refused; a refused request's span starts here, in a trace of
// its own.
func (rt *requestTrace) end() {
	if rt.span == nil {
		_, rt.span = rt.start(trace.ContextWithSpanContext(rt.r.Context(), trace.SpanContext{}))
	}
	if rt.outcome != "" {
		tracing.SetAttributes(rt.span, tracing.Outcome.String(rt.outcome))
	}
	endRequest(rt.span, &rt.w)
}

// knownMethod is an HTTP method MCP uses, or _OTHER: a span name must not
// take whatever method a client invents. name is the span's.
func knownMethod(m string) (method, name string) {
	switch m {
	case http.MethodPost:
		return m, http.MethodPost + " " + route
	case http.MethodGet:
		return m, http.MethodGet + " " + route
	case http.MethodDelete:
		return m, http.MethodDelete + " " + route
	}
	return "_OTHER", "_OTHER " + route
}

// forSDK puts the request span's trace context in the traceparent header,
// in place of the agent's, before the SDK serves r: it hands a handler the
// headers but not the context of the request that carried a message, and
// so the method span finds its parent there (methodParent). The fast path
// has the context and needs no header.
func forSDK(r *http.Request) {
	tracing.InjectHeader(r.Context(), r.Header)
}

func protocolVersion(r *http.Request) string {
	if r.ProtoMajor == 2 {
		return "2"
	}
	return strconv.Itoa(r.ProtoMajor) + "." + strconv.Itoa(r.ProtoMinor)
}

// endRequest records the status the request was answered with; a 5xx
// fails the span, as OpenTelemetry's HTTP conventions have it for servers.
func endRequest(span trace.Span, w *answerWriter) {
	status := w.status
	if status == 0 {
		status = http.StatusOK
	}
	tracing.SetAttributes(span, semconv.HTTPResponseStatusCode(status))
	if status >= 500 {
		tracing.Fail(span, strconv.Itoa(status), http.StatusText(status))
	}
	span.End()
}

// methodParent is the context a method span starts from, and its links.
// On the fast path ctx is the request's own; the SDK hands a handler the
// context its session was created with, so the request's span is found
// again in the traceparent header that forSDK rewrote. The agent's
// params._meta.traceparent, MCP's own propagation, becomes the parent when
// it names another trace than the request's (the agent sent no header, or
// an unrelated one), and the request span is linked: the agent's trace
// continues either way.
func (v *view) methodParent(ctx context.Context, h http.Header, meta tracing.MetaGetter) (context.Context, []trace.Link) {
	if h != nil { // the SDK's path
		ctx = v.e.tracer.Extract(trace.ContextWithSpanContext(ctx, trace.SpanContext{}), h, nil)
	}
	if meta == nil || meta.Get(tracing.TraceparentKey) == "" {
		return ctx, nil
	}
	agent := trace.SpanContextFromContext(v.e.tracer.Extract(context.Background(), nil, meta))
	request := trace.SpanContextFromContext(ctx)
	if !agent.IsValid() || agent.TraceID() == request.TraceID() {
		return ctx, nil
	}
	var links []trace.Link
	if request.IsValid() {
		links = []trace.Link{{SpanContext: request}}
	}
	return trace.ContextWithRemoteSpanContext(ctx, agent), links
}

// startMethod starts the span of one MCP message, a child of methodParent's
// context. id is the JSON-RPC id as the agent wrote it (nil for a
// notification); tool is the public name of a tools/call's tool.
func (v *view) startMethod(ctx context.Context, h http.Header, meta tracing.MetaGetter, method, tool string, id json.RawMessage) (context.Context, trace.Span) {
	if !v.e.tracer.On() {
		return v.e.tracer.Start(ctx, method, trace.SpanKindInternal)
	}
	ctx, links := v.methodParent(ctx, h, meta)
	method, tool = cut(method), cut(tool) // the agent's choice
	name := method
	attrs := make([]attribute.KeyValue, 0, 7)
	attrs = append(attrs, semconv.McpMethodNameKey.String(method), tracing.Namespace.String(v.e.ns),
		semconv.NetworkTransportTCP, semconv.NetworkProtocolName("http"))
	if method == "tools/call" {
		name += " " + tool
		attrs = append(attrs, semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(tool))
	}
	if len(id) > 0 {
		attrs = append(attrs, semconv.JSONRPCRequestID(requestID(id)))
	}
	return v.e.tracer.StartLinked(ctx, name, trace.SpanKindInternal, links, attrs...)
}

// startFastMethod starts the span of a tools/call the fast path answers.
// One POST carries that one message, so the request's SERVER span becomes
// the call's span (renamed, with the MCP attributes) instead of getting a
// child: MCP's conventions allow an MCP span without an HTTP span under it,
// and a span costs more than the rest of a traced call. The request span
// ends with the request (endRequest). Only when params._meta names another
// trace than the request's does the call get a span of its own (methodParent).
func (v *view) startFastMethod(ctx context.Context, msg *message) (context.Context, trace.Span) {
	request := trace.SpanFromContext(ctx)
	meta := tracing.RawMeta(msg.Params.Meta)
	if !request.IsRecording() {
		return v.startMethod(ctx, nil, meta, msg.Method, msg.Params.Name, msg.ID)
	}
	if parent, _ := v.methodParent(ctx, nil, meta); !trace.SpanContextFromContext(parent).Equal(request.SpanContext()) {
		return v.startMethod(ctx, nil, meta, msg.Method, msg.Params.Name, msg.ID)
	}
	tool := cut(msg.Params.Name)
	request.SetName(msg.Method + " " + tool)
	tracing.SetAttributes(request, semconv.McpMethodNameKey.String(msg.Method), semconv.GenAIOperationNameExecuteTool,
		semconv.GenAIToolName(tool), semconv.JSONRPCRequestID(requestID(msg.ID)))
	return ctx, tracing.Borrowed(request)
}

// requestID is a JSON-RPC id as a string: a string id unquoted, cut to
// maxAgentString bytes (the agent chose it).
func requestID(id json.RawMessage) string {
	var s string
	if id[0] == '"' && json.Unmarshal(id, &s) == nil {
		return cut(s)
	}
	return cut(string(id))
}

// endMethod ends a method span with the protocol version the agent spoke,
// the McpServer of the tool (when there is one) and the outcome, in the
// audit line's words. A JSON-RPC error is error.type and
// rpc.response.status_code; a tool's own error is error.type tool_error.
// The status description is the gateway's words, never the error's
// message, which may quote the arguments.
func endMethod(span trace.Span, version string, tool registry.Tool, outcome string, err error) {
	if !span.IsRecording() {
		return
	}
	defer span.End()
	attrs := make([]attribute.KeyValue, 0, 6)
	if version != "" {
		attrs = append(attrs, semconv.McpProtocolVersion(version))
	}
	if tool.Owner != "" {
		attrs = append(attrs, tracing.McpServer.String(serverOf(tool)), tracing.ServerName.String(tool.ServerName))
	}
	attrs = append(attrs, tracing.Outcome.String(outcome))
	switch kind := tracing.ErrorType(err); {
	case err != nil:
		if kind != tracing.ErrorTypeOther && kind != "timeout" && kind != "cancelled" {
			attrs = append(attrs, semconv.RPCResponseStatusCode(kind))
		}
		tracing.SetAttributes(span, attrs...)
		tracing.Fail(span, kind, methodFailure(outcome))
	case outcome == "tool_error":
		tracing.SetAttributes(span, attrs...)
		tracing.Fail(span, "tool_error", "The tool reported an error")
	default:
		tracing.SetAttributes(span, attrs...)
	}
}

func methodFailure(outcome string) string {
	switch outcome {
	case "unknown_tool", "denied":
		return "Unknown tool" // what the agent was told, for both
	case "error":
		return "The request failed"
	}
	return "The request was answered with an error"
}

// startSDKMethod starts the span of a message the SDK serves.
func (v *view) startSDKMethod(ctx context.Context, method, tool string, req mcp.Request) (context.Context, trace.Span) {
	if !v.e.tracer.On() {
		return v.e.tracer.Start(ctx, method, trace.SpanKindInternal)
	}
	var h http.Header
	if extra := req.GetExtra(); extra != nil {
		h = extra.Header
	}
	var meta tracing.MetaGetter
	if p := req.GetParams(); p != nil {
		meta = tracing.AnyMeta(p.GetMeta())
	}
	return v.startMethod(ctx, h, meta, method, tool, nil)
}

// sdkVersion is the protocol version a message the SDK serves came with.
func sdkVersion(req mcp.Request) string {
	if extra := req.GetExtra(); extra != nil && extra.Header != nil {
		return extra.Header.Get("Mcp-Protocol-Version")
	}
	return ""
}
