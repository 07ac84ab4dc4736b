package main

import (
	"context"
	"fmt"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mcpbridge/operator/hack/bench/internal/report"
)

// Values of -tracing.
const (
	tracingMemory = "memory"
	tracingBatch  = "batch"
)

// benchTracing is the tracer provider of the traced gateway: every call
// sampled, its spans exported to memory or batched to nowhere.
type benchTracing struct {
	provider *sdktrace.TracerProvider
	memory   *tracetest.InMemoryExporter // -tracing=memory only
	ended    atomic.Int64                // spans ended since the last count
}

func newTracing(kind string) *benchTracing {
	t := &benchTracing{}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSpanProcessor(counter{&t.ended})}
	if kind == tracingMemory {
		t.memory = tracetest.NewInMemoryExporter()
		opts = append(opts, sdktrace.WithSyncer(t.memory))
	} else {
		opts = append(opts, sdktrace.WithBatcher(discard{}))
	}
	t.provider = sdktrace.NewTracerProvider(opts...)
	return t
}

// reset empties the in-memory exporter, so that a cell's spans do not pile
// up in the heap of the next round.
func (t *benchTracing) reset() {
	if t.memory != nil {
		t.memory.Reset()
	}
}

// counter counts ended spans.
type counter struct{ n *atomic.Int64 }

func (counter) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (c counter) OnEnd(sdktrace.ReadOnlySpan)                   { c.n.Add(1) }
func (counter) Shutdown(context.Context) error                  { return nil }
func (counter) ForceFlush(context.Context) error                { return nil }

// discard is an exporter that drops what it is given.
type discard struct{}

func (discard) ExportSpans(context.Context, []sdktrace.ReadOnlySpan) error { return nil }
func (discard) Shutdown(context.Context) error                             { return nil }

// printTracing prints what tracing adds to the gateway: each traced row
// against the untraced gateway row of the same cell.
func (b *bench) printTracing(groups [][]result) {
	fmt.Printf("\nTracing on (-tracing=%s) against the same gateway without it, same cell, alternating rounds:\n\n", *flagTracing)
	fmt.Println("| Protocol | Callers × sessions | p50 off | p50 on | Added p50 | CPU/call added | Alloc/call added | Spans/call | Met: ≤ 0.1 ms |")
	fmt.Println("|---|---|--:|--:|--:|--:|--:|--:|---|")
	for _, g := range groups {
		off, on := g[1], g[2]
		added := report.Percentile(on.lat, 50) - report.Percentile(off.lat, 50)
		fmt.Printf("| %s | %d × %d | %s | %s | %s | %s | %.1f kB | %.2f | %s |\n", on.negotiated, on.callers, on.sessions,
			msf(report.Percentile(off.lat, 50)), msf(report.Percentile(on.lat, 50)), msf(added),
			msf(on.perCall(on.cpuSelf)-off.perCall(off.cpuSelf)),
			(float64(on.allocSelf)/float64(max(1, len(on.lat)))-float64(off.allocSelf)/float64(max(1, len(off.lat))))/1e3,
			float64(on.spans)/float64(max(1, len(on.lat))), report.YesNo(added <= 100*time.Microsecond))
	}
	fmt.Println()
	fmt.Println("Spans/call counts every span ended during the cell (warm-up included) over the measured calls, so it is a little above the spans of one call.")
}
