package gateway

import (
	"cmp"
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/go-logr/logr"
	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/manager"

	"github.com/mcpbridge/operator/internal/kubeauth"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/tracing"
)

// DefaultMaxBodyBytes bounds a request body.
const DefaultMaxBodyBytes = 4 << 20

// Defaults of the gateway's timing.
const (
	// DefaultRevalidateInterval: how often the views that have sessions
	// ask again what their identity may use, so that a changed permission
	// reaches an idle agent as list_changed. It matches the lifetime of a
	// remembered allow: asking sooner would be answered from the cache.
	DefaultRevalidateInterval = kubeauth.DefaultAllowTTL
	// viewIdle: a view without sessions or requests for this long is
	// forgotten; the identity's next request makes a new one.
	viewIdle = 5 * time.Minute
)

// Gateway serves every namespace's tools at /namespaces/{namespace}/mcp.
type Gateway struct {
	Registry *registry.Registry
	// Auth decides what a bearer token may use; nil serves without
	// authentication, which the manager allows only on a loopback address.
	Auth         *Access
	Log          logr.Logger
	MaxBodyBytes int64
	// SessionIdleTimeout ends agent sessions unused for that long; zero
	// means DefaultSessionIdleTimeout.
	SessionIdleTimeout time.Duration
	// RevalidateInterval: zero means DefaultRevalidateInterval.
	RevalidateInterval time.Duration
	// TLS, when set, serves HTTPS (AddToManager); nil serves plain HTTP.
	TLS *tls.Config
	// ReadHeaderTimeout and IdleTimeout of the HTTP server; zero means
	// DefaultReadHeaderTimeout and DefaultIdleTimeout.
	ReadHeaderTimeout, IdleTimeout time.Duration
	// TracerProvider receives the spans of requests and tool calls; nil is
	// tracing off. See docs/design.md, "Tracing".
	TracerProvider trace.TracerProvider
	// Budgets bound what one identity and one namespace may hold; zero
	// fields are the defaults.
	Budgets Budgets
	// SessionKeys seal the ids of 2025-11-25 sessions, so that every
	// replica sharing the ring serves them; nil is a random key of this
	// process. See docs/design.md, "Sessions on every replica".
	SessionKeys SessionKeys
	// SessionMaxAge: how long after its start a session may be taken up
	// from its id; zero means DefaultSessionMaxAge.
	SessionMaxAge time.Duration
	// SessionsEnded, when set, is told the keys of the sessions agents
	// DELETE at this gateway and until when they could be taken up,
	// so that the other replicas end them too (EndedElsewhere). It must
	// not block. See docs/design.md, "Sessions on every replica".
	SessionsEnded func(keys []string, until time.Time)

	// DrainDelay is how long the gateway still serves once the manager
	// stops, answering with Connection: close (see drainingServer).
	DrainDelay time.Duration
	// RefusalPause is how long a connection a refusal was answered on
	// waits to be read again (pacing.go); zero means DefaultRefusalPause.
	RefusalPause time.Duration

	draining    atomic.Bool
	posts       atomic.Int64 // requests in flight but GET streams, for draining
	conns       conns        // the server's connections, closed by the drain
	serving     atomic.Bool  // served by a drainingServer, which ends the sessions
	drainedOnce sync.Once
	drained     chan struct{}

	tracer    tracing.Tracer // of TracerProvider, set by Handler
	sealer    *sealer        // made with the first endpoint
	mu        sync.Mutex
	endpoints map[string]*endpoint
}

// Handler routes requests to the namespace endpoints.
func (g *Gateway) Handler() http.Handler {
	g.tracer = tracing.New(g.TracerProvider)
	mux := http.NewServeMux()
	mux.HandleFunc("/namespaces/{namespace}/mcp", g.serve)
	return mux
}

func (g *Gateway) serve(w http.ResponseWriter, r *http.Request) {
	ns := r.PathValue("namespace")
	if r.Method != http.MethodGet {
		g.posts.Add(1)
		defer g.posts.Add(-1)
	} else {
		defer g.conns.hold(r)()
	}
	aw := g.closeWhileDraining(w)
	defer aw.finish()
	defer g.paceRefused(r, aw)
	w = aw
	var rt *requestTrace // nil: tracing off
	if g.tracer.On() {
		rt = g.traceRequest(w, r, ns)
		defer rt.end()
		w = &rt.w
	}
	if errs := validation.IsDNS1123Label(ns); len(errs) > 0 {
		rt.refuse("not_found")
		http.Error(w, "invalid namespace", http.StatusNotFound)
		return
	}
	if g.Auth == nil && !loopbackHost(r.Host) {
		// Without authentication only loopback clients may call: a page
		// that rebinds its own domain to 127.0.0.1 names itself in Host.
		rt.refuse("not_loopback")
		http.Error(w, "without authentication the gateway answers loopback hosts only", http.StatusForbidden)
		return
	}
	if !sameOrigin(r) {
		rt.refuse("cross_origin")
		http.Error(w, "cross-origin request refused", http.StatusForbidden)
		return
	}
	gr, ok := g.authorize(rt, w, r, ns)
	if !ok {
		return
	}
	v, release, err := g.view(r.Context(), ns, gr)
	if err != nil {
		rt.refuse("auth_unavailable")
		g.Log.Error(err, "gateway authorization failed", "namespace", ns)
		http.Error(w, "authorization is unavailable", http.StatusServiceUnavailable)
		return
	}
	defer release()
	maxBody := cmp.Or(g.MaxBodyBytes, DefaultMaxBodyBytes)
	if r.ContentLength > maxBody { // refused before a byte of it is read
		http.Error(w, fmt.Sprintf("the request body of %d bytes is over the gateway's limit of %d", r.ContentLength, maxBody),
			http.StatusRequestEntityTooLarge)
		return
	}
	// One copy of the request, with the span, the grant and its body
	// bounded and counted. The server's own request keeps its body, which
	// net/http checks for what is left unread before it answers.
	req := r.WithContext(withGrant(rt.served(r.Context()), gr))
	body := &countedBody{ReadCloser: http.MaxBytesReader(w, r.Body, maxBody)}
	req.Body = body
	if v.refuseUnread(w, req) {
		return
	}
	refused := v.budgetRefused.Load()
	v.ServeHTTP(w, req)
	if v.budgetRefused.Load() != refused {
		aw.refused = true // maybe by another request of the identity: it is over a budget too
	}
	if aw.bodyRead = body.n; aw.isRefusal() {
		v.e.bodies.spent(body.n) // a large body the SDK decoded and then refused counts twice: it cost twice
	}
}

// authorize writes 401, 403, 429 or 503 and returns false unless the
// caller may use some of ns's McpServers. The token is never logged.
func (g *Gateway) authorize(rt *requestTrace, w http.ResponseWriter, r *http.Request, ns string) (grant, bool) {
	if g.Auth == nil {
		return grant{all: true}, true
	}
	token, ok := kubeauth.BearerToken(r)
	if !ok {
		rt.refuse("unauthorized")
		kubeauth.Unauthorized(w)
		return grant{}, false
	}
	gr, err := g.Auth.grant(r.Context(), token, kubeauth.SourceOf(r), ns)
	if err == nil {
		return gr, true
	}
	if limit := limitOf(err); limit != "" {
		refusedBy(g.Auth.namespaceLabel(r.Context(), ns, limit), limit)
	}
	switch status := authStatus(err); status {
	case http.StatusForbidden:
		rt.refuse("forbidden")
		http.Error(w, `forbidden: the caller may not "use" mcpservers.mcpbridge.dev in namespace `+ns, http.StatusForbidden)
	case http.StatusServiceUnavailable:
		rt.refuse("auth_unavailable")
		g.Log.Error(err, "gateway authorization failed", "namespace", ns)
		kubeauth.WriteAuthenticationError(w, err)
	case http.StatusTooManyRequests:
		rt.refuse("rate_limited")
		w.Header().Set("Retry-After", "1")
		http.Error(w, err.Error(), http.StatusTooManyRequests) // names the limit
	default:
		rt.refuse("unauthorized")
		kubeauth.WriteAuthenticationError(w, err)
	}
	return grant{}, false
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

// view returns the view of gr's identity in ns, filled, and held until
// release is called.
func (g *Gateway) view(ctx context.Context, ns string, gr grant) (*view, func(), error) {
	g.mu.Lock()
	v, release := g.endpointLocked(ns).hold(gr.user)
	g.mu.Unlock()
	if err := v.ensureSynced(ctx); err != nil {
		release()
		return nil, nil, err
	}
	return v, release, nil
}

// endpointLocked is the endpoint of ns, made on first use; g.mu is held.
func (g *Gateway) endpointLocked(ns string) *endpoint {
	if g.endpoints == nil {
		g.endpoints = map[string]*endpoint{}
	}
	g.ensureSealerLocked()
	e := g.endpoints[ns]
	if e == nil {
		e = newEndpoint(ns, g)
		g.endpoints[ns] = e
	}
	return e
}

// ResultBytes is namespace ns's budget of result bytes on this replica
// (--gateway-max-result-bytes-per-namespace), for a call that another
// replica forwarded to this one, its server's owner: it counts what the
// call reads of the upstream's answer, as this replica's own calls count,
// and done gives back what the call still holds once its answer is sent.
// A refusal counts in the refusals metric. See docs/design.md, "Budgets".
func (g *Gateway) ResultBytes(ns string) (rb registry.ResultBytes, done func()) {
	g.mu.Lock()
	e := g.endpointLocked(ns)
	g.mu.Unlock()
	l := &forwardedLease{lease: lease{pool: &e.results}, e: e}
	return l, l.close
}

// ensureSealerLocked makes the sealer of every endpoint; g.mu is held.
func (g *Gateway) ensureSealerLocked() *sealer {
	if g.sealer == nil {
		s := &sealer{keys: g.SessionKeys, maxAge: cmp.Or(g.SessionMaxAge, DefaultSessionMaxAge), now: time.Now,
			tell: g.SessionsEnded}
		if s.keys == nil {
			s.keys = newLocalKeys()
		}
		g.sealer = s
	}
	return g.sealer
}

// EndedElsewhere ends the sessions another replica ended, given by their
// keys (what SessionsEnded was told there) and until when each could be
// taken up: they are not taken up here until then, and a session this
// replica holds under one of them is closed. Keys that are not a session
// key are ignored.
func (g *Gateway) EndedElsewhere(ended map[string]time.Time) {
	g.mu.Lock()
	s := g.ensureSealerLocked()
	g.mu.Unlock()
	keys := make(map[[16]byte]bool, len(ended))
	for k, until := range ended {
		if key, ok := parseEndedKey(k); ok {
			s.ended.addKey(key, until)
			keys[key] = true
		}
	}
	if len(keys) == 0 {
		return
	}
	for _, e := range g.allEndpoints() {
		for _, v := range e.allViews() {
			v.closeSessions(func(id string) bool { return keys[endedKey(id)] })
		}
	}
}

// Start keeps the views equal to the registry and to what their identities
// may use until ctx ends; it is a manager.Runnable that runs on every
// replica.
func (g *Gateway) Start(ctx context.Context) error {
	sub := g.Registry.Subscribe()
	defer sub.Close()
	defer func() {
		if !g.serving.Load() {
			g.closeSessions()
		}
	}()
	idle := cmp.Or(g.SessionIdleTimeout, DefaultSessionIdleTimeout)
	janitor := time.NewTicker(min(idle/4, time.Minute))
	defer janitor.Stop()
	revalidate := time.NewTicker(cmp.Or(g.RevalidateInterval, DefaultRevalidateInterval))
	defer revalidate.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case now := <-janitor.C:
			g.sweep(now, idle)
		case <-revalidate.C:
			if g.Auth != nil {
				for _, e := range g.allEndpoints() {
					e.refreshAll(ctx, true)
				}
			}
		case <-sub.C:
			for _, ns := range sub.Drain() {
				g.mu.Lock()
				e := g.endpoints[ns]
				g.mu.Unlock()
				if e != nil {
					e.refreshAll(ctx, false)
				}
			}
		}
	}
}

// sweep ends idle sessions and forgets the views and endpoints that serve
// nothing.
func (g *Gateway) sweep(now time.Time, idle time.Duration) {
	for _, e := range g.allEndpoints() {
		for _, v := range e.allViews() {
			v.closeIdle(now, idle)
		}
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.sealer != nil {
		g.sealer.ended.prune(now)
	}
	for ns, e := range g.endpoints {
		e.reap(now, viewIdle)
		if e.empty() {
			delete(g.endpoints, ns)
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
		for _, v := range e.allViews() {
			for ss := range v.server.Sessions() {
				_ = ss.Close()
			}
		}
	}
}

// NeedLeaderElection is false: every replica serves every namespace's
// tools (docs/design.md, "Replicas and ownership").
func (g *Gateway) NeedLeaderElection() bool { return false }

// The gateway's HTTP server: a client may not hold a connection open
// without sending its headers, and a kept-alive connection without a
// request is closed after a while (an agent's open SSE stream is a request
// in progress, which neither limit ends).
const (
	DefaultReadHeaderTimeout = 10 * time.Second
	DefaultIdleTimeout       = 2 * time.Minute
	gatewayShutdown          = 10 * time.Second
	maxHeaderBytes           = 64 << 10
)

// httpServer is the gateway's HTTP server.
func (g *Gateway) httpServer() *http.Server {
	return &http.Server{
		Handler:           g.Handler(),
		ReadHeaderTimeout: cmp.Or(g.ReadHeaderTimeout, DefaultReadHeaderTimeout),
		IdleTimeout:       cmp.Or(g.IdleTimeout, DefaultIdleTimeout),
		MaxHeaderBytes:    maxHeaderBytes,
		ConnContext:       withConn,
		ConnState:         g.connState,
	}
}

// AddToManager serves the gateway on ln from every replica, and keeps its
// endpoints in step with the registry. The manager closes ln when it
// stops. With g.TLS set, the
// listener speaks TLS (HTTP/1.1 only, like the metrics server without
// --enable-http2): every connection is one agent's, which pacing relies on.
func (g *Gateway) AddToManager(mgr manager.Manager, ln net.Listener) error {
	if err := mgr.Add(g); err != nil {
		return err
	}
	srv, ln := g.Server(ln)
	g.serving.Store(true)
	return mgr.Add(&drainingServer{g: g, srv: srv, ln: ln})
}

// drainingServer serves the gateway until the manager stops, then drains:
// for DrainDelay it still serves, every answer with Connection: close, so
// that agents' next requests go to other replicas while the Service stops
// sending new connections here (readiness fails at once); then it stops
// accepting, finishes the requests in flight (at most gatewayShutdown),
// cuts the open GET streams and ends the agents' sessions, which other
// replicas take up.
// See docs/design.md, "Replicas and ownership" (shutdown).
type drainingServer struct {
	g   *Gateway
	srv *http.Server
	ln  net.Listener
}

func (d *drainingServer) NeedLeaderElection() bool { return false }

func (d *drainingServer) Start(ctx context.Context) error {
	defer close(d.g.drainedChan())
	served := make(chan error, 1)
	go func() { served <- d.srv.Serve(d.ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
	}
	d.g.draining.Store(true)
	select {
	case err := <-served:
		return err
	case <-time.After(d.g.DrainDelay):
	}
	// Stop accepting and serve what the connections here still send: an
	// agent calling all along has had each of them closed by an answer
	// with Connection: close meanwhile, and a request that reaches one now
	// is answered the same way (Shutdown would drop it unanswered). A
	// connection idle since before the drain is closed. Open GET streams
	// are cut once no POST is in flight (their connections are not reused,
	// their agents reopen them elsewhere and the sealed session is taken
	// up there); only then are the sessions ended, which would otherwise
	// end the streams' responses cleanly and leave their connections idle,
	// where an agent's next POST could race the close.
	_ = d.ln.Close()
	deadline := time.Now().Add(gatewayShutdown)
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for d.g.conns.closeIdle(d.g.posts.Load() == 0) > 0 {
		if time.Now().After(deadline) {
			d.g.Log.Info("gateway requests still running after the drain were cut", "after", gatewayShutdown)
			break
		}
		<-tick.C
	}
	_ = d.srv.Close()
	<-served
	d.g.closeSessions()
	return nil
}

// closeWhileDraining makes every answer that starts while the gateway
// drains close its connection, so that the agent's next request goes to
// another replica: an answer of a request that began before the drain too,
// and over the SDK's own "Connection: keep-alive" on its SSE answers. An
// answer without it leaves the connection idle here until the drain closes
// it, maybe under the agent's next POST, which the agent's HTTP client does
// not send again (it retries only idempotent requests). See
// docs/design.md, "Replicas and ownership" (shutdown).
func (g *Gateway) closeWhileDraining(w http.ResponseWriter) *answerWriter {
	h := w.Header()
	return &answerWriter{ResponseWriter: w, onAnswer: func() {
		if g.draining.Load() {
			h.Set("Connection", "close")
		}
	}}
}

// Drained is closed once the gateway has stopped serving and finished
// the requests in flight, or never served (AddToManager not called).
func (g *Gateway) Drained() <-chan struct{} { return g.drainedChan() }

func (g *Gateway) drainedChan() chan struct{} {
	g.drainedOnce.Do(func() { g.drained = make(chan struct{}) })
	return g.drained
}

// TLSConfig serves the certificate that getCertificate returns (e.g. a
// controller-runtime certwatcher's, which reloads tls.crt and tls.key when
// they change), over TLS 1.2 or later and HTTP/1.1 only, which shuts out
// the HTTP/2 rapid-reset attacks.
func TLSConfig(getCertificate func(*tls.ClientHelloInfo) (*tls.Certificate, error)) *tls.Config {
	return &tls.Config{GetCertificate: getCertificate, MinVersion: tls.VersionTLS12, NextProtos: []string{"http/1.1"}}
}
