package tracing

import (
	"context"
	"sync"

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

// batched is a recording span that gathers the attributes set on it and
// hands them to the SDK in one call when it ends. The SDK copies the
// attributes of every SetAttributes into a slice of the span's that it
// grows each time, and a traced call sets attributes at its start, on the
// way and at its end: gathered here, a span's attributes cost one slice.
// No span processor of the operator reads attributes before a span ends,
// and its samplers (OTEL_TRACES_SAMPLER) do not read them at all. See
// docs/design.md, "Tracing".
type batched struct {
	trace.Span
	mu    sync.Mutex
	buf   *attrBuffer // nil once ended
	attrs []attribute.KeyValue
}

// attrBuffer holds a span's gathered attributes: what a span of the
// operator carries at most, error included (one that sets more grows its
// slice). Buffers are reused once their span has ended: nothing reaches a
// buffer after End, which takes it from the span.
type attrBuffer [16]attribute.KeyValue

var attrBuffers = sync.Pool{New: func() any { return new(attrBuffer) }}

// batch wraps span (a recording one) with attrs gathered, and puts it in
// ctx in place of the SDK's, so that a step that finds the span in the
// context (trace.SpanFromContext) adds to the same batch.
func batch(ctx context.Context, span trace.Span, attrs []attribute.KeyValue) (context.Context, trace.Span) {
	if !span.IsRecording() {
		return ctx, span // not sampled: nothing to gather
	}
	b := &batched{Span: span, buf: attrBuffers.Get().(*attrBuffer)}
	b.attrs = append(b.buf[:0], attrs...)
	return trace.ContextWithSpan(ctx, b), b
}

func (b *batched) SetAttributes(kv ...attribute.KeyValue) {
	if !b.add(kv) {
		b.Span.SetAttributes(kv...) // ended: the SDK drops them, as for any ended span
	}
}

// add gathers kv unless the span has ended.
func (b *batched) add(kv []attribute.KeyValue) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.buf == nil {
		return false
	}
	b.attrs = append(b.attrs, kv...)
	return true
}

func (b *batched) End(options ...trace.SpanEndOption) {
	b.mu.Lock()
	buf, attrs := b.buf, b.attrs
	b.buf, b.attrs = nil, nil
	b.mu.Unlock()
	if buf == nil {
		return // ended before
	}
	if len(attrs) > 0 {
		b.Span.SetAttributes(attrs...) // the SDK copies them
	}
	clear(buf[:]) // no attribute value kept alive by the pool
	attrBuffers.Put(buf)
	b.Span.End(options...)
}

// SetAttributes sets kv on span like span.SetAttributes, without the copy of
// kv that a call through the interface makes when span gathers its
// attributes (the operator's recording spans do): a step that sets
// attributes on every tool call uses it.
func SetAttributes(span trace.Span, kv ...attribute.KeyValue) {
	if br, ok := span.(borrowed); ok {
		span = br.Span
	}
	if b, ok := span.(*batched); ok && b.add(kv) {
		return
	}
	for _, a := range kv { // not gathering: one at a time, so that kv stays the caller's
		span.SetAttributes(a)
	}
}

// Borrowed is a span another step started and will end: a step that
// records on it (renames it, adds attributes, fails it) instead of starting
// a child of its own ends nothing. See docs/design.md, "Tracing".
func Borrowed(span trace.Span) trace.Span { return borrowed{span} }

type borrowed struct{ trace.Span }

func (borrowed) End(...trace.SpanEndOption) {}
