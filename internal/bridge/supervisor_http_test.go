package bridge

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-logr/logr/funcr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/test/fixture"
)

// Protocol versions the SDK negotiates with the fixture's two HTTP handlers.
const (
	httpStatefulVersion  = "2025-11-25"
	httpStatelessVersion = "2026-07-28"
)

// httpRecord is one HTTP request an httpUpstream served.
type httpRecord struct {
	Method    string          // HTTP method
	RPCMethod string          // JSON-RPC method of a POSTed message, "" otherwise
	RPCID     json.RawMessage // JSON-RPC id of a POSTed call, nil otherwise
	Header    http.Header
	Proto     int // HTTP's major version
	// MetaTraceparent is a POSTed message's params._meta.traceparent.
	MetaTraceparent string
	// Cursor is a POSTed message's params.cursor.
	Cursor string
}

func (r httpRecord) sessionID() string { return r.Header.Get("Mcp-Session-Id") }

// httpUpstream is an httptest server on 127.0.0.1 (a free port) whose handler
// can be swapped while it runs, recording every request it serves. An
// optional intercept may answer a request instead of the handler.
type httpUpstream struct {
	srv       *httptest.Server
	handler   atomic.Pointer[http.Handler]
	intercept atomic.Pointer[func(http.ResponseWriter, httpRecord) bool]
	inFlight  atomic.Int64 // POSTs being served right now

	mu   sync.Mutex
	reqs []httpRecord
}

// httpServe serves h until the test ends. Register it before the supervisor
// (startSupervisor) so that the supervisor is disposed first.
func httpServe(t *testing.T, h http.Handler) *httpUpstream {
	return httpServeWith(t, h, (*httptest.Server).Start)
}

// httpServeHTTP2 is httpServe over TLS with HTTP/2, each of before run on
// the server before it starts; the option it returns makes a supervisor
// trust the server's certificate.
func httpServeHTTP2(t *testing.T, h http.Handler, before ...func(*httptest.Server)) (*httpUpstream, func(*Options)) {
	u := httpServeWith(t, h, func(srv *httptest.Server) {
		for _, b := range before {
			b(srv)
		}
		srv.EnableHTTP2 = true
		srv.StartTLS()
	})
	trust := u.srv.Client().Transport.(*http.Transport).TLSClientConfig.Clone()
	return u, func(o *Options) { o.tls = trust }
}

// httpServeWith is httpServe with start in place of (*httptest.Server).Start.
func httpServeWith(t *testing.T, h http.Handler, start func(*httptest.Server)) *httpUpstream {
	t.Helper()
	u := &httpUpstream{}
	u.handler.Store(&h)
	u.srv = httptest.NewUnstartedServer(u)
	start(u.srv)
	t.Cleanup(func() {
		// Ends hung handlers and open SSE streams, so Close cannot block.
		u.srv.CloseClientConnections()
		u.srv.Close()
	})
	return u
}

func (u *httpUpstream) URL() string { return u.srv.URL + "/mcp" }

// swap makes h answer every later request.
func (u *httpUpstream) swap(h http.Handler) { u.handler.Store(&h) }

func (u *httpUpstream) setIntercept(f func(http.ResponseWriter, httpRecord) bool) {
	if f == nil {
		u.intercept.Store(nil)
		return
	}
	u.intercept.Store(&f)
}

func (u *httpUpstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	rec := httpRecord{Method: r.Method, Header: r.Header.Clone(), Proto: r.ProtoMajor}
	if r.Method == http.MethodPost && r.Body != nil {
		body, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(body))
		var m struct {
			Method string          `json:"method"`
			ID     json.RawMessage `json:"id"`
			Params struct {
				Meta struct {
					Traceparent string `json:"traceparent"`
				} `json:"_meta"`
				Cursor string `json:"cursor"`
			} `json:"params"`
		}
		if json.Unmarshal(body, &m) == nil {
			rec.RPCMethod, rec.RPCID, rec.MetaTraceparent, rec.Cursor = m.Method, m.ID, m.Params.Meta.Traceparent, m.Params.Cursor
		}
		u.inFlight.Add(1)
		defer u.inFlight.Add(-1)
	}
	u.mu.Lock()
	u.reqs = append(u.reqs, rec)
	u.mu.Unlock()
	if f := u.intercept.Load(); f != nil && (*f)(w, rec) {
		return
	}
	(*u.handler.Load()).ServeHTTP(w, r)
}

func (u *httpUpstream) requests() []httpRecord {
	u.mu.Lock()
	defer u.mu.Unlock()
	return slices.Clone(u.reqs)
}

// lastCall is the latest POSTed JSON-RPC request with the given method.
func (u *httpUpstream) lastCall(method string) (httpRecord, bool) {
	reqs := u.requests()
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].RPCMethod == method {
			return reqs[i], true
		}
	}
	return httpRecord{}, false
}

// httpFixture is an in-process fixture server's Streamable HTTP handler,
// closed when the test ends.
func httpFixture(t *testing.T, o fixture.Options) *fixture.HTTPHandler {
	t.Helper()
	h, err := fixture.NewHTTPHandler(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = h.Close() })
	return h
}

func httpRawNames(tools []registry.Tool) []string {
	out := make([]string, len(tools))
	for i, t := range tools {
		out[i] = t.RawName
	}
	return out
}

// httpToolsJSON is the published upstream definitions, for comparing two
// sets entry by entry (names, descriptions, schemas, order).
func httpToolsJSON(t *testing.T, tools []registry.Tool) string {
	t.Helper()
	ups := make([]*mcp.Tool, len(tools))
	for i, tl := range tools {
		ups[i] = tl.Upstream()
	}
	b, err := json.Marshal(ups)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func httpCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), eventually)
	t.Cleanup(cancel)
	return ctx
}

// httpEcho calls the fixture's echo tool and checks the answer.
func httpEcho(t *testing.T, s *Supervisor, text string) {
	t.Helper()
	res, err := s.CallTool(httpCtx(t), fixture.ToolEcho, map[string]any{"text": text})
	if err != nil {
		t.Fatalf("echo: %v", err)
	}
	if err := ResultError(res); err != nil {
		t.Fatalf("echo: %v", err)
	}
	if got := RenderText(res); got != text {
		t.Fatalf("echo answered %q, want %q", got, text)
	}
}

// httpForEachProtocol runs fn against the fixture's stateful handler
// (2025-11-25, session id) and its stateless one (2026-07-28).
func httpForEachProtocol(t *testing.T, fn func(t *testing.T, stateless bool)) {
	for _, tc := range []struct {
		name      string
		stateless bool
	}{{"stateful-" + httpStatefulVersion, false}, {"stateless-" + httpStatelessVersion, true}} {
		t.Run(tc.name, func(t *testing.T) { fn(t, tc.stateless) })
	}
}

// httpServeFunc starts an upstream serving h until the test ends, and
// returns the options a supervisor needs to reach it.
type httpServeFunc func(t *testing.T, h http.Handler) (*httpUpstream, []func(*Options))

// httpForEachWire runs fn over HTTP/1.1 in clear and over HTTP/2 with TLS,
// where a server's GET stream and its POSTs share one connection
// (docs/design.md, "Replicas and ownership": memory).
func httpForEachWire(t *testing.T, fn func(t *testing.T, serve httpServeFunc)) {
	for _, w := range []struct {
		name  string
		serve httpServeFunc
	}{
		{"http1.1", func(t *testing.T, h http.Handler) (*httpUpstream, []func(*Options)) { return httpServe(t, h), nil }},
		{"http2-over-tls", func(t *testing.T, h http.Handler) (*httpUpstream, []func(*Options)) {
			up, trust := httpServeHTTP2(t, h)
			return up, []func(*Options){trust}
		}},
	} {
		t.Run(w.name, func(t *testing.T) { fn(t, w.serve) })
	}
}

// httpPoll waits until cond holds.
func httpPoll(t *testing.T, what string, cond func() bool) {
	t.Helper()
	NewWithT(t).Eventually(cond, eventually, 5*time.Millisecond).Should(BeTrue(), "waiting for %s", what)
}

// httpSilentListener accepts TCP connections on 127.0.0.1 and never answers
// anything; everything is closed when the test ends.
func httpSilentListener(t *testing.T) (addr string, accepted *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	accepted = new(atomic.Int64)
	var mu sync.Mutex
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		<-done
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String(), accepted
}

// The stateful handler negotiates 2025-11-25 with a session id, the stateless
// one 2026-07-28 without; both publish the fixture's tools and serve calls.
func TestHTTPNegotiatesProtocolVersionOfStatefulAndStatelessHandlers(t *testing.T) {
	httpForEachProtocol(t, func(t *testing.T, stateless bool) {
		up := httpServe(t, httpFixture(t, fixture.Options{Stateless: stateless}))
		s, reg := startSupervisor(t, httpPolicy(up.URL()))
		sn := waitFor(t, s, "Ready", isReady)

		want := httpStatefulVersion
		if stateless {
			want = httpStatelessVersion
		}
		if sn.ServerInfo == nil || sn.ServerInfo.ProtocolVersion != want {
			t.Fatalf("server info %+v, want protocol version %s", sn.ServerInfo, want)
		}
		if sn.ServerInfo.Name != fixture.DefaultServerName {
			t.Errorf("server name %q, want %q", sn.ServerInfo.Name, fixture.DefaultServerName)
		}
		if got := httpRawNames(sn.Tools); !slices.Equal(got, fixture.BuiltinTools) {
			t.Fatalf("published raw names %v, want %v", got, fixture.BuiltinTools)
		}
		if got := toolNames(reg.Tools("ns")); !slices.Equal(got, toolNames(sn.Tools)) {
			t.Fatalf("registry %v, snapshot %v", got, toolNames(sn.Tools))
		}
		httpEcho(t, s, "hello over "+want)

		call, ok := up.lastCall("tools/call")
		if !ok {
			t.Fatal("the server saw no tools/call")
		}
		if stateless && call.sessionID() != "" {
			t.Errorf("stateless call carried session id %q", call.sessionID())
		}
		if !stateless && call.sessionID() == "" {
			t.Error("stateful call carried no session id")
		}
	})
}

// A 404 to a request carrying the session id is a session loss,
// whatever the body. The supervisor reconnects with a new session and
// republishes an identical tool set without disturbing registry readers.
// See docs/design.md, "Detecting loss".
func TestHTTPSessionLossReconnectsWithNewSessionAndIdenticalTools(t *testing.T) {
	for _, tc := range []struct {
		name    string
		jsonrpc bool
	}{
		{"plain-404", false},
		// The SDK alone treats this as a one-off call error and keeps the
		// session open; only the supervisor's round-tripper notices.
		{"jsonrpc-32001-404", true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			up := httpServe(t, httpFixture(t, fixture.Options{
				SessionExpireAfter:   500 * time.Millisecond,
				SessionExpireJSONRPC: tc.jsonrpc,
			}))
			p := httpPolicy(up.URL())
			p.HealthCheckInterval = 200 * time.Millisecond
			s, reg := startSupervisor(t, p)
			sn1 := waitFor(t, s, "Ready", isReady)
			if sn1.Generation != 1 {
				t.Fatalf("first Ready in generation %d", sn1.Generation)
			}
			call1, _ := up.lastCall("initialize")
			var first string
			for _, r := range up.requests() {
				if id := r.sessionID(); id != "" {
					first = id
					break
				}
			}
			if first == "" {
				t.Fatalf("no request carried a session id; initialize: %+v", call1)
			}
			sub := reg.Subscribe()
			defer sub.Close()

			sn2 := waitFor(t, s, "Ready in a new generation", func(sn Snapshot) bool {
				return sn.Phase == v1alpha1.PhaseReady && sn.Generation >= 2
			})
			if sn2.LastError == nil || !errors.Is(sn2.LastError, mcp.ErrSessionMissing) {
				t.Errorf("last error %v, want the session loss (ErrSessionMissing)", sn2.LastError)
			}
			if got, want := toolNames(sn2.Tools), toolNames(sn1.Tools); !slices.Equal(got, want) {
				t.Fatalf("tools changed across the reconnect: %v -> %v", want, got)
			}
			if got, want := httpToolsJSON(t, sn2.Tools), httpToolsJSON(t, sn1.Tools); got != want {
				t.Fatalf("tool definitions changed across the reconnect:\n%s\n->\n%s", want, got)
			}
			select {
			case <-sub.C:
				t.Errorf("the registry signalled a change for an unchanged tool set: %v", sub.Drain())
			default:
			}

			httpEcho(t, s, "after the session loss")
			call, _ := up.lastCall("tools/call")
			if id := call.sessionID(); id == "" || id == first {
				t.Fatalf("the call after reconnecting used session %q; the lost one was %q", id, first)
			}
		})
	}
}

// A transport failure (5xx) makes the supervisor probe; a failed
// probe is a connection loss. Once the server answers again, it recovers.
// See docs/design.md, "Detecting loss".
func TestHTTP5xxIsDetectedAndRecoversWhenServerAnswersAgain(t *testing.T) {
	run := func(t *testing.T, stateless bool, interval time.Duration, callFirst bool) {
		up := httpServe(t, httpFixture(t, fixture.Options{Stateless: stateless, Fail5xxAfter: 500 * time.Millisecond}))
		p := httpPolicy(up.URL())
		p.HealthCheckInterval = interval
		s, _ := startSupervisor(t, p)
		sn1 := waitFor(t, s, "Ready", isReady)
		if sn1.Generation != 1 {
			t.Fatalf("first Ready in generation %d", sn1.Generation)
		}
		if callFirst {
			// Calls fail once the fixture answers 503 ...
			var callErr error
			httpPoll(t, "a call to fail with 503", func() bool {
				_, callErr = s.CallTool(httpCtx(t), fixture.ToolEcho, map[string]any{"text": "x"})
				return callErr != nil
			})
			var se *StageError
			if !errors.As(callErr, &se) || se.Stage != StageToolsCall {
				t.Fatalf("failed call: %v, want a tools-call stage error", callErr)
			}
			t.Logf("call during the outage: %v", callErr)
		}
		// ... and the supervisor notices that the server is gone.
		lost := waitFor(t, s, "Reconnecting", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseReconnecting })
		t.Logf("loss: %v", lost.LastError)
		// Once a reconnect is scheduled, calls fail fast and say so.
		// See docs/design.md, "Backoff and the attempt budget".
		waitFor(t, s, "a scheduled reconnect", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseReconnecting && sn.Attempt > 0 })
		_, err := s.CallTool(httpCtx(t), fixture.ToolEcho, map[string]any{"text": "x"})
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), "reconnecting (attempt") {
			t.Errorf("call while reconnecting: %v, want ErrUnavailable naming the attempt", err)
		}

		up.swap(httpFixture(t, fixture.Options{Stateless: stateless}))
		sn2 := waitFor(t, s, "Ready again", func(sn Snapshot) bool {
			return sn.Phase == v1alpha1.PhaseReady && sn.Generation >= 2
		})
		if got, want := toolNames(sn2.Tools), toolNames(sn1.Tools); !slices.Equal(got, want) {
			t.Fatalf("tools changed across the outage: %v -> %v", want, got)
		}
		httpEcho(t, s, "after the outage")
	}
	// No periodic probe: only the failed call can trigger the probe.
	t.Run("failed-call-triggers-probe/stateful", func(t *testing.T) { run(t, false, 0, true) })
	t.Run("failed-call-triggers-probe/stateless", func(t *testing.T) { run(t, true, 0, true) })
	// No calls: only the periodic health check can notice.
	t.Run("idle-health-check/stateful", func(t *testing.T) { run(t, false, 200*time.Millisecond, false) })
	t.Run("idle-health-check/stateless", func(t *testing.T) { run(t, true, 200*time.Millisecond, false) })
}

// A silently dead upstream (requests never answered) is found by
// the health check: two probes that time out after half the interval are a
// loss, and the supervisor keeps reconnecting (nothing of an HTTP generation
// can outlive the close barrier).
// See docs/design.md, "Detecting loss".
func TestHTTPHangIsDetectedByHealthCheck(t *testing.T) {
	httpForEachWire(t, func(t *testing.T, serve httpServeFunc) {
		httpForEachProtocol(t, func(t *testing.T, stateless bool) {
			up, opts := serve(t, httpFixture(t, fixture.Options{Stateless: stateless, HangAfter: 500 * time.Millisecond}))
			p := httpPolicy(up.URL())
			p.HealthCheckInterval = 200 * time.Millisecond
			p.ConnectionTimeout = 300 * time.Millisecond
			s, _ := startSupervisor(t, p, opts...)
			waitFor(t, s, "Ready", isReady)

			lost := waitFor(t, s, "Reconnecting", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseReconnecting })
			if lost.LastError == nil || lost.LastError.Stage != StageHealthCheck {
				t.Fatalf("loss reported as %v, want stage %s", lost.LastError, StageHealthCheck)
			}
			if !strings.Contains(lost.LastError.Message(), "100ms") {
				t.Errorf("loss %q does not name the probe timeout (half of 200ms)", lost.LastError.Message())
			}
			// The next attempt starts and fails on the connection budget; the
			// lost generation's close must not have stopped the supervisor.
			sn := waitFor(t, s, "a failed reconnect attempt", func(sn Snapshot) bool {
				return sn.FailedAttempts >= 2 || sn.Phase == v1alpha1.PhaseFailed
			})
			if sn.Phase == v1alpha1.PhaseFailed {
				t.Fatalf("the supervisor stopped on a hung HTTP server: %s / %s (last error: %v)", sn.Reason, sn.Message, sn.LastError)
			}
			if sn.LastError == nil || !IsDeadline(sn.LastError) {
				t.Errorf("reconnect attempt failed with %v, want the 300ms connection budget", sn.LastError)
			}
		})
	})
}

// Disposal takes at most the close barrier even when the server
// hangs; here, well under it: nothing of an HTTP generation needs to wait.
// See docs/design.md, "Hot swap and disposal".
func TestHTTPDisposeIsPromptWhileRequestsHang(t *testing.T) {
	httpForEachWire(t, func(t *testing.T, serve httpServeFunc) {
		httpForEachProtocol(t, func(t *testing.T, stateless bool) {
			const hangAfter = 500 * time.Millisecond
			up, opts := serve(t, httpFixture(t, fixture.Options{Stateless: stateless, HangAfter: hangAfter}))
			hangsFrom := time.Now().Add(hangAfter) // the fixture started before now
			p := httpPolicy(up.URL())
			s, _ := startSupervisor(t, p, opts...)
			waitFor(t, s, "Ready", isReady)

			time.Sleep(time.Until(hangsFrom)) // the configured fault delay, not a speed guess
			callDone := make(chan error, 1)
			go func() {
				_, err := s.CallTool(context.Background(), fixture.ToolEcho, map[string]any{"text": "x"})
				callDone <- err
			}()
			httpPoll(t, "the call to hang at the server", func() bool { return up.inFlight.Load() >= 1 })

			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			start := time.Now()
			if err := s.Dispose(ctx); err != nil {
				t.Fatalf("dispose: %v", err)
			}
			took := time.Since(start)
			t.Logf("dispose took %v", took)
			// The requests hang until the fixture closes: waiting for them would
			// end only at the close barrier, with an error, or at the context's
			// 10 s. The design target (200 ms) is the benchmark's to measure.
			if took >= 5*time.Second {
				t.Errorf("dispose took %v while requests hang: it waited for them", took)
			}
			select {
			case err := <-callDone:
				if err == nil {
					t.Error("the hung call succeeded")
				}
			case <-time.After(eventually):
				t.Error("the hung call did not end with the disposal")
			}
		})
	})
}

// An endpoint that accepts and never answers spends the
// whole connectionTimeoutMs budget in initialize; with failOnStartupError
// that first failure is final.
// See docs/design.md, "The connection budget" and "Startup".
func TestHTTPUnresponsiveEndpointFailsAtConnectionBudgetInInitialize(t *testing.T) {
	t.Run("failOnStartupError", func(t *testing.T) {
		addr, accepted := httpSilentListener(t)
		p := httpPolicy("http://" + addr + "/mcp")
		p.ConnectionTimeout = 300 * time.Millisecond
		p.FailOnStartupError = true
		start := time.Now()
		s, reg := startSupervisor(t, p)
		sn := waitFor(t, s, "Failed", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseFailed })
		took := time.Since(start)
		t.Logf("failed after %v (%d connections accepted): %v", took, accepted.Load(), sn.LastError)

		if sn.Reason != v1alpha1.ReasonStartupFailed {
			t.Errorf("reason %q, want %q", sn.Reason, v1alpha1.ReasonStartupFailed)
		}
		if sn.LastError == nil || sn.LastError.Stage != StageInitialize {
			t.Fatalf("last error %v, want stage %s", sn.LastError, StageInitialize)
		}
		if !IsDeadline(sn.LastError) || !strings.Contains(sn.LastError.Message(), "300ms") {
			t.Errorf("last error %q does not name the 300ms budget", sn.LastError.Message())
		}
		if !strings.Contains(sn.Message, "300ms") {
			t.Errorf("message %q does not name the 300ms budget", sn.Message)
		}
		if took < 300*time.Millisecond {
			t.Errorf("gave up after %v, before the 300ms budget was spent", took)
		}
		if took > 10*time.Second {
			t.Errorf("gave up after %v, long after the 300ms budget", took)
		}
		if accepted.Load() == 0 {
			t.Error("the endpoint was never reached")
		}
		if sn.Generation != 1 || sn.FailedAttempts != 1 {
			t.Errorf("generation %d, failed attempts %d; want one attempt", sn.Generation, sn.FailedAttempts)
		}
		if tools := reg.Tools("ns"); len(tools) != 0 {
			t.Errorf("tools published: %v", toolNames(tools))
		}
	})
	// Disposal aborts the hung connect at once instead of
	// waiting for the budget (here 10 s) or anything else. What the SDK does
	// on cancellation is racy, so the scenario is repeated.
	// See docs/design.md, "Hot swap and disposal" and "How it is tested".
	t.Run("dispose-aborts-the-hung-connect", func(t *testing.T) {
		for i := range 10 {
			addr, accepted := httpSilentListener(t)
			p := httpPolicy("http://" + addr + "/mcp")
			p.ConnectionTimeout = 10 * time.Second
			s, _ := startSupervisor(t, p)
			httpPoll(t, "the connect to reach the endpoint", func() bool { return accepted.Load() >= 1 })
			if sn := s.Snapshot(); sn.Phase != v1alpha1.PhaseConnecting || sn.Generation != 1 {
				t.Fatalf("not connecting: %s, generation %d", sn.Phase, sn.Generation)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			start := time.Now()
			err := s.Dispose(ctx)
			took := time.Since(start)
			cancel()
			if err != nil {
				t.Fatal(err)
			}
			// Waiting for the budget would take 10 s; the design target
			// (200 ms) is the benchmark's to measure.
			if took >= p.ConnectionTimeout/2 {
				t.Fatalf("round %d: dispose during a hung connect took %v: it waited for the %v budget", i+1, took, p.ConnectionTimeout)
			}
		}
	})
	// The expiry is acted on (target: within 150ms, the benchmark's to
	// measure); here the attempt must end within ten budgets, where
	// without the deadline it would hang on the silent listener.
	// Repeated, like the disposal above.
	// See docs/design.md, "The connection budget" and "How it is tested".
	t.Run("budget-expiry-is-acted-on-promptly", func(t *testing.T) {
		for i := range 10 {
			addr, _ := httpSilentListener(t)
			p := httpPolicy("http://" + addr + "/mcp")
			p.ConnectionTimeout = 300 * time.Millisecond
			p.FailOnStartupError = true
			start := time.Now()
			s, _ := startSupervisor(t, p)
			sn := waitFor(t, s, "Failed", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseFailed })
			if took := time.Since(start); took >= 10*p.ConnectionTimeout {
				t.Fatalf("round %d: a 300ms budget ended the attempt after %v (%v)", i+1, took, sn.LastError)
			}
		}
	})
	t.Run("retried-without-failOnStartupError", func(t *testing.T) {
		addr, _ := httpSilentListener(t)
		p := httpPolicy("http://" + addr + "/mcp")
		p.ConnectionTimeout = 300 * time.Millisecond
		s, _ := startSupervisor(t, p)
		sn := waitFor(t, s, "two failed attempts", func(sn Snapshot) bool { return sn.FailedAttempts >= 2 || sn.Phase == v1alpha1.PhaseFailed })
		if sn.Phase == v1alpha1.PhaseFailed {
			t.Fatalf("stopped: %s / %s", sn.Reason, sn.Message)
		}
		if sn.LastError == nil || sn.LastError.Stage != StageInitialize || !IsDeadline(sn.LastError) {
			t.Errorf("last error %v, want the budget in stage %s", sn.LastError, StageInitialize)
		}
	})
}

// Configured headers go on every request of every session, and
// their values (secrets) never show in errors, status or logs.
// See docs/design.md, "The McpServer resource" and "Operations".
func TestHTTPHeadersReachEveryRequestAndNeverLeak(t *testing.T) {
	const (
		authValue = "Bearer tok-SECRETVALUE-1a2b3c"
		keyValue  = "key-SECRETVALUE-4d5e6f"
		marker    = "SECRETVALUE"
	)
	up := httpServe(t, httpFixture(t, fixture.Options{SessionExpireAfter: 500 * time.Millisecond}))
	p := httpPolicy(up.URL())
	p.HealthCheckInterval = 200 * time.Millisecond
	p.ToolCallTimeout = 300 * time.Millisecond
	p.HTTP.Headers = []policy.Header{{Name: "Authorization", Value: authValue}, {Name: "X-Api-Key", Value: keyValue}}

	var logMu sync.Mutex
	var logs []string
	logger := funcr.New(func(prefix, args string) {
		logMu.Lock()
		logs = append(logs, prefix+" "+args)
		logMu.Unlock()
	}, funcr.Options{Verbosity: 10})
	s, _ := startSupervisor(t, p, func(o *Options) { o.Log = logger })

	waitFor(t, s, "Ready", isReady)
	// The session expires: probes get 404, the supervisor reconnects.
	waitFor(t, s, "Ready in a new session", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseReady && sn.Generation >= 2 })

	var texts []string
	httpEcho(t, s, "with headers")
	ctx := httpCtx(t)
	res, err := s.CallTool(ctx, fixture.ToolFail, map[string]any{"text": "tool failure"})
	if err != nil {
		t.Fatal(err)
	}
	if terr := ResultError(res); terr == nil {
		t.Fatal("fail tool: no tool error")
	} else {
		texts = append(texts, terr.Error())
	}
	if _, err := s.CallTool(ctx, "no_such_tool", nil); err == nil {
		t.Fatal("unknown tool: no error")
	} else {
		texts = append(texts, err.Error())
	}
	if _, err := s.CallTool(ctx, fixture.ToolSleep, map[string]any{"ms": 5000}); err == nil {
		t.Fatal("sleep past toolCallTimeoutMs: no error")
	} else {
		texts = append(texts, err.Error())
	}
	sn := s.Snapshot()
	texts = append(texts, fmt.Sprintf("%+v", sn))
	if sn.LastError != nil {
		texts = append(texts, sn.LastError.Error())
	}

	reqs := up.requests()
	methods := map[string]int{}
	sessions := map[string]bool{}
	for _, r := range reqs {
		methods[r.Method]++
		sessions[r.sessionID()] = true
		if got := r.Header.Get("Authorization"); got != authValue {
			t.Errorf("%s %s (session %q) carried Authorization %q", r.Method, r.RPCMethod, r.sessionID(), got)
		}
		if got := r.Header.Get("X-Api-Key"); got != keyValue {
			t.Errorf("%s %s (session %q) carried X-Api-Key %q", r.Method, r.RPCMethod, r.sessionID(), got)
		}
	}
	t.Logf("%d requests by method %v over %d session ids (incl. none)", len(reqs), methods, len(sessions))
	if methods[http.MethodPost] == 0 || methods[http.MethodGet] == 0 || len(sessions) < 3 {
		t.Errorf("want POSTs and GETs over two sessions; saw %v over %d session ids", methods, len(sessions))
	}

	if err := s.Dispose(ctx); err != nil {
		t.Fatal(err)
	}
	logMu.Lock()
	texts = append(texts, logs...)
	logMu.Unlock()
	for _, text := range texts {
		if strings.Contains(text, marker) {
			t.Errorf("a header value leaked: %s", text)
		}
	}
}

// ToolCallTimeoutMs bounds every call over HTTP, the upstream
// handler is cancelled, and the connection stays up.
// See docs/design.md, "Tool calls".
func TestHTTPToolCallTimeoutIsEnforcedAndCancelsUpstream(t *testing.T) {
	httpForEachProtocol(t, func(t *testing.T, stateless bool) {
		events := eventsPath(t)
		up := httpServe(t, httpFixture(t, fixture.Options{Stateless: stateless, EventsFile: events}))
		p := httpPolicy(up.URL())
		p.ToolCallTimeout = 300 * time.Millisecond
		s, _ := startSupervisor(t, p)
		waitFor(t, s, "Ready", isReady)

		start := time.Now()
		_, err := s.CallTool(httpCtx(t), fixture.ToolSleep, map[string]any{"ms": 10000})
		took := time.Since(start)
		t.Logf("call ended after %v: %v", took, err)
		if err == nil || !strings.Contains(err.Error(), "timed out after 300ms") {
			t.Fatalf("call error %v, want the 300ms tool call timeout", err)
		}
		// One-sided: not before the configured timeout. That it did not wait
		// for the 10 s sleep is the error above and the cancellation below.
		if took < 300*time.Millisecond {
			t.Errorf("call ended after %v, before its 300ms timeout", took)
		}
		waitEvent(t, events, "cancelled sleep", func(ev fixture.Event) bool {
			return ev.Kind == fixture.EventCancelled && ev.Tool == fixture.ToolSleep
		})
		httpEcho(t, s, "still connected")
		if sn := s.Snapshot(); sn.Phase != v1alpha1.PhaseReady || sn.Generation != 1 {
			t.Errorf("a timed-out call changed the connection: %s, generation %d", sn.Phase, sn.Generation)
		}
	})
}

// The caller's cancellation reaches the server (2025-11-25: the SDK
// sends notifications/cancelled; 2026-07-28: the request is abandoned).
// See docs/design.md, "Tool calls".
func TestHTTPToolCallCallerCancellationReachesServer(t *testing.T) {
	httpForEachProtocol(t, func(t *testing.T, stateless bool) {
		events := eventsPath(t)
		up := httpServe(t, httpFixture(t, fixture.Options{Stateless: stateless, EventsFile: events}))
		s, _ := startSupervisor(t, httpPolicy(up.URL()))
		waitFor(t, s, "Ready", isReady)

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, err := s.CallTool(ctx, fixture.ToolSleep, map[string]any{"ms": 10000})
			done <- err
		}()
		waitEvent(t, events, "call sleep", func(ev fixture.Event) bool {
			return ev.Kind == fixture.EventCall && ev.Tool == fixture.ToolSleep
		})
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Fatalf("cancelled call returned %v, want context.Canceled", err)
			}
		case <-time.After(eventually):
			t.Fatal("the cancelled call did not return")
		}
		waitEvent(t, events, "cancelled sleep", func(ev fixture.Event) bool {
			return ev.Kind == fixture.EventCancelled && ev.Tool == fixture.ToolSleep
		})
		if !stateless {
			if _, ok := up.lastCall("notifications/cancelled"); !ok {
				t.Error("no notifications/cancelled reached the server")
			}
		}
		httpEcho(t, s, "still connected")
	})
}

// StructuredContent comes back whole over HTTP.
// See docs/design.md, "Tool calls".
func TestHTTPToolCallKeepsStructuredContentWhole(t *testing.T) {
	httpForEachProtocol(t, func(t *testing.T, stateless bool) {
		up := httpServe(t, httpFixture(t, fixture.Options{Stateless: stateless}))
		s, _ := startSupervisor(t, httpPolicy(up.URL()))
		waitFor(t, s, "Ready", isReady)

		const text = "héllo, wörld"
		res, err := s.CallTool(httpCtx(t), fixture.ToolStructured, map[string]any{"text": text})
		if err != nil {
			t.Fatal(err)
		}
		if err := ResultError(res); err != nil {
			t.Fatal(err)
		}
		got, err := json.Marshal(res.StructuredContent)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := json.Marshal(fixture.StructuredOutput{Text: text, Length: len(text), PID: os.Getpid()})
		var g, w any
		_ = json.Unmarshal(got, &g)
		_ = json.Unmarshal(want, &w)
		gb, _ := json.Marshal(g)
		wb, _ := json.Marshal(w)
		if !bytes.Equal(gb, wb) {
			t.Fatalf("structuredContent %s, want %s", gb, wb)
		}
	})
}

// IsError: true is a tool error, not a success.
// See docs/design.md, "Tool calls".
func TestHTTPToolCallIsErrorBecomesToolError(t *testing.T) {
	httpForEachProtocol(t, func(t *testing.T, stateless bool) {
		up := httpServe(t, httpFixture(t, fixture.Options{Stateless: stateless}))
		s, _ := startSupervisor(t, httpPolicy(up.URL()))
		waitFor(t, s, "Ready", isReady)

		res, err := s.CallTool(httpCtx(t), fixture.ToolFail, map[string]any{"text": "it broke"})
		if err != nil {
			t.Fatalf("a tool error is not a call error: %v", err)
		}
		terr := ResultError(res)
		var te *ToolError
		if !errors.As(terr, &te) || te.Result != res {
			t.Fatalf("ResultError = %v, want a *ToolError holding the result", terr)
		}
		if !strings.Contains(terr.Error(), "it broke") {
			t.Errorf("tool error %q lacks the tool's text", terr.Error())
		}
		if sn := s.Snapshot(); sn.Phase != v1alpha1.PhaseReady || sn.Generation != 1 {
			t.Errorf("a tool error changed the connection: %s, generation %d", sn.Phase, sn.Generation)
		}
	})
}

// List_changed over HTTP (2025-11-25, standalone SSE stream)
// re-syncs; a re-sync that fails keeps the last good set, and the next
// change is synced again.
// See docs/design.md, "Tool sync".
func TestHTTPListChangedResyncsAndFailedResyncKeepsLastGoodTools(t *testing.T) {
	h := httpFixture(t, fixture.Options{ListChangedAfter: 3 * time.Second}) // counted from the server's start: room to connect under load
	up := httpServe(t, h)
	s, reg := startSupervisor(t, httpPolicy(up.URL()))
	sn := waitFor(t, s, "Ready", isReady)
	if sn.ServerInfo.ProtocolVersion != httpStatefulVersion {
		t.Fatalf("protocol %s, want %s", sn.ServerInfo.ProtocolVersion, httpStatefulVersion)
	}
	if hasTool(sn.Tools, fixture.ToolLate) {
		t.Fatalf("%s already listed at connect (connecting took over 3s?)", fixture.ToolLate)
	}

	sn = waitFor(t, s, "late_tool published", func(sn Snapshot) bool { return hasTool(sn.Tools, fixture.ToolLate) })
	if sn.Generation != 1 || sn.Phase != v1alpha1.PhaseReady {
		t.Fatalf("re-sync reconnected: %s, generation %d", sn.Phase, sn.Generation)
	}
	if _, _, ok := reg.Lookup("ns", registry.PublicName("fx", fixture.ToolLate)); !ok {
		t.Fatal("late_tool not in the registry")
	}
	good := toolNames(sn.Tools)

	// tools/list now fails at the server; a list change triggers a re-sync.
	var lists atomic.Int64
	up.setIntercept(func(w http.ResponseWriter, r httpRecord) bool {
		if r.RPCMethod != "tools/list" {
			return false
		}
		lists.Add(1)
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"tools/list fails on purpose"}}`, r.RPCID)
		return true
	})
	addTool := func(name string) {
		h.Server().MCP().AddTool(&mcp.Tool{Name: name, InputSchema: json.RawMessage(`{"type":"object"}`)},
			func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
				return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: name}}}, nil
			})
	}
	addTool("refused_tool")
	sn = waitFor(t, s, "the failed re-sync", func(sn Snapshot) bool {
		return sn.LastError != nil && sn.LastError.Stage == StageToolsList(1)
	})
	if !strings.Contains(sn.LastError.Message(), "fails on purpose") {
		t.Errorf("re-sync error %q", sn.LastError.Message())
	}
	if got := toolNames(sn.Tools); !slices.Equal(got, good) {
		t.Fatalf("a failed re-sync changed the tools: %v -> %v", good, got)
	}
	if got := toolNames(reg.Owned("ns", "ns/srv")); !slices.Equal(got, good) {
		t.Fatalf("a failed re-sync changed the registry: %v -> %v", good, got)
	}
	if sn.Phase != v1alpha1.PhaseReady || sn.Generation != 1 {
		t.Fatalf("a failed re-sync dropped the connection: %s, generation %d", sn.Phase, sn.Generation)
	}
	httpEcho(t, s, "after the failed re-sync")

	// The server lists again: the next change is synced.
	up.setIntercept(nil)
	addTool("accepted_tool")
	sn = waitFor(t, s, "the next re-sync", func(sn Snapshot) bool { return hasTool(sn.Tools, "accepted_tool") })
	if !hasTool(sn.Tools, "refused_tool") || !hasTool(sn.Tools, fixture.ToolLate) {
		t.Fatalf("re-synced set %v", httpRawNames(sn.Tools))
	}
	if lists.Load() == 0 {
		t.Error("no tools/list was refused")
	}
}

// httpSDKServer is a go-sdk server whose tool list the test controls, served
// stateful over Streamable HTTP on 127.0.0.1.
func httpSDKServer(t *testing.T, name string, tools ...string) (*mcp.Server, *httpUpstream) {
	t.Helper()
	srv := mcp.NewServer(&mcp.Implementation{Name: name, Version: "v0"}, &mcp.ServerOptions{
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	for _, tool := range tools {
		httpAddRawTool(srv, tool)
	}
	h := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv }, nil)
	up := httpServe(t, h)
	t.Cleanup(func() { // runs before the server closes
		for ss := range srv.Sessions() {
			_ = ss.Close()
		}
	})
	return srv, up
}

// heldFetch is the fetch s's live generation keeps for a retried swap.
func heldFetch(s *Supervisor) []*mcp.Tool {
	s.mu.Lock()
	g := s.live
	s.mu.Unlock()
	if g == nil {
		return nil
	}
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	return g.fetched
}

func httpAddRawTool(srv *mcp.Server, name string) {
	srv.AddTool(&mcp.Tool{Name: name, Description: "tool " + name, InputSchema: json.RawMessage(`{"type":"object"}`)},
		func(context.Context, *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "called " + name}}}, nil
		})
}

// A re-sync whose swap collides with another server's public
// name is refused: the previous set stays (never empty), the conflict is
// reported, and the pending set is published once the holder goes away.
// See docs/design.md, "Tool sync" and "Tool registry and names".
func TestHTTPResyncConflictKeepsPreviousSetAndPublishesWhenHolderLeaves(t *testing.T) {
	reg := registry.New()
	_, upA := httpSDKServer(t, "server-a", "c")
	srvB, upB := httpSDKServer(t, "server-b", "x")
	conflicting := registry.PublicName("a", "b__c")
	if conflicting != registry.PublicName("a__b", "c") {
		t.Fatalf("test premise: %q != %q", conflicting, registry.PublicName("a__b", "c"))
	}

	pA := httpPolicy(upA.URL())
	pA.ServerName = "a__b"
	a, _ := startSupervisor(t, pA, func(o *Options) { o.Name, o.Registry = "a", reg })
	waitFor(t, a, "A Ready", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseReady && len(sn.Tools) == 1 })

	pB := httpPolicy(upB.URL())
	pB.ServerName = "a"
	b, _ := startSupervisor(t, pB, func(o *Options) { o.Name, o.Registry = "b", reg })
	snB := waitFor(t, b, "B Ready", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseReady && len(sn.Tools) == 1 })
	before := toolNames(snB.Tools)
	if !slices.Equal(before, []string{registry.PublicName("a", "x")}) {
		t.Fatalf("B published %v", before)
	}

	// Watch B's published set from now on: it must never be empty.
	var emptied atomic.Bool
	stop := make(chan struct{})
	watched := make(chan struct{})
	go func() {
		defer close(watched)
		sub := reg.Subscribe()
		defer sub.Close()
		for {
			if len(reg.Owned("ns", "ns/b")) == 0 {
				emptied.Store(true)
			}
			select {
			case <-stop:
				return
			case <-sub.C:
				sub.Drain()
			case <-time.After(time.Millisecond):
			}
		}
	}()
	defer func() { close(stop); <-watched }()

	httpAddRawTool(srvB, "b__c") // list_changed: B's next set collides with A's c
	snB = waitFor(t, b, "B's sync conflict", func(sn Snapshot) bool { return sn.SyncConflict != "" })
	t.Logf("conflict: %s", snB.SyncConflict)
	if !strings.Contains(snB.SyncConflict, conflicting) || !strings.Contains(snB.SyncConflict, "ns/a") {
		t.Errorf("conflict %q does not name %s and its holder ns/a", snB.SyncConflict, conflicting)
	}
	if got := toolNames(snB.Tools); !slices.Equal(got, before) {
		t.Fatalf("B's set after the refused swap: %v, want the previous %v", got, before)
	}
	if got := toolNames(reg.Owned("ns", "ns/b")); !slices.Equal(got, before) {
		t.Fatalf("registry holds %v for B, want the previous %v", got, before)
	}
	if tool, _, ok := reg.Lookup("ns", conflicting); !ok || tool.Owner != "ns/a" || tool.RawName != "c" {
		t.Fatalf("%s is %+v (found %v), want A's c", conflicting, tool, ok)
	}
	if snB.Phase != v1alpha1.PhaseReady || snB.Generation != 1 {
		t.Fatalf("the conflict changed B's connection: %s, generation %d", snB.Phase, snB.Generation)
	}
	// The refused set is not held for the retry (it would be memory outside
	// the namespace's tool budget): the retry fetches it again, but not
	// while A still holds the name.
	if held := heldFetch(b); held != nil {
		t.Errorf("B holds its refused set of %d tools", len(held))
	}
	listed := toolLists(upB)
	retryAndSettle(t, b)
	if n := toolLists(upB); n != listed {
		t.Errorf("B listed its tools %d more times while A held the name", n-listed)
	}

	// The holder goes away: B publishes its pending set by itself.
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Dispose(dctx); err != nil {
		t.Fatal(err)
	}
	snB = waitFor(t, b, "B's pending set published", func(sn Snapshot) bool { return len(sn.Tools) == 2 })
	want := []string{conflicting, registry.PublicName("a", "x")}
	slices.Sort(want)
	if got := toolNames(snB.Tools); !slices.Equal(got, want) {
		t.Fatalf("B published %v, want %v", got, want)
	}
	if snB.SyncConflict != "" {
		t.Errorf("conflict still reported after publishing: %s", snB.SyncConflict)
	}
	tool, caller, ok := reg.Lookup("ns", conflicting)
	if !ok || tool.Owner != "ns/b" || tool.RawName != "b__c" {
		t.Fatalf("%s is %+v (found %v), want B's b__c", conflicting, tool, ok)
	}
	res, err := caller.CallTool(httpCtx(t), tool.RawName, map[string]any{})
	if err != nil || RenderText(res) != "called b__c" {
		t.Fatalf("call through the registry: %v, %v", res, err)
	}
	if emptied.Load() {
		t.Error("B's published set was empty at some point")
	}
}

// budgetPair starts, in one registry with room for 20 tools of about 65
// bytes, A with 20 tools (published) and B with 5 (refused for the budget).
func budgetPair(t *testing.T) (a, b *Supervisor, upB *httpUpstream) {
	reg := registry.New()
	reg.MaxToolBytesPerNamespace = 1500
	var many, few []string
	for i := range 20 {
		many = append(many, fmt.Sprintf("a%02d", i))
	}
	for i := range 5 {
		few = append(few, fmt.Sprintf("b%02d", i))
	}
	_, upA := httpSDKServer(t, "server-a", many...)
	_, upB = httpSDKServer(t, "server-b", few...)
	pA, pB := httpPolicy(upA.URL()), httpPolicy(upB.URL())
	pA.ServerName, pB.ServerName = "a", "b"
	a, _ = startSupervisor(t, pA, func(o *Options) { o.Name, o.Registry = "a", reg })
	waitFor(t, a, "A Ready", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseReady && len(sn.Tools) == 20 })
	b, _ = startSupervisor(t, pB, func(o *Options) { o.Name, o.Registry = "b", reg })
	// Ready as well: the first set is refused before the connection is
	// made live, and the tests ask the live generation for retries.
	waitFor(t, b, "B Ready, refused for the budget", func(sn Snapshot) bool {
		return sn.Phase == v1alpha1.PhaseReady && sn.SyncReason == v1alpha1.ReasonToolBudgetExceeded
	})
	return a, b, upB
}

// A new filter may make a refused set fit: it is fetched again and what
// passes the filter is published.
func TestARefusedSetIsFetchedAgainForANewFilter(t *testing.T) {
	_, b, _ := budgetPair(t)
	NewWithT(t).Expect(b.SetToolFilter(policy.ToolFilter{Include: []string{"b00"}})).To(BeTrue())
	waitFor(t, b, "B's filtered set published", func(sn Snapshot) bool { return len(sn.Tools) == 1 && sn.SyncConflict == "" })
}

// A new filter applies at once to what a server whose last list was
// refused still publishes, even when the fetch that would apply it whole
// fails: the registry never goes on listing a tool the filter excludes.
func TestANewFilterNarrowsAKeptSetThoughItsFetchFails(t *testing.T) {
	reg := registry.New()
	reg.MaxToolBytesPerNamespace = 1000 // room for about 15 tools of B's
	srv, up := httpSDKServer(t, "server-b", "b00", "b01", "b02", "b03", "b04")
	p := httpPolicy(up.URL())
	p.ServerName = "b"
	b, _ := startSupervisor(t, p, func(o *Options) { o.Name, o.Registry = "b", reg })
	waitFor(t, b, "B Ready", func(sn Snapshot) bool { return sn.Phase == v1alpha1.PhaseReady && len(sn.Tools) == 5 })
	for i := range 20 {
		httpAddRawTool(srv, fmt.Sprintf("c%02d", i)) // list_changed, each
	}
	sn := waitFor(t, b, "B's grown set refused", func(sn Snapshot) bool { return sn.SyncReason == v1alpha1.ReasonToolBudgetExceeded })
	NewWithT(t).Expect(len(sn.Tools)).To(BeNumerically(">", 1), "B keeps a set of more than b00")

	failToolLists(up)
	listed := toolLists(up)
	NewWithT(t).Expect(b.SetToolFilter(policy.ToolFilter{Include: []string{"b00"}})).To(BeTrue())
	want := []string{registry.PublicName("b", "b00")}
	sn = waitFor(t, b, "B's set narrowed to b00", func(sn Snapshot) bool { return slices.Equal(toolNames(sn.Tools), want) })
	NewWithT(t).Expect(toolNames(reg.Owned("ns", "ns/b"))).To(Equal(want))
	NewWithT(t).Eventually(func() int { return toolLists(up) }, eventually).Should(BeNumerically(">", listed), "the new filter's fetch was tried")
	NewWithT(t).Expect(sn.Generation).To(BeEquivalentTo(1), "the same connection")
}

// A re-sync that fails keeps the last good set and is tried again with the
// reconnect backoff, on the same connection: the list the server announced
// arrives once the server lists again, without another list_changed. See
// docs/design.md, "Tool sync".
func TestAFailedResyncIsTriedAgainUntilItSucceeds(t *testing.T) {
	srv, up := httpSDKServer(t, "server-a", "a00")
	p := httpPolicy(up.URL())
	s, _ := startSupervisor(t, p, func(o *Options) { o.ResyncInterval = 20 * time.Millisecond })
	waitFor(t, s, "Ready with a00", func(sn Snapshot) bool { return isReady(sn) && len(sn.Tools) == 1 })

	failToolLists(up)
	httpAddRawTool(srv, "a01") // list_changed: its re-sync fails
	waitFor(t, s, "the failed re-sync in lastError", func(sn Snapshot) bool {
		return sn.LastError != nil && strings.Contains(sn.LastError.Error(), "listing is broken")
	})
	NewWithT(t).Eventually(func() int { return toolLists(up) }, eventually).Should(BeNumerically(">=", 3),
		"the failed re-sync is tried again")

	up.setIntercept(nil) // no list_changed: only a retry can find a01
	sn := waitFor(t, s, "a01 published", func(sn Snapshot) bool { return len(sn.Tools) == 2 })
	NewWithT(t).Expect(sn.Generation).To(BeEquivalentTo(1), "the same connection")
	NewWithT(t).Expect(sn.Phase).To(Equal(v1alpha1.PhaseReady))
}

// A set the namespace's tool budget refused is not fetched again while the
// namespace still has no room for it, however often a retry is asked for
// (each registry change asks); once there is room, it is fetched again and
// published. See docs/design.md, "Budgets".
func TestARefusedSetIsFetchedAgainOnlyOnceItFits(t *testing.T) {
	a, b, upB := budgetPair(t)
	lists := func() int { return toolLists(upB) }
	before := lists()

	// A retry, as a registry change asks for one, with no more room: B's
	// syncer runs and finds nothing to do.
	retryAndSettle(t, b)
	if n := lists(); n != before {
		t.Fatalf("B listed its tools %d more times with no room for them", n-before)
	}

	// A leaves: there is room, and B fetches its set again and publishes it.
	dctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := a.Dispose(dctx); err != nil {
		t.Fatal(err)
	}
	waitFor(t, b, "B's set published", func(sn Snapshot) bool { return len(sn.Tools) == 5 && sn.SyncConflict == "" })
	if n := lists(); n != before+1 {
		t.Errorf("B listed its tools %d times once there was room, want once", n-before)
	}
}

// failToolLists has up answer every tools/list with a JSON-RPC error,
// "listing is broken", until its intercept is cleared.
func failToolLists(up *httpUpstream) {
	up.setIntercept(func(w http.ResponseWriter, r httpRecord) bool {
		if r.RPCMethod != "tools/list" {
			return false
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":-32603,"message":"listing is broken"}}`+"\n", r.RPCID)
		return true
	})
}

// toolLists counts the tools/list requests up has had.
func toolLists(up *httpUpstream) int {
	n := 0
	for _, r := range up.requests() {
		if r.RPCMethod == "tools/list" {
			n++
		}
	}
	return n
}

// retryAndSettle asks s's live generation for a retry, as a registry change
// does, and waits until its syncer has nothing left to do.
func retryAndSettle(t *testing.T, s *Supervisor) {
	t.Helper()
	s.mu.Lock()
	g := s.live
	s.mu.Unlock()
	g.wake(g.retry)
	NewWithT(t).Eventually(func() bool {
		g.mu.Lock()
		defer g.mu.Unlock()
		return !g.syncing && !g.pendingLocked()
	}, eventually).Should(BeTrue(), "the syncer never went idle")
}
