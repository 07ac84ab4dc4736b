package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/mcpbridge/operator/internal/registry"
)

// The tests of the tools/call fast path (call.go) and of the gateway's idle
// session janitor (sessions.go): a fake upstream caller behind a real
// gateway on a loopback port, called by real go-sdk agents and by hand-made
// requests.

const (
	testNS     = "agents"
	testServer = "fx"
	// echoTool is the fake's plain tool, served as echoPublic.
	echoTool   = "echo"
	echoPublic = "mcp__fx__echo"
	// regionTool binds its region argument to the Mcp-Param-Region header.
	regionTool   = "regional"
	regionPublic = "mcp__fx__regional"

	statefulProto    = "2025-11-25"
	sessionlessProto = registry.SessionlessProtocol
)

// waitLimit bounds every wait on something the test expects to happen soon;
// it is generous so that a loaded machine (-race, -count) does not fail.
const waitLimit = 15 * time.Second

// fakeCaller is the upstream: it answers through CallToolJSON by default and
// counts which of its two paths the gateway used.
type fakeCaller struct {
	mu        sync.Mutex
	jsonCalls int
	sdkCalls  int
	rawNames  []string
	jsonArgs  []json.RawMessage
	sdkArgs   []any
	// handle answers CallToolJSON; nil answers defaultResult.
	handle func(ctx context.Context, args json.RawMessage) (json.RawMessage, bool, error)
	// sdkHandle answers CallTool; nil answers "sdk".
	sdkHandle func(ctx context.Context) (*mcp.CallToolResult, error)
}

const defaultResult = `{"content":[{"type":"text","text":"fast"}]}`

func (f *fakeCaller) CallToolJSON(ctx context.Context, rawName string, args json.RawMessage) (json.RawMessage, bool, error) {
	f.mu.Lock()
	f.jsonCalls++
	f.rawNames = append(f.rawNames, rawName)
	f.jsonArgs = append(f.jsonArgs, bytes.Clone(args))
	handle := f.handle
	f.mu.Unlock()
	if handle != nil {
		return handle(ctx, args)
	}
	return json.RawMessage(defaultResult), false, nil
}

func (f *fakeCaller) CallTool(ctx context.Context, rawName string, args any) (*mcp.CallToolResult, error) {
	f.mu.Lock()
	f.sdkCalls++
	f.rawNames = append(f.rawNames, rawName)
	f.sdkArgs = append(f.sdkArgs, args)
	handle := f.sdkHandle
	f.mu.Unlock()
	if handle != nil {
		return handle(ctx)
	}
	return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "sdk"}}}, nil
}

func (f *fakeCaller) setSDKHandle(h func(ctx context.Context) (*mcp.CallToolResult, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.sdkHandle = h
}

func (f *fakeCaller) setHandle(h func(ctx context.Context, args json.RawMessage) (json.RawMessage, bool, error)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.handle = h
}

// counts returns how many calls took CallToolJSON and CallTool.
func (f *fakeCaller) counts() (jsonCalls, sdkCalls int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.jsonCalls, f.sdkCalls
}

// testEnv is a gateway over a registry holding the fake's tools, served on
// 127.0.0.1, with Start running.
type testEnv struct {
	t      *testing.T
	fake   *fakeCaller
	g      *Gateway
	srv    *httptest.Server
	hc     *http.Client
	url    string // the namespace's MCP endpoint
	bodies *bodyRecorder
}

type envOptions struct {
	idle    time.Duration
	maxBody int64
	log     logr.Logger
	tracing trace.TracerProvider
	budgets Budgets
}

func newTestEnv(t *testing.T, o envOptions) *testEnv {
	t.Helper()
	fake := &fakeCaller{}
	reg := registry.New()
	tools := []*mcp.Tool{
		{Name: echoTool, InputSchema: json.RawMessage(`{"type":"object"}`)},
		{Name: regionTool, InputSchema: json.RawMessage(
			`{"type":"object","properties":{"region":{"type":"string","x-mcp-header":"Region"}}}`)},
	}
	if _, err := reg.Swap(testNS, testNS+"/"+testServer, testServer, tools, fake); err != nil {
		t.Fatal(err)
	}
	g := &Gateway{Registry: reg, SessionIdleTimeout: o.idle, MaxBodyBytes: o.maxBody, Log: o.log, TracerProvider: o.tracing,
		Budgets: o.budgets}
	srv := httptest.NewUnstartedServer(g.Handler())
	srv.Start() // httptest listens on 127.0.0.1
	bodies := &bodyRecorder{}
	env := &testEnv{
		t: t, fake: fake, g: g, srv: srv, bodies: bodies,
		hc:  &http.Client{Transport: &recordingTransport{next: &http.Transport{}, bodies: bodies}},
		url: srv.URL + "/namespaces/" + testNS + "/mcp",
	}
	ctx, cancel := context.WithCancel(context.Background())
	started := make(chan struct{})
	go func() {
		defer close(started)
		_ = g.Start(ctx)
	}()
	t.Cleanup(func() {
		cancel()
		<-started
		srv.CloseClientConnections()
		srv.Close()
		env.hc.CloseIdleConnections()
	})
	return env
}

// view is the namespace's only view without authentication (created on
// first use).
func (e *testEnv) view() *view {
	v, release, err := e.g.view(context.Background(), testNS, grant{all: true})
	if err != nil {
		e.t.Fatal(err)
	}
	release()
	return v
}

// agent connects a real go-sdk client speaking proto; it is closed at the
// end of the test.
func (e *testEnv) agent(proto string) *mcp.ClientSession {
	e.t.Helper()
	return connectAgent(e.t, e.url, e.hc, proto)
}

// connectAgent connects a real go-sdk client speaking proto to url; it is
// closed at the end of the test.
func connectAgent(t *testing.T, url string, hc *http.Client, proto string) *mcp.ClientSession {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	client := mcp.NewClient(&mcp.Implementation{Name: "test-agent", Version: "v0"}, nil)
	cs, err := client.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, HTTPClient: hc, MaxRetries: -1},
		&mcp.ClientSessionOptions{ProtocolVersion: proto})
	if err != nil {
		t.Fatalf("connect %s: %v", proto, err)
	}
	if got := cs.InitializeResult().ProtocolVersion; got != proto {
		_ = cs.Close()
		t.Fatalf("negotiated %s, want %s", got, proto)
	}
	if proto < registry.SessionlessProtocol && cs.ID() == "" {
		_ = cs.Close()
		t.Fatalf("a %s agent got no session id", proto)
	}
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// post sends body as a POST to the endpoint with the agent's usual headers;
// a header given as "" is removed. It returns the status and the body.
func (e *testEnv) post(ctx context.Context, body string, header map[string]string) (int, http.Header, []byte, error) {
	resp, b, err := e.postResponse(ctx, body, header)
	if resp == nil {
		return 0, nil, nil, err
	}
	return resp.StatusCode, resp.Header, b, err
}

// postResponse is post with the whole response (its body read and closed).
func (e *testEnv) postResponse(ctx context.Context, body string, header map[string]string) (*http.Response, []byte, error) {
	return e.postFrom(ctx, strings.NewReader(body), header)
}

// postFrom is postResponse of the body body reads (sent without a length
// unless the client knows it from body's type).
func (e *testEnv) postFrom(ctx context.Context, body io.Reader, header map[string]string) (*http.Response, []byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, e.url, body)
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	for k, v := range header {
		if v == "" {
			req.Header.Del(k)
			continue
		}
		req.Header.Set(k, v)
	}
	resp, err := e.hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// mustPost is post that fails the test on a transport error.
func (e *testEnv) mustPost(body string, header map[string]string) (int, http.Header, []byte) {
	e.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	code, h, b, err := e.post(ctx, body, header)
	if err != nil {
		e.t.Fatalf("POST %s: %v", body, err)
	}
	return code, h, b
}

// bodyRecorder keeps the bodies of the agents' tools/call POSTs, in order.
type bodyRecorder struct {
	mu    sync.Mutex
	calls [][]byte
}

func (b *bodyRecorder) toolCalls() [][]byte {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.calls)
}

// recordingTransport records what the agents post.
type recordingTransport struct {
	next   http.RoundTripper
	bodies *bodyRecorder
}

func (t *recordingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.Method == http.MethodPost && req.Body != nil && req.GetBody != nil {
		if rc, err := req.GetBody(); err == nil {
			b, _ := io.ReadAll(rc)
			rc.Close()
			var m message
			if json.Unmarshal(b, &m) == nil && m.Method == "tools/call" {
				t.bodies.mu.Lock()
				t.bodies.calls = append(t.bodies.calls, b)
				t.bodies.mu.Unlock()
			}
		}
	}
	return t.next.RoundTrip(req)
}

func (t *recordingTransport) CloseIdleConnections() {
	if c, ok := t.next.(interface{ CloseIdleConnections() }); ok {
		c.CloseIdleConnections()
	}
}

// sessionlessCall is a well-formed 2026-07-28 tools/call of tool with its
// headers; mutate either to make it ill-formed.
func sessionlessCall(id int, tool, args string) (string, map[string]string) {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s,`+
		`"_meta":{"io.modelcontextprotocol/protocolVersion":%q,"io.modelcontextprotocol/clientCapabilities":{},`+
		`"io.modelcontextprotocol/clientInfo":{"name":"raw","version":"0"}}}}`, id, tool, args, sessionlessProto)
	return body, map[string]string{"Mcp-Protocol-Version": sessionlessProto, "Mcp-Method": "tools/call", "Mcp-Name": tool}
}

// statefulCall is a 2025-11-25 tools/call of tool on session sid.
func statefulCall(id int, tool, args, sid string) (string, map[string]string) {
	body := fmt.Sprintf(`{"jsonrpc":"2.0","id":%d,"method":"tools/call","params":{"name":%q,"arguments":%s}}`, id, tool, args)
	return body, map[string]string{"Mcp-Protocol-Version": statefulProto, "Mcp-Session-Id": sid}
}

// fastAnswer decodes the fast path's JSON response.
func fastAnswer(t *testing.T, header http.Header, body []byte) (id json.RawMessage, res mcp.CallToolResult) {
	t.Helper()
	if ct := header.Get("Content-Type"); ct != "application/json" {
		t.Fatalf("Content-Type %q, want application/json; body %s", ct, body)
	}
	var a struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Result  json.RawMessage `json:"result"`
	}
	if err := json.Unmarshal(body, &a); err != nil || a.JSONRPC != "2.0" || len(a.Result) == 0 {
		t.Fatalf("not a JSON-RPC result (%v): %s", err, body)
	}
	if err := json.Unmarshal(a.Result, &res); err != nil {
		t.Fatalf("result %s: %v", a.Result, err)
	}
	return a.ID, res
}

func textOf(res *mcp.CallToolResult) string {
	var s []string
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			s = append(s, tc.Text)
		}
	}
	return strings.Join(s, "\n")
}

func jsonEqual(a, b []byte) bool {
	var x, y any
	return json.Unmarshal(a, &x) == nil && json.Unmarshal(b, &y) == nil && reflect.DeepEqual(x, y)
}

// waitFor polls cond until it holds or waitLimit passes.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(waitLimit)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not after %s", what, waitLimit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// ---- 1. real agents take the fast path --------------------------------------

func TestFastPathServesRealAgentsOnBothProtocolsWithResultAndArgumentsUnchanged(t *testing.T) {
	results := []string{
		`{"content":[{"type":"text","text":"héllo \u003c\u003e"},{"type":"text","text":"second"}],` +
			`"structuredContent":{"n":1.5,"list":[1,"two",null,true],"nested":{"k":"v"}},"isError":false}`,
		`{"content":[{"type":"text","text":"the upstream tool failed"}],"isError":true}`,
		`{"content":[],"structuredContent":{"empty":{}}}`,
	}
	args := []map[string]any{
		{"text": "hello", "n": 42, "f": 0.25, "nested": map[string]any{"a": []any{1, "b", nil, false}}, "u": "ü€😀"},
		{},
		{"big": strings.Repeat("x", 10000)},
	}
	for _, proto := range []string{statefulProto, sessionlessProto} {
		t.Run(proto, func(t *testing.T) {
			env := newTestEnv(t, envOptions{})
			cs := env.agent(proto)
			for i := range results {
				want := results[i]
				env.fake.setHandle(func(context.Context, json.RawMessage) (json.RawMessage, bool, error) {
					return json.RawMessage(want), strings.Contains(want, `"isError":true`), nil
				})
				ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
				got, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: echoPublic, Arguments: args[i]})
				cancel()
				if err != nil {
					t.Fatalf("call %d: %v", i, err)
				}
				var wantRes mcp.CallToolResult
				if err := json.Unmarshal([]byte(want), &wantRes); err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(got.Content, wantRes.Content) && !(len(got.Content) == 0 && len(wantRes.Content) == 0) {
					gb, _ := json.Marshal(got.Content)
					t.Errorf("call %d: content %s, want as returned %s", i, gb, want)
				}
				if !reflect.DeepEqual(got.StructuredContent, wantRes.StructuredContent) {
					t.Errorf("call %d: structuredContent %#v, want %#v", i, got.StructuredContent, wantRes.StructuredContent)
				}
				if got.IsError != wantRes.IsError {
					t.Errorf("call %d: isError %v, want %v", i, got.IsError, wantRes.IsError)
				}
			}
			jsonCalls, sdkCalls := env.fake.counts()
			if jsonCalls != len(results) || sdkCalls != 0 {
				t.Fatalf("CallToolJSON used %d times, CallTool %d times; want %d and 0", jsonCalls, sdkCalls, len(results))
			}
			// The arguments reached the upstream as the agent wrote them.
			sent := env.bodies.toolCalls()
			if len(sent) != len(results) {
				t.Fatalf("recorded %d tools/call bodies, want %d", len(sent), len(results))
			}
			env.fake.mu.Lock()
			defer env.fake.mu.Unlock()
			for i, body := range sent {
				var m message
				if err := json.Unmarshal(body, &m); err != nil {
					t.Fatal(err)
				}
				if !bytes.Equal(env.fake.jsonArgs[i], m.Params.Arguments) {
					t.Errorf("call %d: upstream got arguments %s, the agent sent %s", i, env.fake.jsonArgs[i], m.Params.Arguments)
				}
				wantArgs, _ := json.Marshal(args[i])
				if !jsonEqual(env.fake.jsonArgs[i], wantArgs) {
					t.Errorf("call %d: upstream got arguments %s, want %s", i, env.fake.jsonArgs[i], wantArgs)
				}
				if env.fake.rawNames[i] != echoTool {
					t.Errorf("call %d: upstream called %q, want the raw name %q", i, env.fake.rawNames[i], echoTool)
				}
			}
		})
	}
}

// ---- 2. errors and metrics ----------------------------------------------------

// metricSample finds the sample of the gateway's metric name with the
// given labels in the manager's registry (prometheus/testutil would need a
// module go.mod does not list).
func metricSample(t *testing.T, name string, labels map[string]string) (counter float64, histogramCount uint64) {
	t.Helper()
	mfs, err := metrics.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if v, ok := labels[l.GetName()]; ok && v != l.GetValue() {
					continue metric
				}
			}
			return m.GetCounter().GetValue(), m.GetHistogram().GetSampleCount()
		}
	}
	return 0, 0
}

// requestCount is mcpbridge_gateway_requests_total{method, outcome}.
func requestCount(t *testing.T, method, outcome string) float64 {
	t.Helper()
	v, _ := metricSample(t, "mcpbridge_gateway_requests_total", map[string]string{"method": method, "outcome": outcome})
	return v
}

// callSamples is the number of tools/call durations observed with outcome.
func callSamples(t *testing.T, outcome string) uint64 {
	t.Helper()
	_, n := metricSample(t, "mcpbridge_gateway_call_duration_seconds", map[string]string{"outcome": outcome})
	return n
}

func TestFastPathTurnsCallerErrorsIntoToolErrorsAndCountsOutcomes(t *testing.T) {
	for _, proto := range []string{statefulProto, sessionlessProto} {
		t.Run(proto, func(t *testing.T) {
			env := newTestEnv(t, envOptions{})
			cs := env.agent(proto)
			s0, e0 := requestCount(t, "tools/call", "success"), requestCount(t, "tools/call", "tool_error")
			hs0, he0 := callSamples(t, "success"), callSamples(t, "tool_error")

			const reason = `upstream "fx" is unavailable: connection refused`
			env.fake.setHandle(func(context.Context, json.RawMessage) (json.RawMessage, bool, error) {
				return nil, false, errors.New(reason)
			})
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: echoPublic, Arguments: map[string]any{"x": 1}})
			if err != nil {
				t.Fatalf("a caller error must be a tool error, not a protocol error: %v", err)
			}
			if !res.IsError || textOf(res) != reason {
				t.Fatalf("result isError=%v text %q, want isError and %q", res.IsError, textOf(res), reason)
			}
			if d := requestCount(t, "tools/call", "tool_error") - e0; d != 1 {
				t.Errorf("requests_total{tools/call,tool_error} rose by %v, want 1", d)
			}

			env.fake.setHandle(nil)
			if res, err = cs.CallTool(ctx, &mcp.CallToolParams{Name: echoPublic}); err != nil || res.IsError || textOf(res) != "fast" {
				t.Fatalf("second call: %v, %+v", err, res)
			}
			if d := requestCount(t, "tools/call", "success") - s0; d != 1 {
				t.Errorf("requests_total{tools/call,success} rose by %v, want 1", d)
			}
			if d := requestCount(t, "tools/call", "tool_error") - e0; d != 1 {
				t.Errorf("requests_total{tools/call,tool_error} rose by %v in all, want 1", d)
			}
			if d := callSamples(t, "success") - hs0; d != 1 {
				t.Errorf("call_duration_seconds{success} observed %d calls, want 1", d)
			}
			if d := callSamples(t, "tool_error") - he0; d != 1 {
				t.Errorf("call_duration_seconds{tool_error} observed %d calls, want 1", d)
			}
			if jsonCalls, sdkCalls := env.fake.counts(); jsonCalls != 2 || sdkCalls != 0 {
				t.Fatalf("CallToolJSON used %d times, CallTool %d times; want 2 and 0", jsonCalls, sdkCalls)
			}
		})
	}
}

// ---- 3. cancellation ------------------------------------------------------------

// blockUntilCancelled makes the fake's calls wait for their context (or the
// end of the test); started receives each call's arguments, ended is closed
// by the first call whose context ended.
func blockUntilCancelled(t *testing.T, f *fakeCaller) (started chan json.RawMessage, ended chan struct{}) {
	started, ended = make(chan json.RawMessage, 8), make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { close(release) })
	f.setHandle(func(ctx context.Context, args json.RawMessage) (json.RawMessage, bool, error) {
		started <- args
		select {
		case <-ctx.Done():
			once.Do(func() { close(ended) })
			return nil, false, ctx.Err()
		case <-release:
			return json.RawMessage(defaultResult), false, nil
		}
	})
	return started, ended
}

func waitClosed(t *testing.T, what string, c <-chan struct{}) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(waitLimit):
		t.Fatalf("%s: not after %s", what, waitLimit)
	}
}

func waitStarted(t *testing.T, c <-chan json.RawMessage) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(waitLimit):
		t.Fatalf("the call did not reach the upstream after %s", waitLimit)
	}
}

func TestFastCallEndsWhenTheAgentCancels(t *testing.T) {
	for _, proto := range []string{statefulProto, sessionlessProto} {
		t.Run(proto, func(t *testing.T) {
			env := newTestEnv(t, envOptions{})
			cs := env.agent(proto)
			started, ended := blockUntilCancelled(t, env.fake)
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			errc := make(chan error, 1)
			go func() {
				_, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: echoPublic})
				errc <- err
			}()
			waitStarted(t, started)
			cancel()
			waitClosed(t, "the upstream call's context did not end", ended)
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Errorf("the agent's call returned %v, want context.Canceled", err)
			}
			if jsonCalls, sdkCalls := env.fake.counts(); jsonCalls != 1 || sdkCalls != 0 {
				t.Fatalf("CallToolJSON used %d times, CallTool %d times; want 1 and 0", jsonCalls, sdkCalls)
			}
		})
	}
}

// An agent that gives up its call's request, and sends nothing else,
// cancels the upstream call.
func TestAbortedFastCallRequestCancelsTheUpstreamCall(t *testing.T) {
	for _, proto := range []string{statefulProto, sessionlessProto} {
		t.Run(proto, func(t *testing.T) {
			env := newTestEnv(t, envOptions{})
			body, h := sessionlessCall(5, echoPublic, `{}`)
			if proto == statefulProto {
				body, h = statefulCall(5, echoPublic, `{}`, env.agent(proto).ID())
			}
			started, ended := blockUntilCancelled(t, env.fake)
			ctx, abort := context.WithCancel(context.Background())
			defer abort()
			errc := make(chan error, 1)
			go func() {
				_, _, _, err := env.post(ctx, body, h)
				errc <- err
			}()
			waitStarted(t, started)
			abort()
			waitClosed(t, "the aborted request did not end the upstream call's context", ended)
			if err := <-errc; !errors.Is(err, context.Canceled) {
				t.Errorf("the aborted POST returned %v", err)
			}
			if jsonCalls, sdkCalls := env.fake.counts(); jsonCalls != 1 || sdkCalls != 0 {
				t.Fatalf("CallToolJSON used %d times, CallTool %d times; want 1 and 0", jsonCalls, sdkCalls)
			}
		})
	}
}

// The agent's notifications/cancelled alone, on another request, cancels a
// fast call whose POST is still open.
func TestNotificationCancelledCancelsAnOpenFastCall(t *testing.T) {
	env := newTestEnv(t, envOptions{})
	sid := env.agent(statefulProto).ID()
	started, ended := blockUntilCancelled(t, env.fake)
	c0 := requestCount(t, "notifications/cancelled", "success")

	// The call's request is never cancelled by the test.
	type answer struct {
		code   int
		header http.Header
		body   []byte
		err    error
	}
	answered := make(chan answer, 1)
	callCtx, stopCall := context.WithCancel(context.Background())
	defer stopCall()
	go func() {
		body, h := statefulCall(7, echoPublic, `{}`, sid)
		var a answer
		a.code, a.header, a.body, a.err = env.post(callCtx, body, h)
		answered <- a
	}()
	waitStarted(t, started)

	// A cancellation of another id, or of this id on another session, is
	// not ours to act on.
	other := env.agent(statefulProto).ID()
	for _, n := range []struct{ sid, id string }{{sid, "8"}, {sid, `"7"`}, {other, "7"}} {
		code, _, body := env.mustPost(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":`+n.id+`}}`,
			map[string]string{"Mcp-Protocol-Version": statefulProto, "Mcp-Session-Id": n.sid})
		if code != http.StatusAccepted {
			t.Fatalf("notifications/cancelled of %s on another call: status %d: %s", n.id, code, body)
		}
	}
	// The SDK counts the three it was handed, in its own time.
	waitFor(t, "the SDK handled the other cancellations", func() bool {
		return requestCount(t, "notifications/cancelled", "success") == c0+3
	})
	c0 += 3
	select {
	case <-ended:
		t.Fatal("a cancellation of another request or session cancelled the call")
	case a := <-answered:
		t.Fatalf("the call answered before it was cancelled: %+v", a)
	default:
	}

	code, _, body := env.mustPost(`{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":7,"reason":"user"}}`,
		map[string]string{"Mcp-Protocol-Version": statefulProto, "Mcp-Session-Id": sid})
	if code != http.StatusAccepted {
		t.Fatalf("notifications/cancelled: status %d: %s", code, body)
	}
	waitClosed(t, "notifications/cancelled did not end the upstream call's context", ended)
	if d := requestCount(t, "notifications/cancelled", "success") - c0; d != 1 {
		t.Errorf("requests_total{notifications/cancelled,success} rose by %v, want 1", d)
	}
	select {
	case a := <-answered:
		if a.err != nil || a.code != http.StatusOK {
			t.Fatalf("the cancelled call answered %d, %v", a.code, a.err)
		}
		id, res := fastAnswer(t, a.header, a.body)
		if string(id) != "7" || !res.IsError {
			t.Fatalf("the cancelled call answered id %s, %+v", id, res)
		}
	case <-time.After(waitLimit):
		t.Fatal("the cancelled call did not answer")
	}
	if jsonCalls, sdkCalls := env.fake.counts(); jsonCalls != 1 || sdkCalls != 0 {
		t.Fatalf("CallToolJSON used %d times, CallTool %d times; want 1 and 0", jsonCalls, sdkCalls)
	}
	// The finished call is forgotten: its id no longer names a fast call.
	// The handler forgets it when it returns, which may be just after the
	// agent has the answer (the upstream's drain runs in between).
	waitFor(t, "the finished call is forgotten", func() bool {
		env.view().inflight.mu.Lock()
		defer env.view().inflight.mu.Unlock()
		return len(env.view().inflight.calls) == 0
	})
}

// ---- 4. fallbacks to the SDK ------------------------------------------------------

func TestCallsWithParamHeadersGoThroughTheSDK(t *testing.T) {
	for _, proto := range []string{statefulProto, sessionlessProto} {
		t.Run(proto, func(t *testing.T) {
			env := newTestEnv(t, envOptions{})
			cs := env.agent(proto)
			ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
			defer cancel()
			// The agent learns the schema, so it sends Mcp-Param-Region.
			if _, err := cs.ListTools(ctx, nil); err != nil {
				t.Fatal(err)
			}
			res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: regionPublic, Arguments: map[string]any{"region": "eu-west"}})
			if err != nil || res.IsError || textOf(res) != "sdk" {
				t.Fatalf("call: %v, %+v", err, res)
			}
			if jsonCalls, sdkCalls := env.fake.counts(); jsonCalls != 0 || sdkCalls != 1 {
				t.Fatalf("CallToolJSON used %d times, CallTool %d times; want 0 and 1", jsonCalls, sdkCalls)
			}
			env.fake.mu.Lock()
			gotArgs, _ := json.Marshal(env.fake.sdkArgs[0])
			env.fake.mu.Unlock()
			if !jsonEqual(gotArgs, []byte(`{"region":"eu-west"}`)) {
				t.Fatalf("the SDK path passed arguments %s", gotArgs)
			}
			// The plain tool of the same upstream takes the fast path.
			if _, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: echoPublic}); err != nil {
				t.Fatal(err)
			}
			if jsonCalls, sdkCalls := env.fake.counts(); jsonCalls != 1 || sdkCalls != 1 {
				t.Fatalf("CallToolJSON used %d times, CallTool %d times; want 1 and 1", jsonCalls, sdkCalls)
			}
		})
	}
}

// Each case is first sent well-formed (the fast path answers it), then with
// one flaw the fast path must leave to the SDK.
func TestIllFormedOrUnknownCallsAreLeftToTheSDK(t *testing.T) {
	env := newTestEnv(t, envOptions{})
	sid := env.agent(statefulProto).ID()
	type call struct {
		body   string
		header map[string]string
	}
	with := func(c call, k, v string) call {
		h := map[string]string{}
		for hk, hv := range c.header {
			h[hk] = hv
		}
		h[k] = v
		return call{c.body, h}
	}
	stateful := func() call { b, h := statefulCall(11, echoPublic, `{"a":1}`, sid); return call{b, h} }
	sessionless := func() call { b, h := sessionlessCall(12, echoPublic, `{"a":1}`); return call{b, h} }
	cases := []struct {
		name string
		good call
		bad  call
		want int // the SDK's status for bad; 0: any
	}{
		{"a batch", stateful(), call{"[" + stateful().body + "]", stateful().header}, 0},
		{"an unknown session", stateful(), with(stateful(), "Mcp-Session-Id", "no-such-session"), http.StatusNotFound},
		{"a sessionless call whose Mcp-Name differs from the body", sessionless(), with(sessionless(), "Mcp-Name", "mcp__fx__other"), http.StatusBadRequest},
		{"a sessionless call whose Mcp-Method differs from the body", sessionless(), with(sessionless(), "Mcp-Method", "tools/list"), http.StatusBadRequest},
		{"a sessionless call with another _meta protocol version", sessionless(),
			call{strings.Replace(sessionless().body, `"io.modelcontextprotocol/protocolVersion":"`+sessionlessProto+`"`,
				`"io.modelcontextprotocol/protocolVersion":"2099-01-01"`, 1), sessionless().header}, http.StatusBadRequest},
		{"a stateful call without application/json in Accept", stateful(), with(stateful(), "Accept", "text/event-stream"), 0},
		{"a sessionless call without application/json in Accept", sessionless(), with(sessionless(), "Accept", "text/event-stream"), 0},
		{"a null id", stateful(), call{strings.Replace(stateful().body, `"id":11`, `"id":null`, 1), stateful().header}, 0},
		{"an object as id", stateful(), call{strings.Replace(stateful().body, `"id":11`, `"id":{"a":1}`, 1), stateful().header}, 0},
		{"a member name in another case", stateful(), call{strings.Replace(stateful().body, `"method"`, `"METHOD"`, 1), stateful().header}, 0},
		{"a tool name member in another case", stateful(), call{strings.Replace(stateful().body, `"name"`, `"NAME"`, 1), stateful().header}, 0},
		{"a sessionless call with a protocol version the SDK does not support", sessionless(),
			call{strings.ReplaceAll(sessionless().body, sessionlessProto, "2099-01-01"), with(sessionless(), "Mcp-Protocol-Version", "2099-01-01").header}, 0},
		{"a fractional id", stateful(), call{strings.Replace(stateful().body, `"id":11`, `"id":11.0`, 1), stateful().header}, 0},
		{"an id in exponent form", stateful(), call{strings.Replace(stateful().body, `"id":11`, `"id":1e2`, 1), stateful().header}, 0},
		{"a negative zero id", stateful(), call{strings.Replace(stateful().body, `"id":11`, `"id":-0`, 1), stateful().header}, 0},
		{"a stateful call with a protocol version the SDK does not support", stateful(),
			with(stateful(), "Mcp-Protocol-Version", "2024-01-01"), http.StatusBadRequest},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			j0, s0 := env.fake.counts()
			code, h, body := env.mustPost(tc.good.body, tc.good.header)
			if code != http.StatusOK {
				t.Fatalf("the well-formed call: status %d: %s", code, body)
			}
			fastAnswer(t, h, body)
			if j, s := env.fake.counts(); j != j0+1 || s != s0 {
				t.Fatalf("the well-formed call did not take the fast path: CallToolJSON +%d, CallTool +%d", j-j0, s-s0)
			}
			code, _, body = env.mustPost(tc.bad.body, tc.bad.header)
			if j, _ := env.fake.counts(); j != j0+1 {
				t.Fatalf("the fast path served it: status %d: %s", code, body)
			}
			if tc.want != 0 && code != tc.want {
				t.Fatalf("status %d, want the SDK's %d: %s", code, tc.want, body)
			}
			t.Logf("the SDK answered %d: %.200s", code, body)
		})
	}
}

// ---- 5. idle sessions ---------------------------------------------------------------

// The janitor's clock is the test's: with an idle timeout of an hour the
// gateway's own janitor (every minute) plays no part, and the test sweeps
// at times it chooses, so that no verdict depends on how fast the machine is.
const testIdle = time.Hour

// sweepUntilKnown sweeps at now until the janitor keeps a time for every
// one of sids: a session seen for the first time counts as used at that
// sweep, unless a request of it is still in flight.
func sweepUntilKnown(t *testing.T, env *testEnv, now time.Time, sids ...string) {
	t.Helper()
	e := env.view()
	waitFor(t, "the janitor knows the sessions", func() bool {
		env.g.sweep(now, testIdle)
		e.activity.mu.Lock()
		defer e.activity.mu.Unlock()
		for _, sid := range sids {
			if _, ok := e.activity.last[sid]; !ok {
				return false
			}
		}
		return true
	})
}

// lastUsed is when the janitor last saw sid used.
func lastUsed(e *view, sid string) time.Time {
	e.activity.mu.Lock()
	defer e.activity.mu.Unlock()
	return e.activity.last[sid]
}

func TestSessionsInUseThroughTheFastPathStayAndIdleOnesEnd(t *testing.T) {
	env := newTestEnv(t, envOptions{idle: testIdle})
	busy := env.agent(statefulProto)
	unused := env.agent(statefulProto)
	e := env.view()

	// Both sessions counted as used a second before the timeout's start,
	// then the busy agent calls through the fast path.
	seen := time.Now().Add(-testIdle - time.Second)
	sweepUntilKnown(t, env, seen, busy.ID(), unused.ID())
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	const calls = 3
	for i := range calls {
		if _, err := busy.CallTool(ctx, &mcp.CallToolParams{Name: echoPublic}); err != nil {
			t.Fatalf("call %d: %v", i, err)
		}
	}
	used := lastUsed(e, busy.ID())
	if !used.After(seen) {
		t.Fatalf("the fast path's calls were not counted as use: last used %s, first seen %s", used, seen)
	}
	// Exactly one idle timeout after the last call: the busy session is not
	// idle for longer than that, the unused one is.
	env.g.sweep(used.Add(testIdle), testIdle)
	waitFor(t, "the unused session is ended", func() bool { return !e.hasSession(unused.ID()) })
	if !e.hasSession(busy.ID()) {
		t.Fatal("the busy session was ended")
	}
	if _, err := busy.CallTool(ctx, &mcp.CallToolParams{Name: echoPublic}); err != nil {
		t.Fatalf("a call of the busy session after the sweep: %v", err)
	}
	if jsonCalls, sdkCalls := env.fake.counts(); jsonCalls != calls+1 || sdkCalls != 0 {
		t.Fatalf("CallToolJSON used %d times, CallTool %d times; want %d and 0", jsonCalls, sdkCalls, calls+1)
	}
	// The unused session's next request is refused by the SDK.
	code, _, body := env.mustPost(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`,
		map[string]string{"Mcp-Protocol-Version": statefulProto, "Mcp-Session-Id": unused.ID()})
	if code != http.StatusNotFound {
		t.Fatalf("a request of the ended session: status %d, want 404: %s", code, body)
	}
	b, h := statefulCall(1, echoPublic, `{}`, unused.ID())
	if code, _, body := env.mustPost(b, h); code != http.StatusNotFound {
		t.Fatalf("a call of the ended session: status %d, want 404: %s", code, body)
	}
	// The janitor forgets ended sessions (a sweep at seen ends nothing: no
	// session is older than that).
	waitFor(t, "the ended session is forgotten", func() bool {
		env.g.sweep(seen, testIdle)
		e.activity.mu.Lock()
		defer e.activity.mu.Unlock()
		_, ok := e.activity.last[unused.ID()]
		return !ok
	})
}

// A session is idle from the end of its last POST, as with the SDK's own
// timer: a call longer than the idle timeout keeps its session.
func TestALongFastCallKeepsItsSession(t *testing.T) {
	env := newTestEnv(t, envOptions{idle: testIdle})
	cs := env.agent(statefulProto)
	sweepUntilKnown(t, env, time.Now(), cs.ID())
	started, release := make(chan struct{}), make(chan struct{})
	env.fake.setHandle(func(ctx context.Context, _ json.RawMessage) (json.RawMessage, bool, error) {
		close(started)
		select {
		case <-release:
			return json.RawMessage(`{"content":[{"type":"text","text":"done"}]}`), false, nil
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	})
	done := make(chan error, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: echoPublic})
		if err == nil && textOf(res) != "done" {
			err = fmt.Errorf("answer %q", textOf(res))
		}
		done <- err
	}()
	waitClosed(t, "the call did not reach the upstream", started)
	// The call outlasts ten idle timeouts.
	env.g.sweep(time.Now().Add(10*testIdle), testIdle)
	if !env.view().hasSession(cs.ID()) {
		t.Fatal("the session was ended during a call")
	}
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("the long call: %v", err)
	}
}

// The SDK serves each sessionless request over a temporary session with an
// empty id; the janitor must never end those, however long they run.
func TestJanitorLeavesSessionlessRequestsAlone(t *testing.T) {
	env := newTestEnv(t, envOptions{idle: testIdle})
	cs := env.agent(sessionlessProto)
	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	if _, err := cs.ListTools(ctx, nil); err != nil {
		t.Fatal(err)
	}
	started, release := make(chan struct{}), make(chan struct{})
	env.fake.setSDKHandle(func(ctx context.Context) (*mcp.CallToolResult, error) {
		close(started)
		select {
		case <-release:
			return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "sdk done"}}}, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	})
	done := make(chan error, 1)
	go func() {
		// The param-header tool goes through the SDK's sessionless handler.
		res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: regionPublic, Arguments: map[string]any{"region": "eu"}})
		if err == nil && textOf(res) != "sdk done" {
			err = fmt.Errorf("answer %q", textOf(res))
		}
		done <- err
	}()
	waitClosed(t, "the call did not reach the SDK's handler", started)
	// A first sweep would see the temporary session for the first time, a
	// second one ten idle timeouts later would find it idle.
	now := time.Now()
	env.g.sweep(now, testIdle)
	env.g.sweep(now.Add(10*testIdle), testIdle)
	close(release)
	if err := <-done; err != nil {
		t.Fatalf("a sessionless call through the SDK outlasting the idle timeout: %v", err)
	}
}

// A second call with the id of a call still in flight on the same session
// is left to the SDK: tracking both under one id would leave one of them
// impossible to cancel.
func TestADuplicateInFlightIDIsLeftToTheSDK(t *testing.T) {
	env := newTestEnv(t, envOptions{})
	sid := env.agent(statefulProto).ID()
	started, ended := blockUntilCancelled(t, env.fake)
	ctx, abort := context.WithCancel(context.Background())
	defer abort()
	body, h := statefulCall(7, echoPublic, `{}`, sid)
	errc := make(chan error, 1)
	go func() {
		_, _, _, err := env.post(ctx, body, h)
		errc <- err
	}()
	waitStarted(t, started)
	env.mustPost(body, h) // the same id again, while the first is open
	if jsonCalls, _ := env.fake.counts(); jsonCalls != 1 {
		t.Fatalf("CallToolJSON used %d times, want 1: the duplicate took the fast path", jsonCalls)
	}
	abort()
	waitClosed(t, "the first call's context did not end", ended)
	<-errc
}

// ---- 6. the body limit -------------------------------------------------------------

func TestOversizedCallsAreRefused(t *testing.T) {
	const limit = 2048
	env := newTestEnv(t, envOptions{maxBody: limit})
	sid := env.agent(statefulProto).ID()
	small := `"` + strings.Repeat("x", 100) + `"`
	large := `"` + strings.Repeat("x", 2*limit) + `"`
	for _, tc := range []struct {
		name string
		call func(args string) (string, map[string]string)
	}{
		{statefulProto, func(args string) (string, map[string]string) {
			return statefulCall(21, echoPublic, `{"s":`+args+`}`, sid)
		}},
		{sessionlessProto, func(args string) (string, map[string]string) {
			return sessionlessCall(22, echoPublic, `{"s":`+args+`}`)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			j0, _ := env.fake.counts()
			b, h := tc.call(small)
			if code, _, body := env.mustPost(b, h); code != http.StatusOK {
				t.Fatalf("a call under the limit: status %d: %s", code, body)
			}
			b, h = tc.call(large)
			if code, _, body := env.mustPost(b, h); code != http.StatusRequestEntityTooLarge {
				t.Fatalf("a call over the limit: status %d, want 413: %s", code, body)
			}
			if j, s := env.fake.counts(); j != j0+1 || s != 0 {
				t.Fatalf("CallToolJSON +%d, CallTool %d; want +1 (the small call) and 0", j-j0, s)
			}
		})
	}
}

// TestFastAnswerLeavesBeforeItsBookkeeping: the agent has the whole answer
// of a fast-path call while the gateway is still ending the call's span
// (a span processor holds the end here), so that a slow exporter, the audit
// line or the metrics never add to a tool call's latency.
func TestFastAnswerLeavesBeforeItsBookkeeping(t *testing.T) {
	g := NewWithT(t)
	hold := &holdingProcessor{ending: make(chan string, 1), release: make(chan struct{})}
	env := newTestEnv(t, envOptions{tracing: sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(hold))})
	t.Cleanup(func() { close(hold.release) }) // before the server's close, which waits for the handler

	ctx, cancel := context.WithTimeout(context.Background(), waitLimit)
	defer cancel()
	body, header := sessionlessCall(1, echoPublic, `{"text":"hi"}`)
	status, h, answer, err := env.post(ctx, body, header)
	g.Expect(err).NotTo(HaveOccurred(), "the answer must not wait for the span's end")
	g.Expect(status).To(Equal(http.StatusOK))
	id, res := fastAnswer(t, h, answer)
	g.Expect(string(id)).To(Equal("1"))
	g.Expect(res.IsError).To(BeFalse())
	g.Expect(h.Get("Content-Length")).To(Equal(strconv.Itoa(len(answer))))
	g.Eventually(hold.ending, waitLimit).Should(Receive(Equal("tools/call "+echoPublic)), "the span ends after the answer")
}

// holdingProcessor holds every span's end until release is closed, and
// says which span is ending.
type holdingProcessor struct {
	ending  chan string
	release chan struct{}
}

func (p *holdingProcessor) OnStart(context.Context, sdktrace.ReadWriteSpan) {}
func (p *holdingProcessor) OnEnd(s sdktrace.ReadOnlySpan) {
	select {
	case p.ending <- s.Name():
	default:
	}
	<-p.release
}
func (p *holdingProcessor) Shutdown(context.Context) error   { return nil }
func (p *holdingProcessor) ForceFlush(context.Context) error { return nil }

// TestWorkAfterTheAnswerWaitsForTheAnswer: what the caller defers to
// registry.AfterAnswer (the bridge's wait for the drain of the upstream's
// response) runs, and only once the agent has the whole answer.
func TestWorkAfterTheAnswerWaitsForTheAnswer(t *testing.T) {
	g := NewWithT(t)
	env := newTestEnv(t, envOptions{})
	answered := make(chan struct{})
	ran := make(chan bool, 1)
	env.fake.setHandle(func(ctx context.Context, _ json.RawMessage) (json.RawMessage, bool, error) {
		after := registry.AfterAnswerFrom(ctx)
		if after == nil {
			return nil, false, errors.New("no AfterAnswer in the call's context")
		}
		after.Defer(func() {
			select {
			case <-answered:
				ran <- true
			case <-time.After(waitLimit):
				ran <- false
			}
		})
		return json.RawMessage(defaultResult), false, nil
	})

	ctx, cancel := context.WithTimeout(context.Background(), 2*waitLimit)
	defer cancel()
	body, header := sessionlessCall(1, echoPublic, `{"text":"hi"}`)
	status, h, answer, err := env.post(ctx, body, header)
	close(answered)
	g.Expect(err).NotTo(HaveOccurred())
	g.Expect(status).To(Equal(http.StatusOK))
	_, res := fastAnswer(t, h, answer)
	g.Expect(res.IsError).To(BeFalse(), "%s", answer)
	g.Eventually(ran, waitLimit).Should(Receive(BeTrue()), "the deferred work ran once the answer had arrived")
}

// A big result is written to the agent at most writeStep bytes a write, and
// the answer is the same as written whole: one write of 16 MiB copies
// megabytes into the socket in one system call.
func TestABigResultIsWrittenInSteps(t *testing.T) {
	for _, size := range []int{10, smallResult + 1, 3*writeStep + 5} {
		t.Run(strconv.Itoa(size), func(t *testing.T) {
			result := json.RawMessage(`"` + strings.Repeat("r", size-2) + `"`)
			w := &writeSizes{ResponseRecorder: httptest.NewRecorder()}
			writeResult(w, "", json.RawMessage(`7`), result)
			want := `{"jsonrpc":"2.0","id":7,"result":` + string(result) + "}\n"
			if got := w.Body.String(); got != want {
				t.Fatalf("answer of %d bytes, want %d", len(got), len(want))
			}
			if cl := w.Header().Get("Content-Length"); cl != strconv.Itoa(len(want)) {
				t.Errorf("Content-Length %s, want %d", cl, len(want))
			}
			if w.largest > max(writeStep, smallResult+64) {
				t.Errorf("a write of %d bytes, more than %d", w.largest, writeStep)
			}
		})
	}
}

// writeSizes notes the largest write.
type writeSizes struct {
	*httptest.ResponseRecorder
	largest int
}

func (w *writeSizes) Write(p []byte) (int, error) {
	w.largest = max(w.largest, len(p))
	return w.ResponseRecorder.Write(p)
}
