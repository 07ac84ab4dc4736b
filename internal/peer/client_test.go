package peer_test

import (
	"context"
	"encoding/json"
	"strings"
	"sync"

	"github.com/go-logr/logr/funcr"
	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"

	"github.com/mcpbridge/operator/internal/peer"
	"github.com/mcpbridge/operator/internal/registry"
)

var _ = Describe("The forwarding client", func() {
	It("continues the caller's trace on the owner, so that the trace shows the hop", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		// Two processes: each replica exports its own spans.
		aSpans, bSpans := tracetest.NewInMemoryExporter(), tracetest.NewInMemoryExporter()
		aTP, bTP := sdktrace.NewTracerProvider(sdktrace.WithSyncer(aSpans)), sdktrace.NewTracerProvider(sdktrace.WithSyncer(bSpans))
		DeferCleanup(func() { _ = aTP.Shutdown(context.Background()); _ = bTP.Shutdown(context.Background()) })
		bLocal := newLocals()
		bLocal.set("team", "team/search", &jsonCaller{result: json.RawMessage(`{"content":[]}`)})
		a := startReplica(ns, "replica-a", newLocals(), withTracer(aTP))
		b := startReplica(ns, "replica-b", bLocal, withTracer(bTP))

		callCtx, gatewaySpan := aTP.Tracer("test").Start(ctx, "tools/call mcp_search_find", trace.WithSpanKind(trace.SpanKindServer))
		_, _, err := a.Client().Call(callCtx, b.target(), peer.Call{Namespace: "team", Owner: "team/search", Tool: "find"})
		gatewaySpan.End()
		Expect(err).NotTo(HaveOccurred())

		forwarded := onlySpan(aSpans, "mcpbridge.forward")
		Expect(forwarded.SpanKind).To(Equal(trace.SpanKindClient))
		Expect(forwarded.Parent.SpanID()).To(Equal(gatewaySpan.SpanContext().SpanID()))
		served := onlySpan(bSpans, "mcpbridge.forward")
		Expect(served.SpanKind).To(Equal(trace.SpanKindServer))
		Expect(served.SpanContext.TraceID()).To(Equal(gatewaySpan.SpanContext().TraceID()))
		Expect(served.Parent.SpanID()).To(Equal(forwarded.SpanContext.SpanID()))
		Expect(served.Parent.IsRemote()).To(BeTrue())
	})

	It("shows a peer it cannot reach in a gauge and one log line, until a forward to it is answered", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		logs := &lines{}
		a := startReplica(ns, "replica-a", newLocals(), withLog(funcr.New(logs.add, funcr.Options{})))
		bLocal := newLocals()
		bLocal.set("team", "team/search", &jsonCaller{result: json.RawMessage(`{"content":[]}`)})
		b := startReplica(ns, "replica-b", bLocal)
		gone := peer.Target{Name: "replica-b", Address: closedAddress()}
		call := peer.Call{Namespace: "team", Owner: "team/search", Tool: "find"}

		for range 2 {
			_, _, err := a.Client().Call(ctx, gone, call)
			Expect(err).To(MatchError(peer.ErrUnreachable))
			Expect(err).To(MatchError(peer.ErrNotSent), "refused at the dial: the call did not run")
			Expect(err.Error()).NotTo(ContainSubstring("127.0.0.1"), "agents see the message, not the replica's address")
		}
		Expect(metricValue("mcpbridge_replica_peer_unreachable", "peer", "replica-b")).To(BeEquivalentTo(1))
		Expect(logs.containing("cannot reach a replica")).To(HaveLen(1), "one line per change, not per call")

		// The replica answers again (at its new address).
		_, _, err := a.Client().Call(ctx, b.target(), call)
		Expect(err).NotTo(HaveOccurred())
		v, present := metricSeries("mcpbridge_replica_peer_unreachable", "peer", "replica-b")
		Expect(present).To(BeTrue())
		Expect(v).To(BeZero())
		Expect(logs.containing("reached the replica again")).To(HaveLen(1))

		a.Client().Forget("replica-b")
		_, present = metricSeries("mcpbridge_replica_peer_unreachable", "peer", "replica-b")
		Expect(present).To(BeFalse())
	})

	It("counts the result against the calling replica's result bytes", func(ctx SpecContext) {
		ns := newNamespace(ctx)
		bLocal := newLocals()
		bLocal.set("team", "team/search", &jsonCaller{result: json.RawMessage(`{"content":[{"type":"text","text":"0123456789"}]}`)})
		a := startReplica(ns, "replica-a", newLocals())
		b := startReplica(ns, "replica-b", bLocal)
		call := peer.Call{Namespace: "team", Owner: "team/search", Tool: "find"}

		roomy := &budget{left: 1 << 20}
		_, _, err := a.Client().Call(registry.WithResultBytes(ctx, roomy), b.target(), call)
		Expect(err).NotTo(HaveOccurred())
		Expect(roomy.taken).To(BeNumerically(">", len(`{"content":[{"type":"text","text":"0123456789"}]}`)))

		tight := &budget{left: 16}
		_, _, err = a.Client().Call(registry.WithResultBytes(ctx, tight), b.target(), call)
		Expect(err).To(MatchError(registry.ErrResultBudget))
		Expect(tight.taken).To(BeZero())
	})
})

// onlySpan is the one span named name that exp holds.
func onlySpan(exp *tracetest.InMemoryExporter, name string) tracetest.SpanStub {
	GinkgoHelper()
	var found []tracetest.SpanStub
	for _, s := range exp.GetSpans() {
		if s.Name == name {
			found = append(found, s)
		}
	}
	Expect(found).To(HaveLen(1), "spans named %s", name)
	return found[0]
}

// lines is a funcr sink's output.
type lines struct {
	mu  sync.Mutex
	all []string
}

func (l *lines) add(prefix, args string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.all = append(l.all, prefix+" "+args)
}

func (l *lines) containing(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []string
	for _, line := range l.all {
		if strings.Contains(line, s) {
			out = append(out, line)
		}
	}
	return out
}

// budget is a ResultBytes of a fixed size.
type budget struct {
	mu          sync.Mutex
	left, taken int64
}

func (b *budget) Take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if n > b.left {
		return false
	}
	b.left -= n
	b.taken += n
	return true
}

func (b *budget) Return(n int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.left += n
	b.taken -= n
}
