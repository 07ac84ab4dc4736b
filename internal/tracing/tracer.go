package tracing

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

// ScopeName is the instrumentation scope of every span of the operator.
const ScopeName = "github.com/mcpbridge/operator"

// Tracer starts the operator's spans. The zero value is off.
type Tracer struct {
	t trace.Tracer
}

// New is a Tracer of tp; a nil or no-op provider gives the zero Tracer, so
// that code with tracing off never builds attributes it would drop.
func New(tp trace.TracerProvider) Tracer {
	if tp == nil {
		return Tracer{}
	}
	if _, isNoop := tp.(noop.TracerProvider); isNoop {
		return Tracer{}
	}
	return Tracer{t: tp.Tracer(ScopeName, trace.WithSchemaURL(semconv.SchemaURL))}
}

// On reports whether spans are recorded at all.
func (t Tracer) On() bool { return t.t != nil }

// Start starts a span of kind with attrs as a child of ctx's span, and
// returns it in the context too. Off, it returns ctx and a non-recording
// span without allocating; callers that compute attributes check On first.
// A recording span keeps its attributes until it ends (batched).
func (t Tracer) Start(ctx context.Context, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t.t == nil {
		// Never ctx's own span: ending what Start returned must not end
		// a span of the caller's.
		return ctx, offSpan
	}
	ctx, span := t.t.Start(ctx, name, kindOption(kind)...)
	return batch(ctx, span, attrs)
}

// StartAt is Start for a span that began at t, before it could be started
// (the gateway's request span waits for the caller to be known).
func (t Tracer) StartAt(ctx context.Context, at time.Time, name string, kind trace.SpanKind, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t.t == nil {
		return ctx, offSpan
	}
	ctx, span := t.t.Start(ctx, name, trace.WithSpanKind(kind), trace.WithTimestamp(at))
	return batch(ctx, span, attrs)
}

// offSpan is the span of a Tracer that is off: records nothing, carries no
// trace context.
var offSpan = trace.SpanFromContext(context.Background())

// StartLinked is Start with links to other spans (a parent the span does
// not take, such as an agent's params._meta trace context).
func (t Tracer) StartLinked(ctx context.Context, name string, kind trace.SpanKind, links []trace.Link, attrs ...attribute.KeyValue) (context.Context, trace.Span) {
	if t.t == nil {
		return ctx, offSpan
	}
	ctx, span := t.t.Start(ctx, name, trace.WithSpanKind(kind), trace.WithLinks(links...))
	return batch(ctx, span, attrs)
}

// kindOptions are the start options of a span of each kind, made once: an
// option built per span is an allocation per span.
var kindOptions = func() (opts [trace.SpanKindConsumer + 1][]trace.SpanStartOption) {
	for k := range opts {
		opts[k] = []trace.SpanStartOption{trace.WithSpanKind(trace.SpanKind(k))}
	}
	return opts
}()

func kindOption(kind trace.SpanKind) []trace.SpanStartOption {
	if int(kind) >= len(kindOptions) {
		return kindOptions[trace.SpanKindInternal]
	}
	return kindOptions[kind]
}

// Borrowed is a span another step started and will end: a step that
// records on it (renames it, adds attributes, fails it) instead of starting
// a child of its own ends nothing. See docs/design.md, "Tracing".
func Borrowed(span trace.Span) trace.Span { return borrowed{span} }

type borrowed struct{ trace.Span }

func (borrowed) End(...trace.SpanEndOption) {}
