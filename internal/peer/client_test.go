package peer_test

import (
	"context"
	"encoding/json"
	"net"
	"strings"
	"sync"
	"sync/atomic"
	"time"

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

	It("fails the calls on a connection to a peer gone silent once a ping goes unanswered", func(ctx SpecContext) {
		DeferCleanup(peer.SetPingTimeouts(200*time.Millisecond, 200*time.Millisecond))
		ns := newNamespace(ctx)
		a := startReplica(ns, "replica-a", newLocals())
		bLocal := newLocals()
		owner := &jsonCaller{result: json.RawMessage(`{"content":[]}`), block: make(chan struct{}), started: make(chan struct{}, 1)}
		bLocal.set("team", "team/slow", owner)
		b := startReplica(ns, "replica-b", bLocal)
		DeferCleanup(func() { close(owner.block) }) // before b stops: it waits for the call
		silent := startFreezer(b.target().Address)
		got := make(chan error, 1)
		go func() {
			_, _, err := a.Client().Call(context.WithoutCancel(ctx), peer.Target{Name: "replica-b", Address: silent.addr()},
				peer.Call{Namespace: "team", Owner: "team/slow", Tool: "wait"})
			got <- err
		}()
		Eventually(owner.started).Should(Receive())
		silent.freeze() // as a node that vanished: nothing answers, nothing closes
		Eventually(got).WithTimeout(5 * time.Second).Should(Receive(MatchError(peer.ErrUnreachable)))
		Expect(metricValue("mcpbridge_replica_peer_unreachable", "peer", "replica-b")).To(BeEquivalentTo(1))
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

// freezer relays TCP connections to an upstream until frozen; then it
// drops what either side sends and closes nothing.
type freezer struct {
	ln     net.Listener
	frozen atomic.Bool
	mu     sync.Mutex
	conns  []net.Conn
}

func startFreezer(upstream string) *freezer {
	GinkgoHelper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	Expect(err).NotTo(HaveOccurred())
	f := &freezer{ln: ln}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", upstream)
			if err != nil {
				_ = c.Close()
				continue
			}
			f.mu.Lock()
			f.conns = append(f.conns, c, u)
			f.mu.Unlock()
			go f.relay(u, c)
			go f.relay(c, u)
		}
	}()
	DeferCleanup(func() {
		_ = ln.Close()
		f.mu.Lock()
		defer f.mu.Unlock()
		for _, c := range f.conns {
			_ = c.Close()
		}
	})
	return f
}

func (f *freezer) addr() string { return f.ln.Addr().String() }

func (f *freezer) freeze() { f.frozen.Store(true) }

func (f *freezer) relay(dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if err != nil {
			_ = dst.Close()
			return
		}
		if f.frozen.Load() {
			continue
		}
		if _, err := dst.Write(buf[:n]); err != nil {
			return
		}
	}
}
