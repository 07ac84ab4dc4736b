package tracing

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"net/http"

	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/trace"
)

// W3C Trace Context is the one format propagated: traceparent and
// tracestate, in HTTP headers and, as MCP's convention has it, unprefixed in
// a request's params._meta. Baggage is not propagated: it would carry
// whatever an agent put in it to every upstream.
var traceContext = propagation.TraceContext{}

// Keys of the trace context, as headers and as params._meta entries.
const (
	TraceparentKey = "traceparent"
	TracestateKey  = "tracestate"
)

// InjectHeader sets traceparent (and tracestate) on h when ctx carries a
// span context, replacing any there; with tracing off it never does.
func InjectHeader(ctx context.Context, h http.Header) {
	parent, state := Fields(ctx)
	if parent == "" {
		return
	}
	h["Traceparent"] = []string{parent} // the canonical key: no copy of it per request
	if state != "" {
		h["Tracestate"] = []string{state}
	} else {
		delete(h, "Tracestate") // another trace's state must not follow this one
	}
}

// Fields are the traceparent and tracestate of ctx's span context, empty
// when it carries none. traceparent is W3C Trace Context's version 00, the
// one propagation.TraceContext writes, formatted here into one string
// where the propagator's carrier would cost an allocation per request more.
func Fields(ctx context.Context) (traceparent, tracestate string) {
	sc := trace.SpanContextFromContext(ctx)
	if !sc.IsValid() {
		return "", ""
	}
	tid, sid := sc.TraceID(), sc.SpanID()
	var b [55]byte // 00-<32 hex>-<16 hex>-<2 hex>
	copy(b[:], "00-")
	hex.Encode(b[3:35], tid[:])
	b[35] = '-'
	hex.Encode(b[36:52], sid[:])
	b[52] = '-'
	hex.Encode(b[53:55], []byte{byte(sc.TraceFlags() & (trace.FlagsSampled | trace.FlagsRandom))}) // the flags the spec defines
	return string(b[:]), sc.TraceState().String()
}

// Meta is ctx's trace context as params._meta entries, or nil.
func Meta(ctx context.Context) map[string]any {
	parent, state := Fields(ctx)
	if parent == "" {
		return nil
	}
	m := map[string]any{TraceparentKey: parent}
	if state != "" {
		m[TracestateKey] = state
	}
	return m
}

// Extract continues the trace of an incoming request: from its
// params._meta when that carries a traceparent (MCP's convention), from its
// HTTP headers otherwise. Off, it returns ctx: an agent's trace context is
// neither followed nor passed on.
func (t Tracer) Extract(ctx context.Context, h http.Header, meta MetaGetter) context.Context {
	if t.t == nil {
		return ctx
	}
	if meta != nil && meta.Get(TraceparentKey) != "" {
		return traceContext.Extract(ctx, meta)
	}
	if h == nil {
		return ctx
	}
	return traceContext.Extract(ctx, propagation.HeaderCarrier(h))
}

// MetaGetter reads trace-context entries of a request's params._meta.
type MetaGetter interface {
	propagation.TextMapCarrier
}

// RawMeta is params._meta as JSON values (the gateway's fast path).
type RawMeta map[string]json.RawMessage

func (m RawMeta) Get(key string) string {
	raw, ok := m[key]
	if !ok {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) != nil {
		return ""
	}
	return s
}
func (RawMeta) Set(string, string) {}
func (RawMeta) Keys() []string     { return nil }

// AnyMeta is params._meta as decoded by the SDK.
type AnyMeta map[string]any

func (m AnyMeta) Get(key string) string {
	s, _ := m[key].(string)
	return s
}
func (AnyMeta) Set(string, string) {}
func (AnyMeta) Keys() []string     { return nil }
