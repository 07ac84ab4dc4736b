package gateway

import (
	"cmp"
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/internal/kubeauth"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/tracing"
)

// serverImpl is how the gateway introduces itself to agents.
var serverImpl = &mcp.Implementation{Name: "mcp-bridge-gateway", Version: "v1alpha1"}

// endpoint is one namespace's MCP endpoint: one view per caller identity,
// each kept equal to the part of the namespace's registry its identity may
// use.
type endpoint struct {
	ns       string
	registry *registry.Registry
	access   *Access // nil without authentication
	log      logr.Logger
	auditLog logr.Logger
	tracer   tracing.Tracer
	budgets  Budgets
	sealer   *sealer

	// calls in flight and result bytes held, all identities together.
	calls   atomic.Int64
	results resultBytes
	// opening counts the requests that may be opening a session now, all
	// identities together (budgets.go).
	opening    sync.Mutex
	openingNow int
	// bodies paces the namespace's large request bodies after one was
	// refused once read or left to the SDK, on whatever connection they
	// come, and lets the SDK decode one at a time (pacing.go).
	bodies bodyPacer

	mu    sync.Mutex
	views map[string]*view // by identity
}

func newEndpoint(ns string, g *Gateway) *endpoint {
	log := g.Log.WithValues("namespace", ns)
	b := g.Budgets.withDefaults()
	return &endpoint{ns: ns, registry: g.Registry, access: g.Auth, log: log, auditLog: log.WithName("audit"),
		tracer: g.tracer, budgets: b, sealer: g.sealer, results: resultBytes{max: b.ResultBytesPerNamespace}, views: map[string]*view{},
		bodies: bodyPacer{pause: cmp.Or(g.RefusalPause, DefaultRefusalPause)}}
}

// hold returns the view of u's identity, creating it on first use, and
// holds it for a request until release is called. A new view is empty
// until its ensureSynced.
func (e *endpoint) hold(u *kubeauth.User) (v *view, release func()) {
	id := identity(u)
	e.mu.Lock()
	defer e.mu.Unlock()
	v = e.views[id]
	if v == nil {
		v = newView(e, u)
		e.views[id] = v
	}
	v.busy++
	v.lastUsed = time.Now()
	if u != nil {
		v.caller.Store(u) // the freshest review of this identity
	}
	return v, func() {
		e.mu.Lock()
		v.busy--
		e.mu.Unlock()
	}
}

func (e *endpoint) allViews() []*view {
	e.mu.Lock()
	defer e.mu.Unlock()
	vs := make([]*view, 0, len(e.views))
	for _, v := range e.views {
		vs = append(vs, v)
	}
	return vs
}

// refreshAll brings every view up to date after a registry change; with
// sessionsOnly, only views with a session, which are the ones that a
// list_changed can reach.
func (e *endpoint) refreshAll(ctx context.Context, sessionsOnly bool) {
	for _, v := range e.allViews() {
		if sessionsOnly && !hasAny(v.server) {
			continue
		}
		if err := v.refresh(ctx); err != nil && ctx.Err() == nil {
			e.log.Error(err, "gateway view not refreshed")
		}
	}
}

// reap forgets the views that serve nothing: no request in flight, no
// session, and no request for longer than idle.
func (e *endpoint) reap(now time.Time, idle time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for id, v := range e.views {
		if v.busy == 0 && now.Sub(v.lastUsed) > idle && !hasAny(v.server) {
			delete(e.views, id)
		}
	}
}

// empty: no view, and no result bytes held (a forwarded call's hold no
// view: Gateway.ResultBytes).
func (e *endpoint) empty() bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.views) == 0 && e.results.held.Load() == 0
}

func hasAny(s *mcp.Server) bool {
	for range s.Sessions() {
		return true
	}
	return false
}
