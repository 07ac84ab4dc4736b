package bridge

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/go-logr/logr"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/egress"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/testenv"
	"github.com/mcpbridge/operator/test/fixture"
)

// What tracing costs a supervisor's tools/call of an in-process HTTP
// fixture (CallToolJSON, the gateway's fast path), off and with every span
// exported synchronously to the SDK's in-memory exporter, the call's span
// a child of a caller's span as it is behind the gateway
// (docs/benchmarks.md, "Tracing"):
//
//	go test -run XXX -bench SupervisorToolCall -benchmem ./internal/bridge/
func BenchmarkSupervisorToolCall(b *testing.B) {
	for _, stateless := range []bool{false, true} {
		proto := httpStatefulVersion
		if stateless {
			proto = httpStatelessVersion
		}
		b.Run(proto+"/off", func(b *testing.B) { benchmarkSupervisorCall(b, stateless, nil, nil) })
		b.Run(proto+"/memory", func(b *testing.B) {
			exp := tracetest.NewInMemoryExporter()
			tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
			defer func() { _ = tp.Shutdown(context.Background()) }()
			benchmarkSupervisorCall(b, stateless, tp, exp)
		})
	}
}

func benchmarkSupervisorCall(b *testing.B, stateless bool, tp *sdktrace.TracerProvider, exp *tracetest.InMemoryExporter) {
	h, err := fixture.NewHTTPHandler(fixture.Options{Stateless: stateless})
	if err != nil {
		b.Fatal(err)
	}
	defer func() { _ = h.Close() }()
	srv := httptest.NewServer(h)
	defer srv.Close()
	o := Options{Namespace: "ns", Name: "srv", Policy: httpPolicy(srv.URL + "/mcp"), Registry: registry.New(),
		Log: logr.Discard(), CloseBarrier: 3 * time.Second, Egress: egress.New([]netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")})}
	if tp != nil {
		o.TracerProvider = tp
	}
	s := New(o)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	s.Start(ctx)
	defer func() { _ = s.Dispose(context.Background()) }()
	for deadline := time.Now().Add(20 * time.Second); s.Snapshot().Phase != v1alpha1.PhaseReady; {
		if time.Now().After(deadline) {
			b.Fatalf("not ready: %+v", s.Snapshot())
		}
		time.Sleep(10 * time.Millisecond)
	}
	// The caller's span is remote, as the gateway's is to the supervisor
	// in a way: only the supervisor's own span is measured.
	if tp != nil {
		ctx = trace.ContextWithRemoteSpanContext(ctx, trace.NewSpanContext(trace.SpanContextConfig{
			TraceID: trace.TraceID{1}, SpanID: trace.SpanID{1}, TraceFlags: trace.FlagsSampled}))
	}
	args := json.RawMessage(`{"text":"hello"}`)
	b.ReportAllocs()
	i, cpu0 := 0, testenv.CPUTime()
	for b.Loop() {
		if _, isError, err := s.CallToolJSON(ctx, fixture.ToolEcho, args); err != nil || isError {
			b.Fatalf("call: %v (tool error %v)", err, isError)
		}
		if i++; exp != nil && i%64 == 0 {
			exp.Reset()
		}
	}
	b.ReportMetric(float64(testenv.CPUTime()-cpu0)/float64(i), "cpu-ns/op")
}
