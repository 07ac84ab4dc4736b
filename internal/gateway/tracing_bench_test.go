package gateway

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/testenv"
)

// What tracing costs the gateway's handling of one fast-path tools/call
// (a sessionless call of a fake caller, no network), off and with every
// span exported synchronously to the SDK's in-memory exporter
// (docs/benchmarks.md, "Tracing"):
//
//	go test -run XXX -bench GatewayToolCall -benchmem ./internal/gateway/
func BenchmarkGatewayToolCall(b *testing.B) {
	b.Run("off", func(b *testing.B) { benchmarkToolCall(b, nil, nil) })
	b.Run("memory", func(b *testing.B) {
		exp := tracetest.NewInMemoryExporter()
		tp := sdktrace.NewTracerProvider(sdktrace.WithSyncer(exp))
		defer func() { _ = tp.Shutdown(context.Background()) }()
		benchmarkToolCall(b, tp, exp.Reset)
	})
}

func benchmarkToolCall(b *testing.B, tp trace.TracerProvider, reset func()) {
	reg := registry.New()
	tools := []*mcp.Tool{{Name: echoTool, InputSchema: json.RawMessage(`{"type":"object"}`)}}
	if _, err := reg.Swap(testNS, testNS+"/"+testServer, testServer, tools, &fakeCaller{}); err != nil {
		b.Fatal(err)
	}
	h := (&Gateway{Registry: reg, TracerProvider: tp}).Handler()
	body, header := sessionlessCall(1, echoPublic, `{"text":"hello"}`)
	b.ReportAllocs()
	i, cpu0 := 0, testenv.CPUTime()
	for b.Loop() {
		req := httptest.NewRequest(http.MethodPost, "http://127.0.0.1/namespaces/"+testNS+"/mcp", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		for k, v := range header {
			req.Header.Set(k, v)
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != http.StatusOK {
			b.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
		if i++; reset != nil && i%64 == 0 {
			reset()
		}
	}
	b.ReportMetric(float64(testenv.CPUTime()-cpu0)/float64(i), "cpu-ns/op")
}
