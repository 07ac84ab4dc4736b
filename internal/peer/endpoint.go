package peer

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	stdlog "log"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/go-logr/logr"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
	ctrl "sigs.k8s.io/controller-runtime"

	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/tracing"
)

// LocalFunc finds the caller of an owner's tool set that this replica
// runs itself (its supervisor), or reports false. It never returns a
// forwarding caller: a call that reached the endpoint is not sent on.
type LocalFunc func(namespace, owner string) (registry.Caller, bool)

// The endpoint's HTTP server: peers keep connections open between calls
// (the client closes idle ones first), and a call in flight at shutdown
// is given time to finish.
const (
	readHeaderTimeout      = 10 * time.Second
	serverIdleTimeout      = 2 * time.Minute
	maxHeaderBytes         = 16 << 10
	DefaultShutdownTimeout = 25 * time.Second
)

// spanForward names the spans of a forward, on both replicas.
const spanForward = "mcpbridge.forward"

// Endpoint serves the replicas' internal endpoint over mutual TLS. It is a
// manager.Runnable that runs on every replica, leader or not.
type Endpoint struct {
	bindAddress     string
	id              *identity
	local           LocalFunc
	onEnded         func([]EndedSession)
	results         func(namespace string) (registry.ResultBytes, func())
	log             logr.Logger
	tracer          tracing.Tracer
	shutdownTimeout time.Duration

	mu    sync.Mutex
	addr  net.Addr
	bound chan struct{}
	ended chan struct{}
}

func newEndpoint(cfg *Config, id *identity, tracer tracing.Tracer) *Endpoint {
	return &Endpoint{bindAddress: cfg.BindAddress, id: id, local: cfg.Local, onEnded: cfg.Ended, results: cfg.Results, log: cfg.Log, tracer: tracer,
		shutdownTimeout: cfg.ShutdownTimeout, bound: make(chan struct{}), ended: make(chan struct{})}
}

// NeedLeaderElection is false: every replica serves its endpoint.
func (e *Endpoint) NeedLeaderElection() bool { return false }

// Bound is closed once the endpoint listens; Addr is then its address.
func (e *Endpoint) Bound() <-chan struct{} { return e.bound }

// Ended is closed once Start has returned: the calls the endpoint took
// have finished, or were cut at the shutdown timeout.
func (e *Endpoint) Ended() <-chan struct{} { return e.ended }

// Addr is the address the endpoint listens on, nil before Bound.
func (e *Endpoint) Addr() net.Addr {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.addr
}

// Start listens on the bind address and serves until ctx ends, then shuts
// down: no new connection is accepted, idle ones are closed, and calls in
// flight finish (within the shutdown timeout).
func (e *Endpoint) Start(ctx context.Context) error {
	defer close(e.ended)
	ln, err := e.listen()
	if err != nil {
		return err
	}
	srv := e.httpServer(ctx)
	serveErr := make(chan error, 1)
	go func() { serveErr <- srv.Serve(tls.NewListener(ln, e.id.serverTLS())) }()
	e.log.Info("serving the replicas' endpoint", "address", ln.Addr().String())
	select {
	case err := <-serveErr:
		return fmt.Errorf("the replicas' endpoint stopped: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.shutdownTimeout)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		_ = srv.Close()
		return fmt.Errorf("the replicas' endpoint did not finish its calls within %s: %w", e.shutdownTimeout, err)
	}
	return nil
}

// listen binds the endpoint's address and makes it known (Bound, Addr).
func (e *Endpoint) listen() (net.Listener, error) {
	ln, err := net.Listen("tcp", e.bindAddress)
	if err != nil {
		return nil, fmt.Errorf("the replicas' endpoint cannot listen on %s: %w", e.bindAddress, err)
	}
	e.mu.Lock()
	e.addr = ln.Addr()
	e.mu.Unlock()
	close(e.bound)
	return ln, nil
}

// httpServer serves the endpoint. Requests' contexts outlive ctx, so that
// calls in flight at shutdown finish; they end when their caller goes.
func (e *Endpoint) httpServer(ctx context.Context) *http.Server {
	return &http.Server{
		Handler:           e,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       serverIdleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		BaseContext:       func(net.Listener) context.Context { return ctrl.LoggerInto(context.WithoutCancel(ctx), e.log) },
		// A refused handshake is a peer's (or an intruder's) problem,
		// counted by the peer; a log line per refusal would let anyone
		// who can connect fill the log.
		ErrorLog: stdlog.New(io.Discard, "", 0),
	}
}

// ServeHTTP answers POST CallPath (serveCall) and POST EndedPath
// (serveEnded).
func (e *Endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	serve := e.serveCall
	switch {
	case r.URL.Path == EndedPath && e.onEnded != nil:
		serve = e.serveEnded
	case r.URL.Path != CallPath:
		http.NotFound(w, r)
		return
	}
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		writeFailure(w, http.StatusMethodNotAllowed, failure{Error: codeBadRequest, Message: "POST only"})
		return
	}
	serve(w, r)
}

// readRequest decodes r's body into v, within MaxBodyBytes, or answers
// the failure and reports false.
func readRequest(w http.ResponseWriter, r *http.Request, v any) bool {
	err := json.NewDecoder(http.MaxBytesReader(w, r.Body, MaxBodyBytes)).Decode(v)
	if err == nil {
		return true
	}
	status := http.StatusBadRequest
	if _, tooLarge := errors.AsType[*http.MaxBytesError](err); tooLarge {
		status = http.StatusRequestEntityTooLarge
	}
	writeFailure(w, status, failure{Error: codeBadRequest, Message: "the request cannot be read"})
	return false
}

// serveCall runs the call on the local caller of its owner, once, or
// answers not_owner.
func (e *Endpoint) serveCall(w http.ResponseWriter, r *http.Request) {
	var c Call
	if !readRequest(w, r, &c) {
		return
	}
	ctx, span := e.startSpan(r, &c)
	defer span.End()
	caller, ok := e.local(c.Namespace, c.Owner)
	if !ok {
		notServed(w, span)
		return
	}
	if e.results != nil {
		rb, done := e.results(c.Namespace)
		defer done() // once the answer is written
		ctx = registry.WithResultBytes(ctx, rb)
	}
	res, isError, err := callLocal(ctx, caller, &c)
	if errors.Is(err, registry.ErrNotServing) { // retired for a handoff: not called
		notServed(w, span)
		return
	}
	if errors.Is(err, registry.ErrResultBudget) {
		err = fmt.Errorf("%w on the replica that owns the server, for the calls of namespace %s; retry later", registry.ErrResultBudget, c.Namespace)
	}
	if err != nil {
		tracing.Fail(span, tracing.ErrorType(err), "the owner's call failed")
		writeFailure(w, http.StatusBadGateway, failure{Error: codeCallFailed, Message: err.Error()})
		return
	}
	if span.IsRecording() {
		outcome := tracing.OutcomeSuccess
		if isError {
			outcome = tracing.OutcomeToolError
		}
		tracing.SetAttributes(span, tracing.Outcome.String(outcome))
	}
	writeBody(w, http.StatusOK, encodeAnswer(res, isError))
}

// notServed answers not_owner: the call was not made here, and the
// sending replica sends it to the owner it computes next.
func notServed(w http.ResponseWriter, span trace.Span) {
	tracing.Fail(span, codeNotOwner, "not served by this replica")
	writeFailure(w, http.StatusConflict, failure{Error: codeNotOwner})
}

// serveEnded hands the sessions another replica ended to this replica's
// (Config.Ended), at most maxEndedPerRequest of them.
func (e *Endpoint) serveEnded(w http.ResponseWriter, r *http.Request) {
	var ended []EndedSession
	if !readRequest(w, r, &ended) {
		return
	}
	if len(ended) > maxEndedPerRequest {
		writeFailure(w, http.StatusRequestEntityTooLarge, failure{Error: codeBadRequest,
			Message: fmt.Sprintf("more than %d sessions", maxEndedPerRequest)})
		return
	}
	e.onEnded(ended)
	w.WriteHeader(http.StatusNoContent)
}

// startSpan continues the forwarding replica's trace (its traceparent
// header) with a SERVER span for the hop.
func (e *Endpoint) startSpan(r *http.Request, c *Call) (context.Context, trace.Span) {
	if !e.tracer.On() {
		return r.Context(), trace.SpanFromContext(context.Background())
	}
	ctx := e.tracer.Extract(r.Context(), r.Header, nil)
	return e.tracer.Start(ctx, spanForward, trace.SpanKindServer,
		semconv.McpMethodNameKey.String("tools/call"), semconv.GenAIToolName(c.Tool), tracing.Namespace.String(c.Namespace))
}

// callLocal runs the call on the owner's caller: through its JSON path
// when it has one (the arguments and the result stay bytes), unless the
// forwarding replica was called through the SDK. The JSON path counts what
// it reads into the budget ctx carries; on the SDK's path the upstream's
// session has read and decoded the result, and its JSON, held until it is
// sent, is counted here, as the gateway counts the results of its own SDK
// path (docs/design.md, "Budgets").
func callLocal(ctx context.Context, caller registry.Caller, c *Call) (json.RawMessage, bool, error) {
	if jc, ok := caller.(registry.JSONCaller); ok && !c.SDK {
		return jc.CallToolJSON(ctx, c.Tool, c.Arguments)
	}
	var args any
	if len(c.Arguments) > 0 {
		args = c.Arguments
	}
	res, err := caller.CallTool(ctx, c.Tool, args)
	if err != nil {
		return nil, false, err
	}
	b, err := json.Marshal(res)
	if err != nil {
		return nil, false, fmt.Errorf("encode the result: %w", err)
	}
	if rb := registry.ResultBytesFrom(ctx); rb != nil && !rb.Take(int64(len(b))) {
		return nil, false, registry.ErrResultBudget
	}
	return b, res.IsError, nil
}

func writeFailure(w http.ResponseWriter, status int, f failure) { writeJSON(w, status, f) }

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = http.StatusInternalServerError, []byte(`{"error":"encode"}`)
	}
	writeBody(w, status, b)
}

func writeBody(w http.ResponseWriter, status int, b []byte) {
	w.Header()["Content-Type"] = []string{"application/json"}
	w.Header()["Content-Length"] = []string{strconv.Itoa(len(b))}
	w.WriteHeader(status)
	_, _ = w.Write(b)
}
