package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/internal/bridge"
)

// serverImpl is how the gateway introduces itself to agents.
var serverImpl = &mcp.Implementation{Name: "mcp-bridge-gateway", Version: "v1alpha1"}

// endpoint is one namespace's MCP server, kept equal to the registry's view
// of that namespace.
type endpoint struct {
	ns       string
	registry *bridge.Registry
	log      logr.Logger
	server   *mcp.Server
	// 2025-11-25 clients keep a session; 2026-07-28 clients are sessionless
	// and get list_changed through subscriptions/listen.
	sessions, sessionless http.Handler

	mu        sync.Mutex
	published map[string]*mcp.Tool // public name -> the upstream entry served
	plain     map[string]bool      // served tools without x-mcp-header parameters

	inflight inflight
	activity activity
}

func newEndpoint(ns string, registry *bridge.Registry, log logr.Logger) *endpoint {
	e := &endpoint{ns: ns, registry: registry, log: log.WithValues("namespace", ns), published: map[string]*mcp.Tool{}, plain: map[string]bool{}}
	e.server = mcp.NewServer(serverImpl, &mcp.ServerOptions{
		// Advertise list_changed even while the namespace has no tools.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
	})
	e.server.AddReceivingMiddleware(observe)
	get := func(*http.Request) *mcp.Server { return e.server }
	// Auth and Origin are checked before a request gets here.
	e.sessions = mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{
		DisableLocalhostProtection: true, // idle sessions: see sessions.go
	})
	e.sessionless = mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{
		Stateless: true, DisableLocalhostProtection: true, PropagateRequestCancellation: true,
	})
	e.sync()
	return e
}

// ServeHTTP routes by protocol version: the SDK's stateful handler would
// hold a 2026-07-28 client to the older protocol.
func (e *endpoint) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// As for the SDK's timer, only POSTs are activity: an agent's open GET
	// stream does not keep its session forever.
	if sid := r.Header.Get("Mcp-Session-Id"); sid != "" && r.Method == http.MethodPost {
		e.activity.begin(sid)
		defer func() { e.activity.end(sid, time.Now()) }()
	}
	if r.Method == http.MethodPost && e.serveFast(w, r) {
		return
	}
	if r.Header.Get("Mcp-Protocol-Version") >= bridge.SessionlessProtocol {
		e.sessionless.ServeHTTP(w, r)
		return
	}
	e.sessions.ServeHTTP(w, r)
}

// sync makes the served tools equal to the registry's. The SDK sends
// notifications/tools/list_changed for every change, debounced.
func (e *endpoint) sync() {
	e.mu.Lock()
	defer e.mu.Unlock()
	tools := e.registry.Tools(e.ns)
	want := make(map[string]bool, len(tools))
	for _, t := range tools {
		want[t.Name] = true
		if e.published[t.Name] == t.Upstream {
			continue // unchanged entry: the registry keeps it on an equal swap
		}
		if err := e.add(t); err != nil {
			e.log.Error(err, "tool not served", "tool", t.Name)
			continue
		}
		e.published[t.Name] = t.Upstream
		e.plain[t.Name] = !hasParamHeaders(t.Upstream)
	}
	var gone []string
	for name := range e.published {
		if !want[name] {
			gone = append(gone, name)
			delete(e.published, name)
			delete(e.plain, name)
		}
	}
	if len(gone) > 0 {
		e.server.RemoveTools(gone...)
	}
}

// add serves one tool under its public name; the SDK panics on a schema it
// cannot serve, which must not take the manager down.
func (e *endpoint) add(t bridge.Tool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the SDK refused the tool: %v", r)
		}
	}()
	served := *t.Upstream
	served.Name = t.Name
	e.server.AddTool(&served, e.call(t.Name))
	return nil
}

// call forwards a tools/call to the supervisor that owns the tool now: the
// lookup happens per call, so a reconnect or a hot swap is followed.
func (e *endpoint) call(public string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		tool, caller, ok := e.registry.Lookup(e.ns, public)
		if !ok {
			return errorResult(fmt.Sprintf("tool %q is no longer published", public)), nil
		}
		var args any
		if len(req.Params.Arguments) > 0 {
			args = req.Params.Arguments
		}
		res, err := caller.CallTool(ctx, tool.RawName, args)
		if err != nil {
			return errorResult(err.Error()), nil
		}
		return res, nil
	}
}

func errorResult(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}

// hasParamHeaders: the tool's input schema binds a parameter to an HTTP
// header (x-mcp-header), or cannot be read to tell.
func hasParamHeaders(t *mcp.Tool) bool {
	b, err := json.Marshal(t.InputSchema)
	return err != nil || bytes.Contains(b, []byte(`"x-mcp-header"`))
}
