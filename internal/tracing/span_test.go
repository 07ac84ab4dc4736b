package tracing

import (
	"context"
	"fmt"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/trace"
)

// countingSpan is a recording span that keeps every SetAttributes call;
// its other methods are a non-recording span's.
type countingSpan struct {
	trace.Span
	mu    sync.Mutex
	calls [][]attribute.KeyValue
	ended bool
}

func (s *countingSpan) IsRecording() bool { return true }
func (s *countingSpan) SetAttributes(kv ...attribute.KeyValue) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.calls = append(s.calls, append([]attribute.KeyValue(nil), kv...))
}
func (s *countingSpan) End(...trace.SpanEndOption) { s.ended = true }

func TestSpanAttributesReachTheSDKInOneCallAtEnd(t *testing.T) {
	g := NewWithT(t)
	sdk := &countingSpan{Span: offSpan}
	ctx, span := batch(context.Background(), sdk, []attribute.KeyValue{Namespace.String("team-a")})
	span.SetAttributes(McpServer.String("github"), ServerName.String("gh"))
	SetAttributes(trace.SpanFromContext(ctx), Outcome.String(OutcomeSuccess)) // as a later step finds it
	SetAttributes(Borrowed(span), Stage.String("initialize"))
	Fail(span, "timeout", "The tool call timed out")
	g.Expect(sdk.calls).To(BeEmpty(), "nothing reaches the SDK before the span ends")

	span.End()
	g.Expect(sdk.ended).To(BeTrue())
	g.Expect(sdk.calls).To(HaveLen(1))
	g.Expect(sdk.calls[0]).To(Equal([]attribute.KeyValue{
		Namespace.String("team-a"), McpServer.String("github"), ServerName.String("gh"),
		Outcome.String(OutcomeSuccess), Stage.String("initialize"), attribute.String("error.type", "timeout"),
	}), "in the order they were set")

	span.SetAttributes(Generation.Int64(2))
	SetAttributes(span, Generation.Int64(3))
	span.End()
	g.Expect(sdk.calls).To(HaveLen(3), "after End, attributes go to the SDK, which drops them; End is once")
}

func TestSpanAttributesBeyondTheBufferAndBuffersReused(t *testing.T) {
	g := NewWithT(t)
	tp, exp := recorder(t)
	tr := New(tp)
	var want []attribute.KeyValue
	_, span := tr.Start(context.Background(), "many", trace.SpanKindInternal)
	for i := range 40 {
		kv := attribute.Int(fmt.Sprintf("k%02d", i), i)
		want = append(want, kv)
		span.SetAttributes(kv)
	}
	span.End()
	_, next := tr.Start(context.Background(), "next", trace.SpanKindInternal, Namespace.String("b"))
	next.End()

	spans := exp.GetSpans()
	g.Expect(spans).To(HaveLen(2))
	g.Expect(spans[0].Attributes).To(Equal(want))
	g.Expect(spans[1].Attributes).To(Equal([]attribute.KeyValue{Namespace.String("b")}),
		"a reused buffer carries nothing of the span before")
}

func TestSpanAttributesFromManyGoroutines(t *testing.T) {
	g := NewWithT(t)
	tp, exp := recorder(t)
	_, span := New(tp).Start(context.Background(), "shared", trace.SpanKindInternal)
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Go(func() { SetAttributes(span, attribute.Int(fmt.Sprintf("g%d", i), i)) })
	}
	wg.Wait()
	span.End()
	g.Expect(exp.GetSpans()[0].Attributes).To(HaveLen(8))
}

func TestSpanAttributesCostNoCopyOfTheCallersSlice(t *testing.T) {
	g := NewWithT(t)
	tp, _ := recorder(t)
	_, span := New(tp).Start(context.Background(), "op", trace.SpanKindInternal)
	defer span.End()
	allocs := testing.AllocsPerRun(100, func() {
		SetAttributes(span, Outcome.String(OutcomeSuccess), Stage.String("initialize"), Generation.Int64(1))
	})
	// The first runs grow the span's slice past its buffer; the average
	// over 100 is below 1 only if a call copies nothing of its own.
	g.Expect(allocs).To(BeNumerically("<", 1))
}
