package bridge

import (
	"context"
	"encoding/json"
	"sync"
	"testing"

	. "github.com/onsi/gomega"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"

	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/test/fixture"
)

// A connect's tools can be called from the moment they are in the
// registry: an agent that a gateway tells of them at once is not told
// that the server is not connected yet. The sync span ends on the
// connecting goroutine after the tools are published and before the
// supervisor says it is connected; the call is made there, through the
// registry as the gateway makes it.
func TestAConnectsToolsAreCallableOnceListed(t *testing.T) {
	forEachTransport(t, func(t *testing.T, p *policy.Policy) {
		g := NewWithT(t)
		type result struct {
			listed bool
			err    error
		}
		got := make(chan result, 1)
		started := make(chan *registry.Registry, 1)
		var once sync.Once
		hook := spanEndHook(func(sp sdktrace.ReadOnlySpan) {
			if sp.Name() != spanSync {
				return
			}
			once.Do(func() {
				reg := <-started
				_, caller, ok := reg.Lookup("ns", registry.PublicName("fx", fixture.ToolEcho))
				var err error
				if ok {
					_, _, err = caller.(registry.JSONCaller).CallToolJSON(context.Background(), fixture.ToolEcho, json.RawMessage(`{"text":"at once"}`))
				}
				got <- result{listed: ok, err: err}
			})
		})
		tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(hook))
		t.Cleanup(func() { _ = tp.Shutdown(context.Background()) })
		_, reg := startSupervisor(t, p, withTracing(tp))
		started <- reg
		var r result
		g.Eventually(got, eventually).Should(Receive(&r))
		g.Expect(r.listed).To(BeTrue(), "the tool is in the registry once its sync span ended")
		g.Expect(r.err).NotTo(HaveOccurred(), "a call to a listed tool")
	})
}

// spanEndHook is a span processor that runs fn as each span ends, on the
// goroutine that ends it.
type spanEndHook func(sdktrace.ReadOnlySpan)

func (h spanEndHook) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (h spanEndHook) OnEnd(s sdktrace.ReadOnlySpan)                   { h(s) }
func (h spanEndHook) Shutdown(context.Context) error                  { return nil }
func (h spanEndHook) ForceFlush(context.Context) error                { return nil }
