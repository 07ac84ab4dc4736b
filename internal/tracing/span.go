package tracing

import (
	"context"
	"sync"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// batched is a recording span of the operator. It gathers the attributes
// set on it and hands them to the SDK in one call when it ends: the SDK
// copies the attributes of every SetAttributes into a slice of the span's
// that it grows each time, and a traced call sets attributes at its start,
// on the way and at its end; gathered here, a span's attributes cost one
// slice. No span processor of the operator reads attributes before a span
// ends, and its samplers (OTEL_TRACES_SAMPLER) do not read them at all.
// See docs/design.md, "Tracing".
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
