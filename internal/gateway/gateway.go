package gateway

import (
	"context"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/mcpbridge/operator/internal/bridge"
)

// DefaultMaxBodyBytes bounds a request body.
const DefaultMaxBodyBytes = 4 << 20

// Gateway serves every namespace's tools at /namespaces/{namespace}/mcp.
type Gateway struct {
	Registry *bridge.Registry
	// Auth checks bearer tokens; nil serves without authentication, which
	// the manager allows only on a loopback address.
	Auth         *Authorizer
	Log          logr.Logger
	MaxBodyBytes int64
	// SessionIdleTimeout ends agent sessions unused for that long; zero
	// means DefaultSessionIdleTimeout.
	SessionIdleTimeout time.Duration

	mu        sync.Mutex
	endpoints map[string]*endpoint
}

// Handler routes requests to the namespace endpoints.
func (g *Gateway) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/namespaces/{namespace}/mcp", g.serve)
	return mux
}

func (g *Gateway) serve(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("namespace")
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		refused("not_found")
		http.Error(w, "invalid namespace", http.StatusNotFound)
		return
	}
	if g.Auth == nil && !loopbackHost(r.Host) {
		// Without authentication only loopback clients may call: a page
		// that rebinds its own domain to 127.0.0.1 names itself in Host.
		refused("not_loopback")
		http.Error(w, "without authentication the gateway answers loopback hosts only", http.StatusForbidden)
		return
	}
	if !sameOrigin(r) {
		refused("cross_origin")
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
		return
	}
	if !g.authorize(w, r, ns) {
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, positiveOr(g.MaxBodyBytes, DefaultMaxBodyBytes))
	g.endpoint(ns).ServeHTTP(w, r)
}

// authorize writes 401/403/503 and returns false when the caller may not
// use ns. The token is never logged.
func (g *Gateway) authorize(w http.ResponseWriter, r *http.Request, ns string) bool {
	if g.Auth == nil {
		return true
	}
	token, ok := bearerToken(r)
	if !ok {
		unauthorized(w)
		return false
	}
	status, err := g.Auth.Check(r.Context(), token, ns)
	switch {
	case err != nil:
		refused("auth_unavailable")
		g.Log.Error(err, "gateway authorization failed", "namespace", ns)
		http.Error(w, "authorization is unavailable", http.StatusServiceUnavailable)
	case status == http.StatusUnauthorized:
		unauthorized(w)
	case status == http.StatusForbidden:
		refused("forbidden")
		http.Error(w, `forbidden: the caller may not "use" mcpservers.mcpbridge.dev in namespace `+ns, http.StatusForbidden)
	default:
		return true
	}
	return false
}

func unauthorized(w http.ResponseWriter) {
	refused("unauthorized")
	w.Header().Set("WWW-Authenticate", `Bearer realm="mcpbridge"`)
	http.Error(w, "a valid bearer token is required", http.StatusUnauthorized)
}

// sameOrigin refuses browser requests from another origin (DNS rebinding,
// drive-by pages); requests without Origin (agents, CLIs) pass.
func sameOrigin(r *http.Request) bool {
	origin := r.Header.Get("Origin")
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && u.Host == r.Host
}

// loopbackHost: the request's Host names localhost or a loopback address.
func loopbackHost(hostport string) bool {
	host := hostport
	if h, _, err := net.SplitHostPort(hostport); err == nil {
		host = h
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(strings.Trim(host, "[]"))
	return ip != nil && ip.IsLoopback()
}

// endpoint returns ns's endpoint, creating it on first use.
func (g *Gateway) endpoint(ns string) *endpoint {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.endpoints == nil {
		g.endpoints = map[string]*endpoint{}
	}
	e := g.endpoints[ns]
	if e == nil {
		e = newEndpoint(ns, g.Registry, g.Log)
		g.endpoints[ns] = e
	}
	return e
}

// Start keeps the endpoints equal to the registry until ctx ends; it is a
// manager.Runnable that runs on the leader only.
func (g *Gateway) Start(ctx context.Context) error {
	sub := g.Registry.Subscribe()
	defer sub.Close()
	defer g.closeSessions()
	idle := positiveOr(g.SessionIdleTimeout, DefaultSessionIdleTimeout)
	janitor := time.NewTicker(min(idle/4, time.Minute))
	defer janitor.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-janitor.C:
			for _, e := range g.allEndpoints() {
				e.closeIdle(now, idle)
			}
			continue
		case <-sub.C:
		}
		for _, ns := range sub.Drain() {
			g.mu.Lock()
			e := g.endpoints[ns]
			g.mu.Unlock()
			if e != nil {
				e.sync()
			}
		}
	}
}

func (g *Gateway) allEndpoints() []*endpoint {
	g.mu.Lock()
	defer g.mu.Unlock()
	eps := make([]*endpoint, 0, len(g.endpoints))
	for _, e := range g.endpoints {
		eps = append(eps, e)
	}
	return eps
}

// closeSessions ends every agent session, at shutdown.
func (g *Gateway) closeSessions() {
	for _, e := range g.allEndpoints() {
		for ss := range e.server.Sessions() {
			_ = ss.Close()
		}
	}
}

// NeedLeaderElection: the registry is filled on the leader only.
func (g *Gateway) NeedLeaderElection() bool { return true }

// gatewayShutdown bounds the graceful shutdown of the gateway's listener.
const gatewayShutdown = 10 * time.Second

// AddToManager serves the gateway on ln from the elected leader only, and
// keeps its endpoints in step with the registry. The manager closes ln when
// it stops. The manager binary passes ListenWhenServing, so that a replica
// that is not the leader does not even bind the port.
func (g *Gateway) AddToManager(mgr manager.Manager, ln net.Listener) error {
	if err := mgr.Add(g); err != nil {
		return err
	}
	return mgr.Add(&manager.Server{
		Name: "gateway",
		Server: &http.Server{
			Handler:           g.Handler(),
			ReadHeaderTimeout: 10 * time.Second,
		},
		Listener:            ln,
		OnlyServeWhenLeader: true,
		ShutdownTimeout:     ptr.To(gatewayShutdown),
	})
}
