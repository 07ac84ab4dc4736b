package main

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"time"

	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"

	"github.com/mcpbridge/operator/hack/bench/internal/report"
)

// Values of -tracing.
const (
	tracingMemory  = "memory"
	tracingBatch   = "batch"
	tracingControl = "control"
)

// tracedSuffix marks the mode of a traced gateway.
const tracedSuffix = "+tracing"

// benchTracing is the tracer provider of the traced gateways and
// supervisors: every call sampled, its spans exported to memory or batched
// to nowhere; none for -tracing=control, whose second set runs untraced
// like the first, so that the comparison's own spread shows.
type benchTracing struct {
	provider *sdktrace.TracerProvider    // nil: -tracing=control
	memory   *tracetest.InMemoryExporter // -tracing=memory only
	count    atomic.Int64                // spans ended since the last reset
}

func newTracing(kind string) *benchTracing {
	t := &benchTracing{}
	if kind == tracingControl {
		return t
	}
	opts := []sdktrace.TracerProviderOption{sdktrace.WithSampler(sdktrace.AlwaysSample()),
		sdktrace.WithSpanProcessor(counter{&t.count})}
	if kind == tracingMemory {
		t.memory = tracetest.NewInMemoryExporter()
		opts = append(opts, sdktrace.WithSyncer(boundedMemory{t.memory, new(atomic.Int64)}))
	} else {
		opts = append(opts, sdktrace.WithBatcher(discard{}))
	}
	t.provider = sdktrace.NewTracerProvider(opts...)
	return t
}

// reset empties the in-memory exporter, so that spans do not pile up in
// the heap of the next round, and the count; nil does nothing.
func (t *benchTracing) reset() {
	if t == nil {
		return
	}
	if t.memory != nil {
		t.memory.Reset()
	}
	t.count.Store(0)
}

// ended is the spans ended since the last reset; 0 for nil.
func (t *benchTracing) ended() int64 {
	if t == nil {
		return 0
	}
	return t.count.Load()
}

// boundedMemory is the in-memory exporter, emptied whenever it holds
// memoryBound spans: it keeps every span in one slice, whose growth by
// copying would otherwise cost more than the spans themselves in a round of
// thousands of calls, as no real exporter does.
type boundedMemory struct {
	*tracetest.InMemoryExporter
	held *atomic.Int64
}

const memoryBound = 256

func (m boundedMemory) ExportSpans(ctx context.Context, spans []sdktrace.ReadOnlySpan) error {
	err := m.InMemoryExporter.ExportSpans(ctx, spans)
	if m.held.Add(int64(len(spans))) >= memoryBound {
		m.held.Store(0)
		m.Reset()
	}
	return err
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

// printTracing prints what tracing adds: each traced gateway row against
// the same mode's untraced row of the same cell.
func (b *bench) printTracing() {
	if *flagTracing == tracingControl {
		fmt.Printf("\nControl (-tracing=control): a second set of supervisors and gateways, untraced like the first, against the first, " +
			"same cell, alternating rounds; \"on\" is the second set. Its added p50 is how far two identical gateways differ here.\n\n")
	} else {
		fmt.Printf("\nTracing on (-tracing=%s) against the same gateway mode without it, same cell, alternating rounds:\n\n", *flagTracing)
	}
	fmt.Println("| Protocol | Callers × sessions | Auth | p50 off | p50 on | Added p50 | CPU/call added | Alloc/call added | Spans/call | Met: ≤ 0.1 ms |")
	fmt.Println("|---|---|---|--:|--:|--:|--:|--:|--:|---|")
	var sum time.Duration
	var cells int
	for _, cell := range b.results {
		off := map[string]result{}
		for _, r := range cell[1:] {
			off[r.mode] = r
		}
		for _, on := range cell[1:] {
			mode, traced := strings.CutSuffix(on.mode, tracedSuffix)
			if !traced {
				continue
			}
			o := off[mode]
			added := report.Percentile(on.lat, 50) - report.Percentile(o.lat, 50)
			sum, cells = sum+added, cells+1
			fmt.Printf("| %s | %d × %d | %s | %s | %s | %s | %s | %.1f kB | %.1f | %s |\n", on.negotiated, on.callers, on.sessions, mode,
				msf(report.Percentile(o.lat, 50)), msf(report.Percentile(on.lat, 50)), msf(added),
				msf(on.perCall(on.cpuSelf)-o.perCall(o.cpuSelf)),
				(float64(on.allocSelf)/float64(max(1, len(on.lat)))-float64(o.allocSelf)/float64(max(1, len(o.lat))))/1e3,
				float64(on.spans)/float64(max(1, len(on.lat))), report.YesNo(added <= 100*time.Microsecond))
		}
	}
	fmt.Println()
	fmt.Printf("Added p50, mean over the %d cells: %s.\n", cells, msf(sum/time.Duration(max(1, cells))))
	fmt.Println("Spans/call: spans ended during the measured rounds over the calls (on the fast path the gateway's " +
		"request span, which is its tools/call span, and the supervisor's call, which is the upstream HTTP request's). Alloc/call and CPU/call added: traced row minus untraced row of the same mode.")
}
