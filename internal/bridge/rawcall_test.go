package bridge

import (
	"bufio"
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

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/jsonspan"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/test/fixture"
)

// rawIDPrefix starts the ids of the calls CallToolJSON posts itself.
const rawIDPrefix = "mcpbridge-"

// rawPost is one POST an upstream received, with its body.
type rawPost struct {
	Header http.Header
	Body   []byte
	msg    struct {
		ID     json.RawMessage `json:"id"`
		Method string          `json:"method"`
		Params struct {
			Name      string          `json:"name"`
			Arguments json.RawMessage `json:"arguments"`
			RequestID json.RawMessage `json:"requestId"`
			Meta      json.RawMessage `json:"_meta"`
		} `json:"params"`
	}
}

// ours reports whether the POST is a request CallToolJSON sent itself: the
// SDK's ids are numbers, ours strings with rawIDPrefix.
func (p rawPost) ours() bool {
	var id string
	return json.Unmarshal(p.msg.ID, &id) == nil && strings.HasPrefix(id, rawIDPrefix)
}

// rawPostLog records the body of every POST before the wrapped handler
// serves it.
type rawPostLog struct {
	mu    sync.Mutex
	posts []rawPost
}

func (l *rawPostLog) wrap(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodPost && r.Body != nil {
			body, _ := io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
			p := rawPost{Header: r.Header.Clone(), Body: body}
			_ = json.Unmarshal(body, &p.msg)
			l.mu.Lock()
			l.posts = append(l.posts, p)
			l.mu.Unlock()
		}
		h.ServeHTTP(w, r)
	})
}

// matching is the recorded POSTs for which keep holds, in arrival order.
func (l *rawPostLog) matching(keep func(rawPost) bool) []rawPost {
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []rawPost
	for _, p := range l.posts {
		if keep(p) {
			out = append(out, p)
		}
	}
	return out
}

// ourCalls is the tools/call requests CallToolJSON posted itself.
func (l *rawPostLog) ourCalls() []rawPost {
	return l.matching(func(p rawPost) bool { return p.msg.Method == "tools/call" && p.ours() })
}

// cancellationsOf is the notifications/cancelled naming the request id.
func (l *rawPostLog) cancellationsOf(id json.RawMessage) []rawPost {
	return l.matching(func(p rawPost) bool {
		return p.msg.Method == "notifications/cancelled" && bytes.Equal(p.msg.Params.RequestID, id)
	})
}

// rawServeCounting is httpServe with a count of the TCP connections the
// server accepted.
func rawServeCounting(t *testing.T, h http.Handler) (*httpUpstream, *atomic.Int64) {
	t.Helper()
	u := &httpUpstream{}
	u.handler.Store(&h)
	conns := new(atomic.Int64)
	u.srv = httptest.NewUnstartedServer(u) // listens on 127.0.0.1
	u.srv.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			conns.Add(1)
		}
	}
	u.srv.Start()
	t.Cleanup(func() {
		u.srv.CloseClientConnections()
		u.srv.Close()
	})
	return u, conns
}

// rawCanonical is v as JSON with the keys sorted, for comparing results
// whatever their field order.
func rawCanonical(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var generic any
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatal(err)
	}
	b, err = json.Marshal(generic)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// rawDecode decodes what CallToolJSON returned as the SDK would.
// rawSameAsCallTool checks that raw, what CallToolJSON returned, decodes to
// what CallTool returns for the same call, and returns it decoded.
func rawSameAsCallTool(t *testing.T, ctx context.Context, s *Supervisor, tool string, args, raw json.RawMessage) *mcp.CallToolResult {
	t.Helper()
	var sdkArgs any
	if args != nil {
		sdkArgs = args
	}
	want, err := s.CallTool(ctx, tool, sdkArgs)
	if err != nil {
		t.Fatalf("%s through the SDK: %v", tool, err)
	}
	got := rawDecode(t, raw)
	if g, w := rawCanonical(t, got), rawCanonical(t, want); g != w {
		t.Errorf("%s: CallToolJSON's result decodes to\n%s\nCallTool returned\n%s", tool, g, w)
	}
	return got
}

func rawDecode(t *testing.T, raw json.RawMessage) *mcp.CallToolResult {
	t.Helper()
	var res mcp.CallToolResult
	if err := json.Unmarshal(raw, &res); err != nil {
		t.Fatalf("result %s does not decode as a CallToolResult: %v", raw, err)
	}
	return &res
}

// rawEcho calls echo through CallToolJSON and checks the answer.
func rawEcho(t *testing.T, s *Supervisor, text string) {
	t.Helper()
	args, _ := json.Marshal(map[string]string{"text": text})
	raw, isError, err := s.CallToolJSON(httpCtx(t), fixture.ToolEcho, args)
	if err != nil {
		t.Fatalf("echo as JSON: %v", err)
	}
	if isError {
		t.Fatalf("echo as JSON: isError, result %s", raw)
	}
	if got := RenderText(rawDecode(t, raw)); got != text {
		t.Fatalf("echo as JSON answered %q, want %q", got, text)
	}
}

// rawLive is the supervisor's live generation.
func rawLive(t *testing.T, s *Supervisor) *generation {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live == nil {
		t.Fatal("no live generation")
	}
	return s.live
}

// rawNotLost fails the test if g was reported lost. lose runs inside
// the call that fails, so right after it returns the answer is final.
func rawNotLost(t *testing.T, g *generation, after string) {
	t.Helper()
	select {
	case <-g.lost:
		t.Errorf("%s marked generation %d lost: %v", after, g.num, g.lostErr)
	default:
	}
}

// rawStillConnected checks that the supervisor kept generation 1 and serves
// JSON calls.
func rawStillConnected(t *testing.T, s *Supervisor, g *generation, after string) {
	t.Helper()
	rawNotLost(t, g, after)
	rawEcho(t, s, "still connected after "+after)
	if sn := s.Snapshot(); sn.Phase != v1alpha1.PhaseReady || sn.Generation != 1 {
		t.Errorf("%s changed the connection: %s, generation %d", after, sn.Phase, sn.Generation)
	}
	rawNotLost(t, g, after)
}

// The result of CallToolJSON is the server's result as it sent it: it
// decodes to what CallTool returns for the same call, the request went out
// as our own POST (string id, protocol headers, per-request _meta from
// 2026-07-28 on), and bytes the SDK would not keep (unknown fields, escapes,
// spacing) come back untouched, from a JSON body or an SSE stream.
func TestCallToolJSONOverHTTPReturnsTheServersResultBytes(t *testing.T) {
	httpForEachProtocol(t, func(t *testing.T, stateless bool) {
		var log rawPostLog
		up := httpServe(t, log.wrap(httpFixture(t, fixture.Options{Stateless: stateless})))
		s, _ := startSupervisor(t, httpPolicy(up.URL()))
		sn := waitFor(t, s, "Ready", isReady)
		version := sn.ServerInfo.ProtocolVersion
		ctx := httpCtx(t)

		calls := []struct {
			tool string
			args json.RawMessage
		}{
			{fixture.ToolEcho, json.RawMessage(`{"text":"héllo \"quoted\" <&> \u2028"}`)},
			{fixture.ToolStructured, json.RawMessage(`{"text":"héllo, wörld"}`)},
			{fixture.ToolMedia, nil}, // no arguments: sent as {}
		}
		for _, c := range calls {
			raw, isError, err := s.CallToolJSON(ctx, c.tool, c.args)
			if err != nil {
				t.Fatalf("%s as JSON: %v", c.tool, err)
			}
			if isError {
				t.Fatalf("%s as JSON: isError, result %s", c.tool, raw)
			}
			got := rawSameAsCallTool(t, ctx, s, c.tool, c.args, raw)
			if len(got.Content) == 0 {
				t.Errorf("%s: no content in %s", c.tool, raw)
			}
		}
		const text = "héllo, wörld"
		raw, _, err := s.CallToolJSON(ctx, fixture.ToolStructured, json.RawMessage(`{"text":"`+text+`"}`))
		if err != nil {
			t.Fatal(err)
		}
		if g, w := rawCanonical(t, rawDecode(t, raw).StructuredContent),
			rawCanonical(t, fixture.StructuredOutput{Text: text, Length: len(text), PID: os.Getpid()}); g != w {
			t.Errorf("structuredContent %s, want %s", g, w)
		}

		// Each JSON call was one POST of ours, not a call through the SDK.
		posts := log.ourCalls()
		if len(posts) != len(calls)+1 {
			t.Fatalf("%d tools/call POSTs with a %q id, want one per CallToolJSON (%d)", len(posts), rawIDPrefix, len(calls)+1)
		}
		ids := map[string]bool{}
		for i, p := range posts {
			if ids[string(p.msg.ID)] {
				t.Errorf("id %s used twice", p.msg.ID)
			}
			ids[string(p.msg.ID)] = true
			tool := fixture.ToolStructured
			if i < len(calls) {
				tool = calls[i].tool
				wantArgs := calls[i].args
				if wantArgs == nil {
					wantArgs = json.RawMessage(`{}`)
				}
				// Same JSON value; json.Marshal compacts and HTML-escapes it.
				if g, w := rawCanonical(t, p.msg.Params.Arguments), rawCanonical(t, wantArgs); g != w {
					t.Errorf("%s: arguments sent as %s, want the caller's %s", tool, g, w)
				}
			}
			if p.msg.Params.Name != tool {
				t.Errorf("call %d named %q, want %q", i, p.msg.Params.Name, tool)
			}
			h := p.Header
			if got := h.Get("Mcp-Protocol-Version"); got != version {
				t.Errorf("%s: Mcp-Protocol-Version %q, want %q", tool, got, version)
			}
			if got := h.Get("Content-Type"); got != "application/json" {
				t.Errorf("%s: Content-Type %q", tool, got)
			}
			if got := h.Get("Accept"); !strings.Contains(got, "application/json") || !strings.Contains(got, "text/event-stream") {
				t.Errorf("%s: Accept %q, want JSON and SSE", tool, got)
			}
			if stateless {
				if h.Get("Mcp-Session-Id") != "" {
					t.Errorf("%s: stateless call carried a session id", tool)
				}
				if h.Get("Mcp-Method") != "tools/call" || h.Get("Mcp-Name") != tool {
					t.Errorf("%s: Mcp-Method %q, Mcp-Name %q", tool, h.Get("Mcp-Method"), h.Get("Mcp-Name"))
				}
				var meta map[string]json.RawMessage
				if err := json.Unmarshal(p.msg.Params.Meta, &meta); err != nil {
					t.Fatalf("%s: _meta %s: %v", tool, p.msg.Params.Meta, err)
				}
				if got := string(meta["io.modelcontextprotocol/protocolVersion"]); got != `"`+version+`"` {
					t.Errorf("%s: _meta protocolVersion %s, want %q", tool, got, version)
				}
				if !bytes.Contains(meta["io.modelcontextprotocol/clientInfo"], []byte(clientImpl.Name)) {
					t.Errorf("%s: _meta clientInfo %s", tool, meta["io.modelcontextprotocol/clientInfo"])
				}
				if _, ok := meta["io.modelcontextprotocol/clientCapabilities"]; !ok {
					t.Errorf("%s: _meta without clientCapabilities: %s", tool, p.msg.Params.Meta)
				}
			} else {
				if got, want := h.Get("Mcp-Session-Id"), rawLive(t, s).sess.ID(); got == "" || got != want {
					t.Errorf("%s: Mcp-Session-Id %q, want the session's %q", tool, got, want)
				}
				if p.msg.Params.Meta != nil {
					t.Errorf("%s: _meta %s sent to a %s server", tool, p.msg.Params.Meta, version)
				}
			}
		}

		// Bytes the SDK would rewrite come back as the server sent them.
		const result = `{"content" : [{"type":"text","text":"caf\u00e9 \u003c&\u003e"}],` +
			` "isError":false, "x-unknown": {"kept": [1.50, 2e3, null]}, "_meta":{"a":"b"}}`
		for _, sse := range []bool{false, true} {
			up.setIntercept(func(w http.ResponseWriter, r httpRecord) bool {
				if r.RPCMethod != "tools/call" || !bytes.HasPrefix(r.RPCID, []byte(`"`+rawIDPrefix)) {
					return false
				}
				answer := `{"jsonrpc":"2.0","id":` + string(r.RPCID) + `,"result":` + result + `}`
				if !sse {
					w.Header().Set("Content-Type", "application/json")
					_, _ = io.WriteString(w, answer)
					return true
				}
				w.Header().Set("Content-Type", "text/event-stream")
				_, _ = io.WriteString(w, "event: message\ndata: "+
					`{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"x"}}`+
					"\n\nevent: message\ndata: "+answer+"\n\n")
				return true
			})
			raw, isError, err := s.CallToolJSON(ctx, fixture.ToolEcho, json.RawMessage(`{"text":"x"}`))
			up.setIntercept(nil)
			if err != nil {
				t.Fatalf("sse=%v: %v", sse, err)
			}
			if isError {
				t.Errorf("sse=%v: isError for %s", sse, raw)
			}
			if string(raw) != result {
				t.Errorf("sse=%v: result\n%s\nwant the server's bytes\n%s", sse, raw, result)
			}
		}
	})
}

// isError: true is a result (isError=true, no error); a JSON-RPC error is an
// error carrying the server's message, and neither touches the connection.
func TestCallToolJSONToolErrorIsAResultAndJSONRPCErrorIsAnError(t *testing.T) {
	httpForEachProtocol(t, func(t *testing.T, stateless bool) {
		up := httpServe(t, httpFixture(t, fixture.Options{Stateless: stateless}))
		s, _ := startSupervisor(t, httpPolicy(up.URL()))
		waitFor(t, s, "Ready", isReady)
		g := rawLive(t, s)
		ctx := httpCtx(t)

		raw, isError, err := s.CallToolJSON(ctx, fixture.ToolFail, json.RawMessage(`{"text":"it broke"}`))
		if err != nil {
			t.Fatalf("a tool error is not a call error: %v", err)
		}
		if !isError {
			t.Fatalf("isError false for the fail tool's result %s", raw)
		}
		if res := rawDecode(t, raw); !res.IsError || RenderText(res) != "it broke" {
			t.Errorf("fail tool result %s", raw)
		}
		rawNotLost(t, g, "a tool error")

		// checkRPCError checks that err is the server's JSON-RPC error want.
		checkRPCError := func(what string, raw json.RawMessage, isError bool, err error, want *jsonrpc.Error) {
			t.Helper()
			if raw != nil || isError {
				t.Errorf("%s: result %s, isError %v alongside the error", what, raw, isError)
			}
			var got *jsonrpc.Error
			if !errors.As(err, &got) || got.Code != want.Code || got.Message != want.Message {
				t.Errorf("%s: %v, want the server's JSON-RPC error %d %q", what, err, want.Code, want.Message)
			}
			if !strings.Contains(err.Error(), want.Message) {
				t.Errorf("%s: %q lacks the server's message %q", what, err, want.Message)
			}
			var se *StageError
			if !errors.As(err, &se) || se.Stage != StageToolsCall {
				t.Errorf("%s: %v, want a %s stage error", what, err, StageToolsCall)
			}
		}

		// A JSON-RPC error in a 200 answer.
		boom := &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "the tool blew up <here>"}
		up.setIntercept(func(w http.ResponseWriter, r httpRecord) bool {
			if r.RPCMethod != "tools/call" || !bytes.HasPrefix(r.RPCID, []byte(`"`+rawIDPrefix)) {
				return false
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"error":{"code":%d,"message":%q}}`, r.RPCID, boom.Code, boom.Message)
			return true
		})
		raw, isError, err = s.CallToolJSON(ctx, fixture.ToolEcho, json.RawMessage(`{"text":"x"}`))
		up.setIntercept(nil)
		if err == nil {
			t.Fatalf("JSON-RPC error answer: result %s (isError %v), want an error", raw, isError)
		}
		checkRPCError("JSON-RPC error answer", raw, isError, err, boom)
		rawStillConnected(t, s, g, "a JSON-RPC error answer")

		// The server's own error for an unknown tool, as the SDK sees it.
		_, sdkErr := s.CallTool(ctx, "no_such_tool", map[string]any{})
		var want *jsonrpc.Error
		if !errors.As(sdkErr, &want) {
			t.Fatalf("CallTool of an unknown tool: %v, want a JSON-RPC error", sdkErr)
		}
		raw, isError, err = s.CallToolJSON(ctx, "no_such_tool", json.RawMessage(`{}`))
		t.Logf("unknown tool: CallTool %v; CallToolJSON %v", sdkErr, err)
		if err == nil {
			t.Fatalf("unknown tool: result %s (isError %v), want an error", raw, isError)
		}
		rawStillConnected(t, s, g, "an unknown tool")
		// SEP-2575: from 2026-07-28 on, -32602 comes with HTTP 400 and the
		// JSON-RPC error as the body; it is still the server's answer.
		checkRPCError("unknown tool", raw, isError, err, want)
	})
}

// Calls forwarded as JSON go back to the connection pool: a call that
// closed its connection would make every call pay a new TCP handshake. Every
// other call leaves the wait for its drain to a registry.AfterAnswer, run
// once the result is checked, as the gateway does after writing it.
func TestCallToolJSONReusesUpstreamConnections(t *testing.T) {
	httpForEachProtocol(t, func(t *testing.T, stateless bool) {
		up, conns := rawServeCounting(t, httpFixture(t, fixture.Options{Stateless: stateless}))
		s, _ := startSupervisor(t, httpPolicy(up.URL()))
		waitFor(t, s, "Ready", isReady)
		atReady := conns.Load()

		const calls = 100
		for i := range calls {
			text := fmt.Sprintf("call %d", i)
			ctx, after := httpCtx(t), &registry.AfterAnswer{}
			if i%2 == 1 {
				ctx = registry.WithAfterAnswer(ctx, after)
			}
			raw, isError, err := s.CallToolJSON(ctx, fixture.ToolEcho, json.RawMessage(`{"text":"`+text+`"}`))
			if err != nil || isError {
				t.Fatalf("%s: %v, isError %v, %s", text, err, isError, raw)
			}
			if got := RenderText(rawDecode(t, raw)); got != text {
				t.Fatalf("%s answered %q", text, got)
			}
			after.Run()
		}
		total := conns.Load()
		t.Logf("%d connections at Ready, %d after %d calls", atReady, total, calls)
		if total > 4 {
			t.Errorf("%d sequential calls opened %d TCP connections in all (%d before them), want at most 4", calls, total, atReady)
		}
	})
}

// toolCallTimeoutMs bounds a JSON call, the server's handler is cancelled
// (notifications/cancelled on a session), and the connection stays up.
func TestCallToolJSONTimeoutIsEnforcedAndCancelsUpstream(t *testing.T) {
	httpForEachProtocol(t, func(t *testing.T, stateless bool) {
		events := eventsPath(t)
		var log rawPostLog
		up := httpServe(t, log.wrap(httpFixture(t, fixture.Options{Stateless: stateless, EventsFile: events})))
		p := httpPolicy(up.URL())
		p.ToolCallTimeout = 300 * time.Millisecond
		s, _ := startSupervisor(t, p)
		waitFor(t, s, "Ready", isReady)
		g := rawLive(t, s)

		start := time.Now()
		raw, _, err := s.CallToolJSON(httpCtx(t), fixture.ToolSleep, json.RawMessage(`{"ms":10000}`))
		took := time.Since(start)
		t.Logf("call ended after %v: %v", took, err)
		if err == nil || !strings.Contains(err.Error(), "timed out after 300ms") {
			t.Fatalf("call error %v (result %s), want the 300ms tool call timeout", err, raw)
		}
		var se *StageError
		if !errors.As(err, &se) || se.Stage != StageToolsCall {
			t.Errorf("timeout %v, want a %s stage error", err, StageToolsCall)
		}
		// One-sided: not before the configured timeout; that it did not
		// wait for the 10 s sleep is the error above and the cancellation.
		if took < 300*time.Millisecond {
			t.Errorf("call ended after %v, before its 300ms timeout", took)
		}
		rawCheckCancelled(t, &log, events, stateless)
		rawStillConnected(t, s, g, "a timed-out call")
	})
}

// The caller's cancellation ends a JSON call at once with ctx.Err() and
// reaches the server (2025-11-25: notifications/cancelled; 2026-07-28: the
// request is abandoned).
func TestCallToolJSONCallerCancellationReachesServer(t *testing.T) {
	httpForEachProtocol(t, func(t *testing.T, stateless bool) {
		events := eventsPath(t)
		var log rawPostLog
		up := httpServe(t, log.wrap(httpFixture(t, fixture.Options{Stateless: stateless, EventsFile: events})))
		s, _ := startSupervisor(t, httpPolicy(up.URL()))
		waitFor(t, s, "Ready", isReady)
		g := rawLive(t, s)

		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		done := make(chan error, 1)
		go func() {
			_, _, err := s.CallToolJSON(ctx, fixture.ToolSleep, json.RawMessage(`{"ms":10000}`))
			done <- err
		}()
		waitEvent(t, events, "call sleep", func(ev fixture.Event) bool {
			return ev.Kind == fixture.EventCall && ev.Tool == fixture.ToolSleep
		})
		cancel()
		start := time.Now()
		select {
		case err := <-done:
			t.Logf("returned %v after the cancel", time.Since(start))
			if err != context.Canceled { //nolint:errorlint // ctx.Err() itself, not a wrapper
				t.Fatalf("cancelled call returned %v, want ctx.Err() (context.Canceled)", err)
			}
		case <-time.After(eventually):
			t.Fatal("the cancelled call did not return")
		}
		rawCheckCancelled(t, &log, events, stateless)
		rawStillConnected(t, s, g, "a cancelled call")
	})
}

// rawCheckCancelled waits for the fixture to record that the one sleep call
// posted by CallToolJSON was cancelled; on a session, the cancellation must
// also have come as notifications/cancelled naming that call.
func rawCheckCancelled(t *testing.T, log *rawPostLog, events string, stateless bool) {
	t.Helper()
	posts := log.ourCalls()
	if len(posts) != 1 || posts[0].msg.Params.Name != fixture.ToolSleep {
		t.Fatalf("%d tools/call POSTs of ours, want the one sleep", len(posts))
	}
	var id string
	_ = json.Unmarshal(posts[0].msg.ID, &id)
	ev := waitEvent(t, events, "cancelled sleep "+id, func(ev fixture.Event) bool {
		return ev.Kind == fixture.EventCancelled && ev.Tool == fixture.ToolSleep
	})
	if ev.RequestID != id {
		t.Errorf("the fixture cancelled request %q, want ours %q", ev.RequestID, id)
	}
	if stateless {
		t.Logf("notifications/cancelled for %s: %d (not needed without a session)", id, len(log.cancellationsOf(posts[0].msg.ID)))
		return
	}
	httpPoll(t, "notifications/cancelled for "+id, func() bool { return len(log.cancellationsOf(posts[0].msg.ID)) > 0 })
	n := log.cancellationsOf(posts[0].msg.ID)[0]
	if got, want := n.Header.Get("Mcp-Session-Id"), posts[0].Header.Get("Mcp-Session-Id"); got != want {
		t.Errorf("notifications/cancelled went to session %q, the call to %q", got, want)
	}
}

// The server forgets the session while JSON calls go on: the call that
// meets the 404 fails as a lost session, the supervisor reconnects with a
// new session and identical tools, and the next JSON call succeeds there.
func TestCallToolJSONSessionLossReconnectsAndNextCallSucceeds(t *testing.T) {
	for _, tc := range []struct {
		name    string
		jsonrpc bool
	}{{"plain-404", false}, {"jsonrpc-32001-404", true}} {
		t.Run(tc.name, func(t *testing.T) {
			var log rawPostLog
			up := httpServe(t, log.wrap(httpFixture(t, fixture.Options{
				SessionExpireAfter:   500 * time.Millisecond,
				SessionExpireJSONRPC: tc.jsonrpc,
			})))
			// No health check: only the call can notice the loss.
			s, _ := startSupervisor(t, httpPolicy(up.URL()))
			sn1 := waitFor(t, s, "Ready", isReady)
			if sn1.Generation != 1 {
				t.Fatalf("first Ready in generation %d", sn1.Generation)
			}
			first := rawLive(t, s).sess.ID()

			var callErr error
			calls := 0
			httpPoll(t, "a JSON call to meet the forgotten session", func() bool {
				calls++
				_, _, callErr = s.CallToolJSON(httpCtx(t), fixture.ToolEcho, json.RawMessage(`{"text":"x"}`))
				return callErr != nil
			})
			t.Logf("call %d failed: %v", calls, callErr)
			var se *StageError
			if !errors.As(callErr, &se) || se.Stage != StageToolsCall {
				t.Errorf("failed call: %v, want a %s stage error", callErr, StageToolsCall)
			}
			// The 404 marks the generation lost inside the round trip, so
			// the supervisor may have closed it before the call is
			// classified: either error is right, as for CallTool.
			lost := errors.Is(callErr, mcp.ErrSessionMissing) && strings.Contains(callErr.Error(), "HTTP 404")
			if !lost && !errors.Is(callErr, ErrUnavailable) {
				t.Errorf("failed call: %v, want the lost session (HTTP 404, ErrSessionMissing) or ErrUnavailable", callErr)
			}

			sn2 := waitFor(t, s, "Ready in a new generation", func(sn Snapshot) bool {
				return sn.Phase == v1alpha1.PhaseReady && sn.Generation >= 2
			})
			if sn2.LastError == nil || !errors.Is(sn2.LastError, mcp.ErrSessionMissing) {
				t.Errorf("last error %v, want the session loss", sn2.LastError)
			}
			if got, want := toolNames(sn2.Tools), toolNames(sn1.Tools); !slices.Equal(got, want) {
				t.Fatalf("tools changed across the reconnect: %v -> %v", want, got)
			}
			if got, want := httpToolsJSON(t, sn2.Tools), httpToolsJSON(t, sn1.Tools); got != want {
				t.Fatalf("tool definitions changed across the reconnect:\n%s\n->\n%s", want, got)
			}

			rawEcho(t, s, "after the session loss")
			posts := log.ourCalls()
			last := posts[len(posts)-1]
			if id := last.Header.Get("Mcp-Session-Id"); id == "" || id == first {
				t.Fatalf("the JSON call after reconnecting used session %q; the lost one was %q", id, first)
			}
		})
	}
}

// readAnswer, readEvents and matchAnswer find the answer to our id in a
// JSON body or an SSE stream, and say why when there is none.
func TestReadEventsAndMatchAnswerFindTheAnswerOrSayWhy(t *testing.T) {
	const id = "mcpbridge-7"
	const res = `{"content":[{"type":"text","text":"ok"}]}`
	answer := `{"jsonrpc":"2.0","id":"` + id + `","result":` + res + `}`
	other := `{"jsonrpc":"2.0","id":"mcpbridge-6","result":{"content":[{"type":"text","text":"not ours"}]}}`
	numeric := `{"jsonrpc":"2.0","id":7,"result":{"content":[]}}`
	note := `{"jsonrpc":"2.0","method":"notifications/progress","params":{"progressToken":"t","progress":1}}`
	rpcErr := `{"jsonrpc":"2.0","id":"` + id + `","error":{"code":-32602,"message":"unknown tool \"nope\""}}`
	sse := "text/event-stream"
	for _, tc := range []struct {
		name, contentType, body string
		want                    string // the result, when there is one
		wantErr                 string // part of the error, when there is one
		wantIs                  error
		wantCode                int64 // of a *jsonrpc.Error
	}{
		{name: "json", contentType: "application/json", body: answer, want: res},
		{name: "json-with-charset", contentType: "application/json; charset=utf-8", body: answer, want: res},
		{name: "sse", contentType: sse, body: "event: message\ndata: " + answer + "\n\n", want: res},
		{name: "sse-notification-first", contentType: sse,
			body: "event: message\nid: 1\ndata: " + note + "\n\nevent: message\nid: 2\ndata: " + answer + "\n\n", want: res},
		{name: "sse-other-ids-first", contentType: sse,
			body: "data: " + other + "\n\ndata: " + numeric + "\n\ndata: " + answer + "\n\n", want: res},
		{name: "sse-crlf", contentType: sse,
			body: "event: message\r\ndata: " + note + "\r\n\r\nevent: message\r\ndata: " + answer + "\r\n\r\n", want: res},
		// The lines of one event's data join with "\n", kept inside the result.
		{name: "sse-multi-line-data", contentType: sse,
			body: "data: {\"jsonrpc\":\"2.0\",\ndata: \"id\":\"" + id + "\",\ndata: \"result\":{\"content\":[],\ndata: \"isError\":true}}\n\n",
			want: "{\"content\":[],\n\"isError\":true}"},
		{name: "sse-no-space-comments-retry", contentType: sse,
			body: ": keep-alive\nretry: 1000\n\ndata:" + answer + "\n\n", want: res},
		{name: "sse-jsonrpc-error", contentType: sse, body: "data: " + note + "\n\ndata: " + rpcErr + "\n\n",
			wantErr: `unknown tool "nope"`, wantCode: -32602},
		{name: "json-jsonrpc-error", contentType: "application/json", body: rpcErr,
			wantErr: `unknown tool "nope"`, wantCode: -32602},
		{name: "sse-ends-before-the-answer", contentType: sse, body: "data: " + note + "\n\ndata: " + other + "\n\n",
			wantErr: "ended before the answer", wantIs: errStreamEnded},
		{name: "sse-empty", contentType: sse, body: "", wantErr: "ended before the answer", wantIs: errStreamEnded},
		// The SDK dispatches an event the stream ends in, blank line or not.
		{name: "sse-answer-at-eof-without-blank-line", contentType: sse, body: "event: message\ndata: " + answer, want: res},
		// A server primes a resumable stream with an id and empty data.
		{name: "sse-priming-event-first", contentType: sse,
			body: "id: p-0\ndata: \n\nid: p-1\nevent: message\ndata: " + answer + "\n\n", want: res},
		// Only "message" events carry JSON-RPC messages.
		{name: "sse-other-event-name-ignored", contentType: sse,
			body: "event: ping\ndata: " + answer + "\n\nevent: message\ndata: " + answer + "\n\n", want: res},
		{name: "sse-only-other-event-names", contentType: sse, body: "event: ping\ndata: " + answer + "\n\n",
			wantErr: "ended before the answer", wantIs: errStreamEnded},
		{name: "sse-event-above-the-limit", contentType: sse,
			body: "data: \"" + strings.Repeat("x", maxMessageBytes) + "\"\n\n", wantErr: "exceeds", wantIs: errTooLarge},
		{name: "sse-data-lines-above-the-limit", contentType: sse,
			body: strings.Repeat("data: "+strings.Repeat("x", 1<<20)+"\n", 17) + "\n", wantErr: "exceeds", wantIs: errTooLarge},
		{name: "json-above-the-limit", contentType: "application/json",
			body:    `{"jsonrpc":"2.0","id":"` + id + `","result":{"x":"` + strings.Repeat("x", maxMessageBytes) + `"}}`,
			wantErr: "exceeds", wantIs: errTooLarge},
		{name: "sse-invalid-json", contentType: sse, body: "data: {\"jsonrpc\":\"2.0\",\"id\":\n\n",
			wantErr: "invalid JSON-RPC message"},
		{name: "json-invalid", contentType: "application/json", body: `{"jsonrpc":`, wantErr: "invalid JSON-RPC message"},
		{name: "sse-answer-without-result", contentType: sse, body: `data: {"jsonrpc":"2.0","id":"` + id + `"}` + "\n\n",
			wantErr: "without a result"},
		{name: "unknown-content-type", contentType: "text/plain", body: answer, wantErr: `content type "text/plain"`},
		{name: "json-another-id", contentType: "application/json", body: other, wantErr: "the id of another request"},
		{name: "sse-error-with-null-id", contentType: sse,
			body:    `data: {"jsonrpc":"2.0","id":null,"error":{"code":-32700,"message":"parse error"}}` + "\n\n",
			wantErr: "parse error", wantCode: -32700},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp := &http.Response{
				StatusCode: http.StatusOK,
				Header:     http.Header{"Content-Type": []string{tc.contentType}},
				Body:       io.NopCloser(strings.NewReader(tc.body)),
			}
			got, err := readAnswer(resp, id)
			if tc.wantErr == "" {
				if err != nil {
					t.Fatalf("error %v, want result %s", err, tc.want)
				}
				if string(got) != tc.want {
					t.Fatalf("result %s, want %s", got, tc.want)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("result %s, error %v; want an error containing %q", got, err, tc.wantErr)
			}
			if got != nil {
				t.Errorf("result %s alongside the error", got)
			}
			if tc.wantIs != nil && !errors.Is(err, tc.wantIs) {
				t.Errorf("error %v does not wrap %v", err, tc.wantIs)
			}
			if errors.Is(err, errNotOurs) {
				t.Errorf("error %v leaks errNotOurs", err)
			}
			var wire *jsonrpc.Error
			if isWire := errors.As(err, &wire); isWire != (tc.wantCode != 0) || (isWire && wire.Code != tc.wantCode) {
				t.Errorf("error %v: JSON-RPC error %v, want code %d", err, wire, tc.wantCode)
			}
		})
	}

	// matchAnswer alone: messages for other requests are told apart,
	// numbers included.
	for _, msg := range []string{other, numeric, note} {
		if got, err := matchAnswer([]byte(msg), id); !errors.Is(err, errNotOurs) {
			t.Errorf("matchAnswer(%s) = %s, %v; want errNotOurs", msg, got, err)
		}
	}
	if got, err := matchAnswer([]byte(numeric), "7"); !errors.Is(err, errNotOurs) {
		t.Errorf("the numeric id 7 matched the string id \"7\": %s, %v", got, err)
	}
	if got, err := matchAnswer([]byte(answer), id); err != nil || string(got) != res {
		t.Errorf("matchAnswer(answer) = %s, %v", got, err)
	}
}

// Over stdio CallToolJSON goes through the SDK: its JSON is CallTool's
// result, isError included.
func TestCallToolJSONOverStdioMatchesCallTool(t *testing.T) {
	s, _ := startSupervisor(t, stdioPolicy())
	waitFor(t, s, "Ready", isReady)
	ctx := httpCtx(t)
	for _, c := range []struct {
		tool    string
		args    json.RawMessage
		isError bool
	}{
		{fixture.ToolEcho, json.RawMessage(`{"text":"héllo over stdio"}`), false},
		{fixture.ToolStructured, json.RawMessage(`{"text":"structured"}`), false},
		{fixture.ToolFail, json.RawMessage(`{"text":"it broke"}`), true},
		{fixture.ToolMedia, nil, false},
	} {
		raw, isError, err := s.CallToolJSON(ctx, c.tool, c.args)
		if err != nil {
			t.Fatalf("%s as JSON: %v", c.tool, err)
		}
		if isError != c.isError {
			t.Errorf("%s: isError %v, want %v (%s)", c.tool, isError, c.isError, raw)
		}
		got := rawSameAsCallTool(t, ctx, s, c.tool, c.args, raw)
		if got.IsError != c.isError || len(got.Content) == 0 {
			t.Errorf("%s: result %s", c.tool, raw)
		}
	}
}

// A tool that requires task-based execution is refused by CallToolJSON as
// by CallTool, with the same message, and the server never sees the call:
// over stdio (the SDK path) and over HTTP (the path that posts itself).
func TestCallToolJSONRefusesTaskRequiredToolLikeCallTool(t *testing.T) {
	// check refuses task_only through both calls, then calls echo.
	check := func(t *testing.T, s *Supervisor) {
		t.Helper()
		ctx := httpCtx(t)
		_, sdkErr := s.CallTool(ctx, "task_only", map[string]any{"text": "x"})
		if sdkErr == nil || !strings.Contains(sdkErr.Error(), "requires task-based execution") {
			t.Fatalf("CallTool of a task-required tool: %v, want a refusal", sdkErr)
		}
		raw, isError, err := s.CallToolJSON(ctx, "task_only", json.RawMessage(`{"text":"x"}`))
		if err == nil || err.Error() != sdkErr.Error() {
			t.Fatalf("CallToolJSON of a task-required tool: %v (result %s, isError %v), want CallTool's %q", err, raw, isError, sdkErr)
		}
		var se *StageError
		if !errors.As(err, &se) || se.Stage != StageToolsCall {
			t.Errorf("refusal %v, want a %s stage error", err, StageToolsCall)
		}
	}
	echo := func(t *testing.T, s *Supervisor) {
		t.Helper()
		raw, isError, err := s.CallToolJSON(httpCtx(t), fixture.ToolEcho, json.RawMessage(`{"text":"still fine"}`))
		if err != nil || isError || RenderText(rawDecode(t, raw)) != "still fine" {
			t.Fatalf("echo after the refusal: %s, %v, %v", raw, isError, err)
		}
	}

	t.Run("stdio", func(t *testing.T) {
		events := eventsPath(t)
		s, _ := startSupervisor(t, stdioPolicy("--task-required-tool=task_only", "--events-file="+events))
		waitFor(t, s, "Ready", isReady)
		check(t, s)
		echo(t, s)
		evs, _ := fixture.ReadEvents(events)
		for _, ev := range evs {
			if ev.Kind == fixture.EventCall && ev.Tool == "task_only" {
				t.Errorf("the refused call reached the server: %s", ev.Line)
			}
		}
	})

	// The fixture marks tools only over stdio; here tools/list is answered
	// with a task_only marked required.
	t.Run("http", func(t *testing.T) {
		up := httpServe(t, httpFixture(t, fixture.Options{}))
		up.setIntercept(func(w http.ResponseWriter, r httpRecord) bool {
			if r.RPCMethod != "tools/list" {
				return false
			}
			w.Header().Set("Content-Type", "application/json")
			_, _ = fmt.Fprintf(w, `{"jsonrpc":"2.0","id":%s,"result":{"tools":[`+
				`{"name":"echo","inputSchema":{"type":"object"}},`+
				`{"name":"task_only","inputSchema":{"type":"object"},"execution":{"taskSupport":"required"}}]}}`+"\n", r.RPCID)
			return true
		})
		s, _ := startSupervisor(t, httpPolicy(up.URL()))
		sn := waitFor(t, s, "Ready", isReady)
		if !hasTool(sn.Tools, "task_only") {
			t.Fatalf("task_only not published: %v", httpRawNames(sn.Tools))
		}
		check(t, s)
		if _, ok := up.lastCall("tools/call"); ok {
			t.Fatal("a refused call reached the server")
		}
		echo(t, s)
	})
}

// A JSON-RPC error sent with a non-200 status (2026-07-28 servers answer
// invalid params with 400) is the server's answer; a 404 on a session is a
// lost session whatever the body; anything else names the status.
func TestCheckCallResponseReadsJSONRPCErrorsOfFailedRequests(t *testing.T) {
	rpcErr := `{"jsonrpc":"2.0","id":"mcpbridge-1","error":{"code":-32602,"message":"unknown tool \"nope\""}}`
	for _, tc := range []struct {
		name      string
		status    int
		session   string
		body      string
		wantCode  int64
		wantIs    error
		wantInErr string
	}{
		{name: "400 with a JSON-RPC error", status: 400, body: rpcErr, wantCode: -32602, wantInErr: `unknown tool "nope"`},
		{name: "404 on a session", status: 404, session: "s1", body: rpcErr, wantIs: mcp.ErrSessionMissing},
		{name: "404 without a session", status: 404, body: rpcErr, wantCode: -32602},
		{name: "503 with text", status: 503, body: "overloaded", wantInErr: "HTTP 503: overloaded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodPost, "http://127.0.0.1/mcp", nil)
			if tc.session != "" {
				req.Header.Set("Mcp-Session-Id", tc.session)
			}
			err := checkCallResponse(&http.Response{StatusCode: tc.status, Request: req, Body: io.NopCloser(strings.NewReader(tc.body))})
			var wire *jsonrpc.Error
			switch {
			case err == nil:
				t.Fatal("no error")
			case tc.wantCode != 0 && (!errors.As(err, &wire) || wire.Code != tc.wantCode):
				t.Fatalf("%v: not a JSON-RPC error with code %d", err, tc.wantCode)
			case tc.wantCode != 0 && !isServerAnswer(err):
				t.Fatalf("%v: not classified as the server's answer", err)
			case tc.wantIs != nil && !errors.Is(err, tc.wantIs):
				t.Fatalf("%v: want %v", err, tc.wantIs)
			case !strings.Contains(err.Error(), tc.wantInErr):
				t.Fatalf("%v: want it to contain %q", err, tc.wantInErr)
			}
		})
	}
}

// Arguments that are not JSON, or nested deeper than the SDK decodes (a
// server's SDK would refuse the whole request), are refused before any
// request is sent.
func TestCallToolJSONRefusesInvalidArgumentsWithoutSending(t *testing.T) {
	up := httpServe(t, httpFixture(t, fixture.Options{}))
	s, _ := startSupervisor(t, httpPolicy(up.URL()))
	waitFor(t, s, "Ready", isReady)
	deep := `{"text":"x","n":` + strings.Repeat("[", jsonspan.MaxDepth) + strings.Repeat("]", jsonspan.MaxDepth) + `}`
	for _, args := range []string{`{"text":`, deep} {
		before := len(up.requests())
		_, _, err := s.CallToolJSON(httpCtx(t), "echo", json.RawMessage(args))
		if err == nil || !strings.Contains(err.Error(), "not valid JSON nested at most 1000 deep") {
			t.Fatalf("%.40s: error %v, want one about invalid JSON", args, err)
		}
		if n := len(up.requests()) - before; n != 0 {
			t.Fatalf("%.40s: %d requests sent for invalid arguments", args, n)
		}
	}
}

// On 2026-07-28 the health probe is a tools/list the supervisor posts
// itself (our string ids, the per-request headers), so that the SDK's
// per-session list cache does not keep a second copy of every tool list;
// the server still sees every probe.
func TestHTTPSessionlessHealthProbeIsOurOwnToolsList(t *testing.T) {
	up := httpServe(t, httpFixture(t, fixture.Options{Stateless: true}))
	p := httpPolicy(up.URL())
	p.HealthCheckInterval = 100 * time.Millisecond
	s, _ := startSupervisor(t, p)
	waitFor(t, s, "Ready", isReady)
	probes := func() (n int) {
		for _, r := range up.requests() {
			if r.RPCMethod == "tools/list" && strings.HasPrefix(string(r.RPCID), `"mcpbridge-`) {
				if r.Header.Get("Mcp-Method") != "tools/list" || r.Header.Get("Mcp-Protocol-Version") != httpStatelessVersion {
					t.Fatalf("probe headers %v", r.Header)
				}
				n++
			}
		}
		return n
	}
	httpPoll(t, "three health probes", func() bool { return probes() >= 3 })
	if sn := s.Snapshot(); sn.Phase != v1alpha1.PhaseReady || sn.Generation != 1 {
		t.Fatalf("the probes were not accepted as proof of life: %+v", sn)
	}
}

// A stream the server ends without the answer fails that call only, as with
// the SDK: the session stays and the generation is not lost.
func TestCallToolJSONStreamEndingWithoutAnswerFailsOnlyTheCall(t *testing.T) {
	up := httpServe(t, httpFixture(t, fixture.Options{}))
	s, _ := startSupervisor(t, httpPolicy(up.URL()))
	waitFor(t, s, "Ready", isReady)
	g := rawLive(t, s)
	up.setIntercept(func(w http.ResponseWriter, r httpRecord) bool {
		if r.RPCMethod != "tools/call" || !bytes.HasPrefix(r.RPCID, []byte(`"`+rawIDPrefix)) {
			return false
		}
		w.Header().Set("Content-Type", "text/event-stream")
		_, _ = io.WriteString(w, ": nothing for you\n\n")
		return true
	})
	_, _, err := s.CallToolJSON(httpCtx(t), fixture.ToolEcho, json.RawMessage(`{"text":"x"}`))
	if !errors.Is(err, errStreamEnded) {
		t.Fatalf("error %v, want the stream ended before the answer", err)
	}
	select {
	case <-g.lost:
		t.Fatalf("the generation was marked lost: %v", g.lostErr)
	default:
	}
	up.setIntercept(nil)
	if _, _, err := s.CallToolJSON(httpCtx(t), fixture.ToolEcho, json.RawMessage(`{"text":"x"}`)); err != nil {
		t.Fatalf("the next call: %v", err)
	}
	if sn := s.Snapshot(); sn.Generation != 1 {
		t.Fatalf("generation %d, want 1", sn.Generation)
	}
}

// A server may end an answer's stream after an event with an id (SEP-1699);
// the supervisor resumes it with a GET carrying Last-Event-ID, as the SDK
// does, and gets the answer from there.
func TestCallToolJSONResumesAStreamFromItsLastEventID(t *testing.T) {
	up := httpServe(t, httpFixture(t, fixture.Options{}))
	s, _ := startSupervisor(t, httpPolicy(up.URL()))
	waitFor(t, s, "Ready", isReady)
	var resumedFrom atomic.Value
	var callID atomic.Value
	up.setIntercept(func(w http.ResponseWriter, r httpRecord) bool {
		switch {
		case r.Method == http.MethodPost && r.RPCMethod == "tools/call" && bytes.HasPrefix(r.RPCID, []byte(`"`+rawIDPrefix)):
			callID.Store(string(r.RPCID))
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "id: ev-1\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/progress\",\"params\":{\"progressToken\":1,\"progress\":1}}\n\n")
			return true
		case r.Method == http.MethodGet && r.Header.Get("Last-Event-ID") != "":
			resumedFrom.Store(r.Header.Get("Last-Event-ID"))
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = fmt.Fprintf(w, "id: ev-2\nevent: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":%s,\"result\":{\"content\":[{\"type\":\"text\",\"text\":\"resumed\"}]}}\n\n", callID.Load())
			return true
		}
		return false
	})
	raw, _, err := s.CallToolJSON(httpCtx(t), fixture.ToolEcho, json.RawMessage(`{"text":"x"}`))
	if err != nil {
		t.Fatalf("call: %v", err)
	}
	if got := rawDecode(t, raw); len(got.Content) != 1 || got.Content[0].(*mcp.TextContent).Text != "resumed" {
		t.Fatalf("result %s", raw)
	}
	if from, _ := resumedFrom.Load().(string); from != "ev-1" {
		t.Fatalf("resumed from %q, want ev-1", from)
	}
}

// A forwarded call's answer is not read by the taskSupport sniffer: it would
// hold the result a second time, and an answer is no tool list. A result
// shaped like one, marking echo task-required, leaves echo callable.
func TestARawCallsAnswerIsNotReadForTaskSupport(t *testing.T) {
	up := httpServe(t, httpFixture(t, fixture.Options{}))
	s, _ := startSupervisor(t, httpPolicy(up.URL()))
	waitFor(t, s, "Ready", isReady)
	ctx := httpCtx(t)
	for _, sse := range []bool{false, true} {
		up.setIntercept(func(w http.ResponseWriter, r httpRecord) bool {
			if r.RPCMethod != "tools/call" || !bytes.HasPrefix(r.RPCID, []byte(`"`+rawIDPrefix)) {
				return false
			}
			answer := `{"jsonrpc":"2.0","id":` + string(r.RPCID) + `,"result":{"content":[{"type":"text","text":"x"}],` +
				`"tools":[{"name":"` + fixture.ToolEcho + `","execution":{"taskSupport":"required"}}]}}`
			if !sse {
				w.Header().Set("Content-Type", "application/json")
				_, _ = io.WriteString(w, answer)
				return true
			}
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = io.WriteString(w, "event: message\ndata: "+answer+"\n\n")
			return true
		})
		_, _, err := s.CallToolJSON(ctx, fixture.ToolEcho, json.RawMessage(`{"text":"x"}`))
		up.setIntercept(nil)
		if err != nil {
			t.Fatalf("sse=%v: %v", sse, err)
		}
		if s.tasks.required(fixture.ToolEcho) {
			t.Fatalf("sse=%v: a call's answer marked echo task-required", sse)
		}
	}
}

func TestAnAnswersEndAtHandIsReadWithoutAGoroutine(t *testing.T) {
	const (
		sseHead  = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
		event    = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"id\":\"1\",\"result\":{}}\n\n"
		note     = "event: message\ndata: {\"jsonrpc\":\"2.0\",\"method\":\"notifications/message\",\"params\":{}}\n\n"
		chunkEnd = "0\r\n\r\n"
	)
	chunk := func(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }
	json := `{"jsonrpc":"2.0","id":"1","result":{}}`
	for _, tc := range []struct {
		name string
		// answer is sent at once; before once the answer was read, and it
		// has arrived when drain starts; later once drain returned.
		answer, before, later string
		// A link that is closing starts no goroutine: drain must do
		// without one, or close the connection unread.
		closing        bool
		releasedAtOnce bool
		pooled         bool
	}{
		// Read whole already: released before drain returns, where a
		// goroutine started for it would barely have been scheduled.
		{name: "JSON of known length", releasedAtOnce: true, pooled: true,
			answer: fmt.Sprintf("HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(json), json)},
		{name: "SSE whose end came with its event", closing: true, releasedAtOnce: true, pooled: true,
			answer: sseHead + chunk(event) + chunkEnd},
		{name: "SSE whose end came after its event was read", closing: true, releasedAtOnce: true, pooled: true,
			answer: sseHead + chunk(event), before: chunkEnd},
		{name: "SSE whose end comes later", pooled: true,
			answer: sseHead + chunk(event), later: chunkEnd},
		// What has arrived is read, and the rest is waited for in the
		// background, not on the call.
		{name: "SSE with a notification after its answer, the end later", pooled: true,
			answer: sseHead + chunk(event), before: chunk(note), later: chunkEnd},
		{name: "SSE whose end stops halfway", closing: true, releasedAtOnce: true, pooled: false,
			answer: sseHead + chunk(event), before: "0\r"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			addr, next := newStagedServer(t, tc.answer, tc.before, tc.later)
			pt := newTestPosts(t)
			req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/mcp", strings.NewReader(`{}`))
			if err != nil {
				t.Fatal(err)
			}
			resp, err := pt.RoundTrip(req)
			if err != nil {
				t.Fatal(err)
			}
			if res, _, err := readAnswerFrom(context.Background(), resp, "1", nil, otherEvents{}); err != nil || string(res) != "{}" {
				t.Fatalf("the answer: %s, %v", res, err)
			}
			next()
			if tc.before != "" {
				httpPoll(t, "the bytes after the answer to arrive", func() bool { return arrived(inlineOf(resp.Body).pc.conn) })
			}
			l := &httpLink{closing: tc.closing}
			var released atomic.Bool
			wait := l.drain(resp.Body, func() { released.Store(true) })
			if released.Load() != tc.releasedAtOnce {
				t.Fatalf("released when drain returned: %v, want %v", released.Load(), tc.releasedAtOnce)
			}
			next()
			wait()
			l.notes.Wait()
			if !released.Load() {
				t.Fatal("not released once drained")
			}
			want := 0
			if tc.pooled {
				want = 1
			}
			if got := len(pooled(pt)); got != want {
				t.Fatalf("%d connections pooled, want pooled %v", got, tc.pooled)
			}
		})
	}
}

// newStagedServer answers every connection's first request with answer,
// then sends each of stages when next is called, and keeps the connection
// open until the client closes it; it returns its address.
func newStagedServer(t *testing.T, answer string, stages ...string) (addr string, next func()) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	steps := make(chan struct{}, len(stages))
	t.Cleanup(func() { close(steps) })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				_, _ = http.ReadRequest(bufio.NewReader(c))
				_, _ = io.WriteString(c, answer)
				for _, stage := range stages {
					<-steps
					_, _ = io.WriteString(c, stage)
				}
				_, _ = io.Copy(io.Discard, c) // until the client closes it
			}()
		}
	}()
	return ln.Addr().String(), func() { steps <- struct{}{} }
}
