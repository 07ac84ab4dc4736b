package bridge

import (
	"context"
	"errors"
	"net/http"
	"net/url"
	"strconv"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/tracing"
)

// The supervisor's spans: one per connect attempt (mcpbridge.connect), per
// tool sync (mcpbridge.tools.sync, a child of the connect it is part of)
// and per tools/call (a CLIENT span, "tools/call <tool>"), and one CLIENT
// span per HTTP request of those to an upstream, except the POST of a call
// CallToolJSON makes, whose span is the call's (withCallSpan). Each checks
// whether it records before it computes an attribute, so that tracing off
// costs a branch. See docs/design.md, "Tracing".

// Span names of the supervisor.
const (
	spanConnect = "mcpbridge.connect"
	spanSync    = "mcpbridge.tools.sync"
)

// upstreamAttributes are carried by every span of a supervisor: which
// resource, which server, over what. Never a URL (its query may hold a
// key), a header or an environment value.
func upstreamAttributes(ns, name string, p *policy.Policy) []attribute.KeyValue {
	attrs := []attribute.KeyValue{
		tracing.Namespace.String(ns), tracing.McpServer.String(name), tracing.ServerName.String(p.ServerName),
	}
	if p.HTTP == nil {
		return append(attrs, semconv.NetworkTransportPipe)
	}
	attrs = append(attrs, semconv.NetworkTransportTCP, semconv.NetworkProtocolName("http"))
	u, err := url.Parse(p.HTTP.URL)
	if err != nil {
		return attrs
	}
	return append(attrs, semconv.ServerAddress(u.Hostname()), semconv.ServerPort(urlPort(u)))
}

// urlPort is u's port, or its scheme's.
func urlPort(u *url.URL) int {
	if port, _ := strconv.Atoi(u.Port()); port != 0 {
		return port
	}
	if u.Scheme == "https" {
		return 443
	}
	return 80
}

// tracedConnect is connect inside its span; the stage a failed attempt
// failed in is the span's mcpbridge.stage.
func (s *Supervisor) tracedConnect(ctx context.Context, everConnected bool) (*generation, error) {
	if !s.tracer.On() {
		return s.connect(ctx, everConnected)
	}
	ctx, span := s.tracer.Start(ctx, spanConnect, trace.SpanKindInternal, s.traceAttrs...)
	defer span.End()
	g, err := s.connect(ctx, everConnected)
	s.mu.Lock()
	span.SetAttributes(tracing.Generation.Int64(s.snap.Generation))
	s.mu.Unlock()
	var se *StageError
	switch {
	case err == nil:
		span.SetAttributes(tracing.Outcome.String(tracing.OutcomeSuccess),
			semconv.McpProtocolVersion(g.sess.InitializeResult().ProtocolVersion))
	case ctx.Err() != nil:
		span.SetAttributes(tracing.Outcome.String(tracing.OutcomeError))
		tracing.Fail(span, "cancelled", "The supervisor was stopped during the connect")
	case errors.As(err, &se):
		span.SetAttributes(tracing.Outcome.String(tracing.OutcomeError), tracing.Stage.String(se.Stage))
		tracing.Fail(span, connectErrorType(se), se.Message()) // as status lastError.message says it
	default:
		span.SetAttributes(tracing.Outcome.String(tracing.OutcomeError), tracing.Stage.String(StageClose))
		tracing.Fail(span, tracing.ErrorTypeOther, boundError(err).Error())
	}
	return g, err
}

func connectErrorType(err error) string {
	if IsDeadline(err) {
		return "timeout"
	}
	return tracing.ErrorType(err)
}

// startSync starts the span of a tool sync of g: a child of the connect
// that runs it, or a trace of its own for a re-sync on list_changed.
func (s *Supervisor) startSync(ctx context.Context, g *generation) (context.Context, trace.Span) {
	if !s.tracer.On() {
		return s.tracer.Start(ctx, spanSync, trace.SpanKindInternal)
	}
	s.mu.Lock()
	trigger := "connect"
	if s.live == g {
		trigger = "list_changed"
	}
	s.mu.Unlock()
	attrs := append(s.traceAttrs[:len(s.traceAttrs):len(s.traceAttrs)],
		semconv.McpMethodNameToolsList, tracing.Generation.Int64(g.num), tracing.SyncTrigger.String(trigger))
	return s.tracer.Start(ctx, spanSync, trace.SpanKindInternal, attrs...)
}

// endSync ends a sync's span: how many tools were fetched and published,
// whether the swap was refused, or where the fetch failed.
func (s *Supervisor) endSync(span trace.Span, fetched int, stage string, err error) {
	defer span.End()
	if !span.IsRecording() {
		return
	}
	if err != nil {
		span.SetAttributes(tracing.Outcome.String(tracing.OutcomeError), tracing.Stage.String(stage))
		tracing.Fail(span, tracing.ErrorType(err), boundError(err).Error()) // what status lastError.message says
		return
	}
	s.mu.Lock()
	published, conflict := len(s.snap.Tools), s.snap.SyncConflict
	s.mu.Unlock()
	span.SetAttributes(tracing.ToolsFetched.Int(fetched), tracing.ToolsPublished.Int(published))
	if conflict != "" {
		span.SetAttributes(tracing.Outcome.String(tracing.OutcomeConflict))
		tracing.Fail(span, "tool_name_conflict", conflict)
		return
	}
	span.SetAttributes(tracing.Outcome.String(tracing.OutcomeSuccess))
}

// startCall starts the CLIENT span of a tools/call of rawName.
func (s *Supervisor) startCall(ctx context.Context, rawName string) (context.Context, trace.Span) {
	if !s.tracer.On() {
		return s.tracer.Start(ctx, "", trace.SpanKindClient)
	}
	ctx, span := s.tracer.Start(ctx, "tools/call "+rawName, trace.SpanKindClient, s.traceAttrs...)
	tracing.SetAttributes(span, semconv.McpMethodNameToolsCall, semconv.GenAIOperationNameExecuteTool, semconv.GenAIToolName(rawName))
	return ctx, span
}

// endCall ends a call's span with its outcome (callOutcome's words) on
// generation g (nil when no generation took the call). The status says what
// kind of failure it was, never the server's message, which may quote the
// arguments.
func endCall(span trace.Span, g *generation, outcome string, err error) {
	if span.IsRecording() {
		if g != nil {
			tracing.SetAttributes(span, tracing.Outcome.String(outcome), tracing.Generation.Int64(g.num),
				semconv.McpProtocolVersion(g.sess.InitializeResult().ProtocolVersion))
		} else {
			tracing.SetAttributes(span, tracing.Outcome.String(outcome))
		}
		switch outcome {
		case tracing.OutcomeToolError:
			tracing.Fail(span, tracing.OutcomeToolError, "The tool reported an error")
		case tracing.OutcomeUnavailable:
			tracing.Fail(span, tracing.OutcomeUnavailable, "The server is not connected")
		case tracing.OutcomeError:
			kind := tracing.ErrorType(err)
			tracing.Fail(span, kind, callFailure(kind))
		}
	}
	span.End()
}

// callFailure describes a failed call by the kind of its error.
func callFailure(kind string) string {
	switch kind {
	case "timeout":
		return "The tool call timed out"
	case "cancelled":
		return "The caller cancelled the tool call"
	case tracing.ErrorTypeOther:
		return "The tool call failed"
	default:
		return "The server answered with JSON-RPC error " + kind
	}
}

// startRequest starts the CLIENT span of one HTTP request to the upstream,
// when the request is part of a traced operation (a connect, a sync, a
// call): requests of no operation (the SDK's standing GET stream after a
// connect) start no trace of their own. The span lasts until the answer's
// body is closed, so an SSE answer is inside it. Never the URL: its query
// may hold a key.
func (t *sessionTransport) startRequest(ctx context.Context, req *http.Request) (context.Context, trace.Span) {
	if !t.tracer.On() || !trace.SpanContextFromContext(ctx).IsValid() {
		return ctx, trace.SpanFromContext(context.Background())
	}
	if ctx.Value(callSpanKey{}) != nil {
		span := trace.SpanFromContext(ctx)
		tracing.SetAttributes(span, semconv.HTTPRequestMethodKey.String(req.Method))
		return ctx, tracing.Borrowed(span)
	}
	return t.tracer.Start(ctx, req.Method, trace.SpanKindClient,
		semconv.HTTPRequestMethodKey.String(req.Method), semconv.ServerAddress(req.URL.Hostname()), semconv.ServerPort(urlPort(req.URL)))
}

// callSpanKey marks the context of a call CallToolJSON posts itself: its
// CLIENT span is the span of the HTTP request too (it carries the method and
// the status, and the upstream's traceparent names it), as MCP's conventions
// allow, rather than a child that would cost as much again.
type callSpanKey struct{}

// withCallSpan marks ctx, whose span is a call's, for startRequest.
func withCallSpan(ctx context.Context) context.Context {
	if !trace.SpanFromContext(ctx).IsRecording() {
		return ctx
	}
	return context.WithValue(ctx, callSpanKey{}, true)
}

// endRequest records how the upstream answered: its status, or the class
// of the transport error. A status of 400 or more fails the span.
func endRequest(span trace.Span, resp *http.Response, err error) {
	if !span.IsRecording() {
		return
	}
	if err != nil {
		tracing.Fail(span, tracing.ErrorType(err), "The request failed")
		return
	}
	tracing.SetAttributes(span, semconv.HTTPResponseStatusCode(resp.StatusCode))
	if resp.StatusCode >= 400 {
		tracing.Fail(span, strconv.Itoa(resp.StatusCode), http.StatusText(resp.StatusCode))
	}
}
