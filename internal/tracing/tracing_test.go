package tracing

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	. "github.com/onsi/gomega"
	"go.opentelemetry.io/otel/propagation"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	"go.opentelemetry.io/otel/trace/noop"
)

func TestConfigFromEnv(t *testing.T) {
	for _, tc := range []struct {
		name     string
		env      map[string]string
		protocol string // "" is off
		err      string
	}{
		{name: "nothing set: off", env: nil},
		{name: "endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://collector:4318"}, protocol: protocolHTTP},
		{name: "traces endpoint", env: map[string]string{"OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": "http://c:4318/v1/traces"}, protocol: protocolHTTP},
		{name: "otlp without endpoint: the exporter's default", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp"}, protocol: protocolHTTP},
		{name: "none wins over an endpoint", env: map[string]string{"OTEL_TRACES_EXPORTER": "none", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{name: "sdk disabled", env: map[string]string{"OTEL_SDK_DISABLED": "TRUE", "OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318"}},
		{name: "sdk not disabled", env: map[string]string{"OTEL_SDK_DISABLED": "false", "OTEL_TRACES_EXPORTER": "otlp"}, protocol: protocolHTTP},
		{name: "grpc", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc"}, protocol: protocolGRPC},
		{name: "traces protocol wins", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp", "OTEL_EXPORTER_OTLP_PROTOCOL": "grpc",
			"OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf"}, protocol: protocolHTTP},
		{name: "unsupported exporter", env: map[string]string{"OTEL_TRACES_EXPORTER": "zipkin"},
			err: `OTEL_TRACES_EXPORTER="zipkin" is not supported: use otlp (or none)`},
		{name: "two exporters", env: map[string]string{"OTEL_TRACES_EXPORTER": "otlp,console"},
			err: `OTEL_TRACES_EXPORTER="otlp,console" is not supported`},
		{name: "http/json", env: map[string]string{"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:4318", "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/json"},
			err: `OTEL_EXPORTER_OTLP_TRACES_PROTOCOL="http/json" is not supported: use http/protobuf or grpc`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := NewWithT(t)
			cfg, err := configFromEnv(func(k string) string { return tc.env[k] })
			if tc.err != "" {
				g.Expect(err).To(MatchError(ContainSubstring(tc.err)))
				return
			}
			g.Expect(err).NotTo(HaveOccurred())
			g.Expect(cfg.Protocol).To(Equal(tc.protocol))
		})
	}
}

func recorder(t *testing.T) (*sdktrace.TracerProvider, *tracetest.InMemoryExporter) {
	exp := tracetest.NewInMemoryExporter()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
	t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
	return tp, exp
}

func TestTracerOff(t *testing.T) {
	g := NewWithT(t)
	tp, exp := recorder(t)
	for _, off := range []Tracer{New(nil), New(noop.NewTracerProvider()), {}} {
		g.Expect(off.On()).To(BeFalse())
		ctx, parent := tp.Tracer("test").Start(context.Background(), "parent")
		got, span := off.Start(ctx, "child", trace.SpanKindClient)
		g.Expect(got).To(BeIdenticalTo(ctx))
		g.Expect(span.IsRecording()).To(BeFalse())
		span.End()
		g.Expect(parent.IsRecording()).To(BeTrue(), "ending the off span must not end the caller's")
		parent.End()
		allocs := testing.AllocsPerRun(100, func() {
			_, s := off.Start(ctx, "child", trace.SpanKindClient)
			s.End()
		})
		g.Expect(allocs).To(BeZero())
		h := http.Header{"Traceparent": {"00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}}
		g.Expect(off.Extract(context.Background(), h, nil)).To(Equal(context.Background()),
			"off, an agent's trace context is not followed")
	}
	g.Expect(exp.GetSpans()).To(HaveLen(3), "only the test's own parents")
}

func TestTracerOn(t *testing.T) {
	g := NewWithT(t)
	tp, exp := recorder(t)
	tr := New(tp)
	g.Expect(tr.On()).To(BeTrue())
	ctx, span := tr.Start(context.Background(), "op", trace.SpanKindServer, Namespace.String("team-a"))
	g.Expect(span.IsRecording()).To(BeTrue())
	span.End()
	spans := exp.GetSpans()
	g.Expect(spans).To(HaveLen(1))
	g.Expect(spans[0].SpanKind).To(Equal(trace.SpanKindServer))
	g.Expect(spans[0].InstrumentationScope.Name).To(Equal(ScopeName))
	g.Expect(spans[0].Attributes).To(ContainElement(Namespace.String("team-a")))
	g.Expect(trace.SpanContextFromContext(ctx)).To(Equal(spans[0].SpanContext))
}

func TestPropagation(t *testing.T) {
	g := NewWithT(t)
	tp, _ := recorder(t)
	tr := New(tp)

	h := http.Header{}
	InjectHeader(context.Background(), h)
	parent, state := Fields(context.Background())
	g.Expect(h).To(BeEmpty(), "no span context, no header")
	g.Expect(parent + state).To(BeEmpty())
	g.Expect(Meta(context.Background())).To(BeNil())

	ctx, span := tr.Start(context.Background(), "call", trace.SpanKindClient)
	defer span.End()
	sc := span.SpanContext()
	want := fmt.Sprintf("00-%s-%s-01", sc.TraceID(), sc.SpanID())
	InjectHeader(ctx, h)
	g.Expect(h.Get("Traceparent")).To(Equal(want))
	parent, _ = Fields(ctx)
	g.Expect(parent).To(Equal(want))
	g.Expect(Meta(ctx)).To(Equal(map[string]any{"traceparent": want}))

	// The gateway's side: _meta first, headers otherwise.
	fromHeader := "00-11111111111111111111111111111111-2222222222222222-01"
	fromMeta := "00-33333333333333333333333333333333-4444444444444444-01"
	hdr := http.Header{"Traceparent": {fromHeader}}
	raw := RawMeta{"traceparent": json.RawMessage(`"` + fromMeta + `"`)}
	for name, tc := range map[string]struct {
		meta MetaGetter
		want string
	}{
		"header only":      {nil, fromHeader},
		"raw meta":         {raw, fromMeta},
		"sdk meta":         {AnyMeta{"traceparent": fromMeta}, fromMeta},
		"meta without one": {AnyMeta{"progressToken": 1}, fromHeader},
		"meta not string":  {RawMeta{"traceparent": json.RawMessage(`7`)}, fromHeader},
	} {
		got := trace.SpanContextFromContext(tr.Extract(context.Background(), hdr, tc.meta))
		g.Expect(got.IsRemote()).To(BeTrue(), name)
		g.Expect(fmt.Sprintf("00-%s-%s-01", got.TraceID(), got.SpanID())).To(Equal(tc.want), name)
	}
	g.Expect(trace.SpanContextFromContext(tr.Extract(context.Background(), nil, nil)).IsValid()).To(BeFalse())
}

func TestFieldsAreWhatTheW3CPropagatorWrites(t *testing.T) {
	g := NewWithT(t)
	state, err := trace.ParseTraceState("vendor=abc,other=x-1")
	g.Expect(err).NotTo(HaveOccurred())
	for name, sc := range map[string]trace.SpanContext{
		"sampled":     trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0x4b, 0xf9, 15: 0x36}, SpanID: trace.SpanID{0, 0xf0, 7: 0xb7}, TraceFlags: trace.FlagsSampled}),
		"not sampled": trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{1, 15: 2}, SpanID: trace.SpanID{3, 7: 4}}),
		"with state":  trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{0xff, 15: 0xee}, SpanID: trace.SpanID{0xdd, 7: 0xcc}, TraceFlags: trace.FlagsSampled, TraceState: state}),
		"other flags": trace.NewSpanContext(trace.SpanContextConfig{TraceID: trace.TraceID{9, 15: 9}, SpanID: trace.SpanID{9, 7: 9}, TraceFlags: 0xff}),
	} {
		ctx := trace.ContextWithSpanContext(context.Background(), sc)
		want := propagation.MapCarrier{}
		propagation.TraceContext{}.Inject(ctx, want)
		parent, st := Fields(ctx)
		g.Expect(parent).To(Equal(want.Get(TraceparentKey)), name)
		g.Expect(st).To(Equal(want.Get(TracestateKey)), name)

		// An agent's trace context in the header is replaced, state too.
		h := http.Header{"Traceparent": {"00-11111111111111111111111111111111-2222222222222222-01"}, "Tracestate": {"agent=1"}}
		InjectHeader(ctx, h)
		g.Expect(h.Values("Traceparent")).To(Equal([]string{want.Get(TraceparentKey)}), name)
		g.Expect(h.Get("Tracestate")).To(Equal(want.Get(TracestateKey)), name)
	}
}

func TestErrorType(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want string
	}{
		{&jsonrpc.Error{Code: -32602, Message: "bad arguments: secret"}, "-32602"},
		{fmt.Errorf("calling %q: %w", "tools/call", &jsonrpc.Error{Code: -32001}), "-32001"},
		{fmt.Errorf("wrapped: %w", context.DeadlineExceeded), "timeout"},
		{context.Canceled, "cancelled"},
		{errors.New("dial tcp: connection refused"), "_OTHER"},
	} {
		if got := ErrorType(tc.err); got != tc.want {
			t.Errorf("ErrorType(%v) = %q, want %q", tc.err, got, tc.want)
		}
	}
}
