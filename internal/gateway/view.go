package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"golang.org/x/sync/errgroup"

	"github.com/mcpbridge/operator/internal/kubeauth"
	"github.com/mcpbridge/operator/internal/registry"
)

// A view is one caller identity's MCP server in a namespace: an SDK server
// for the sessions of that identity, serving exactly the tools of the
// McpServers it may use. It holds no entry per tool: it lists from the
// registry's snapshot it last refreshed to (toollist.go) and calls through
// the registry, so that a view costs the same in a namespace of 40,000
// tools as in one of 4, and an identity more costs a view, not its tools
// again (docs/design.md, "The gateway"). Only tools that bind a parameter
// to a header are added to the SDK, which checks those headers. A change
// of what the identity may see is announced to its sessions as
// notifications/tools/list_changed (announce), and a change it cannot see
// reaches none of them. A session belongs to the view that created it, so
// another identity's request cannot use it even with its id.
type view struct {
	e      *endpoint
	server *mcp.Server
	// 2025-11-25 clients keep a session; 2026-07-28 clients are sessionless
	// and get list_changed through subscriptions/listen.
	sessions, sessionless http.Handler

	// caller is the identity's user as its latest request authenticated
	// it, for refreshes that no request carries; nil without
	// authentication.
	caller atomic.Pointer[kubeauth.User]

	// syncMu orders refreshes, so that an older registry snapshot never
	// overwrites a newer one.
	syncMu sync.Mutex
	synced atomic.Bool
	// mu guards what the last refresh served, which it replaces at once:
	// the registry's snapshot of the namespace, the servers the identity
	// may use (nil: all of them), and the tools that bind a parameter to a
	// header, which the SDK holds, by public name. Lists read them; a
	// refresh that finds the first two as they were has nothing to do
	// (every page of a tools/list refreshes).
	mu      sync.Mutex
	tools   []registry.Tool
	allowed map[string]bool
	headed  map[string]headedTool

	// busy counts the requests being served and lastUsed is when the last
	// one began; the endpoint's lock guards both.
	busy     int
	lastUsed time.Time

	inflight inflight
	activity activity
	refusals refusalFold // audit lines of refused calls (audit.go)
	// budgetRefused counts the identity's requests refused by a budget, so
	// that serve knows whether the request it served was (pacing.go).
	budgetRefused atomic.Int64

	// calls in flight of this identity; opening counts the requests that
	// may be opening a session now (budgets.go).
	calls      atomic.Int64
	opening    sync.Mutex
	openingNow int

	// identity is the SHA-256 of the identity's key (endpoint.hold), as
	// sealed in its session ids; mint hands the SDK the id of each session
	// opened, and takingUp takes up one session id at a time; replaying
	// holds the ids whose handshake is being replayed (restore.go).
	identity  []byte
	mint      mint
	takingUp  sync.Mutex
	replaying sync.Map
}

func newView(e *endpoint, u *kubeauth.User) *view {
	v := &view{e: e, identity: identityHash(identity(u))}
	v.caller.Store(u)
	v.server = mcp.NewServer(serverImpl, &mcp.ServerOptions{
		// Advertise list_changed even while the view has no tools.
		Capabilities: &mcp.ServerCapabilities{Tools: &mcp.ToolCapabilities{ListChanged: true}},
		GetSessionID: v.mint.take, // sealed ids: restore.go
	})
	v.server.AddReceivingMiddleware(v.receive)
	get := func(*http.Request) *mcp.Server { return v.server }
	// Auth and Origin are checked before a request gets here.
	v.sessions = mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{
		DisableLocalhostProtection: true, // idle sessions: see sessions.go
	})
	v.sessionless = mcp.NewStreamableHTTPHandler(get, &mcp.StreamableHTTPOptions{
		Stateless: true, DisableLocalhostProtection: true, PropagateRequestCancellation: true,
	})
	return v
}

// ServeHTTP routes by protocol version: the SDK's stateful handler would
// hold a 2026-07-28 client to the older protocol. A 2025-11-25 session id
// this process does not know is taken up first when it opens (restore.go).
func (v *view) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	sid := r.Header.Get("Mcp-Session-Id")
	stateful := r.Header.Get("Mcp-Protocol-Version") < registry.SessionlessProtocol
	// As for the SDK's timer, only POSTs are activity: an agent's open GET
	// stream does not keep its session forever.
	if sid != "" && r.Method == http.MethodPost {
		v.activity.begin(sid)
		defer func() { v.activity.end(sid, time.Now()) }()
	}
	if sid != "" && stateful && !v.takeUp(w, r, sid) {
		return
	}
	if r.Method == http.MethodPost {
		held, ok := v.holdRequest(w, r)
		if !ok {
			return
		}
		defer held.close()
		switch v.serveFast(w, r, held) {
		case answered:
			return
		case toSDKDecoding:
			defer v.e.bodies.done()
		}
	}
	forSDK(r)
	if !stateful {
		v.sessionless.ServeHTTP(w, r)
		return
	}
	if opensSession(r) {
		release, ok := v.admitSession(w, r)
		if !ok {
			return
		}
		// The place is given back as soon as the SDK starts its answer: it
		// has registered the session by then, so Sessions() counts it, and
		// an agent with its answer may open the next one while the handler
		// is still finishing.
		aw := &answerWriter{ResponseWriter: w, onAnswer: release}
		defer aw.finish()
		v.serveOpening(aw, r)
		return
	}
	if r.Method == http.MethodDelete && sid != "" && v.hasSession(sid) {
		// Not to be taken up again, here or (told) on another replica:
		// see docs/design.md, "Sessions on every replica".
		v.e.sealer.end(true, sid)
	}
	v.sessions.ServeHTTP(w, r)
}

// ensureSynced fills a new view before its first request is served.
func (v *view) ensureSynced(ctx context.Context) error {
	if v.synced.Load() {
		return nil
	}
	v.syncMu.Lock()
	defer v.syncMu.Unlock()
	if v.synced.Load() {
		return nil
	}
	return v.refreshLocked(ctx)
}

// refresh makes the served tools the registry's tools of the servers the
// identity may use now, and announces a change the identity can see.
func (v *view) refresh(ctx context.Context) error {
	v.syncMu.Lock()
	defer v.syncMu.Unlock()
	return v.refreshLocked(ctx)
}

func (v *view) refreshLocked(ctx context.Context) error {
	tools := v.e.registry.Tools(v.e.ns)
	allowed, err := v.allowedServers(ctx, tools)
	if err != nil {
		return err
	}
	v.mu.Lock()
	prevTools, prevAllowed := v.tools, v.allowed
	v.mu.Unlock()
	synced := v.synced.Load()
	if synced && allowed == nil && prevAllowed == nil && sameSnapshot(tools, prevTools) {
		return nil
	}
	headed := v.syncHeaded(v.headed, tools, allowed) // only refreshes write v.headed, under syncMu
	v.mu.Lock()
	v.tools, v.allowed, v.headed = tools, allowed, headed
	v.mu.Unlock()
	v.synced.Store(true)
	if synced && !sameVisible(prevTools, prevAllowed, tools, allowed) {
		v.announce()
	}
	return nil
}

// headedTool is a tool that binds a parameter to a header as the view last
// gave it to the SDK; served is false if the SDK refused it, which is then
// neither listed nor called, nor given again until it changes.
type headedTool struct {
	tool   registry.Tool
	served bool
}

// syncHeaded returns the SDK's entries for tools and the servers allowed:
// the visible tools that bind a parameter to a header, added with their
// schemas so that the SDK checks the headers of their calls (it announces
// its own changes). cur, which lists read, is left as it is.
func (v *view) syncHeaded(cur map[string]headedTool, tools []registry.Tool, allowed map[string]bool) map[string]headedTool {
	next := make(map[string]headedTool, len(cur))
	for _, t := range tools {
		if !t.ParamHeaders || !visible(t, allowed) {
			continue
		}
		if h, ok := cur[t.Name]; ok && h.tool.SameEntry(t) {
			next[t.Name] = h
			continue
		}
		err := v.addHeaded(t)
		if err != nil {
			v.e.log.Error(err, "tool not served", "tool", t.Name)
			if cur[t.Name].served {
				v.server.RemoveTools(t.Name) // its previous definition must not stay callable
			}
		}
		next[t.Name] = headedTool{tool: t, served: err == nil}
	}
	var gone []string
	for name, h := range cur {
		if _, ok := next[name]; !ok && h.served {
			gone = append(gone, name)
		}
	}
	if len(gone) > 0 {
		v.server.RemoveTools(gone...)
	}
	return next
}

// sameSnapshot says whether a and b are the same snapshot of the
// registry: it makes a new slice for every change.
func sameSnapshot(a, b []registry.Tool) bool {
	return len(a) == len(b) && (len(a) == 0 || &a[0] == &b[0])
}

// visible: t is served to an identity that may use the servers allowed
// (nil: all of them).
func visible(t registry.Tool, allowed map[string]bool) bool {
	return t.ObjectInput && (allowed == nil || allowed[serverOf(t)])
}

// sameVisible says whether an identity sees the same tools in snapshot a
// with servers aAllowed as in b with bAllowed. Both are sorted by name.
func sameVisible(a []registry.Tool, aAllowed map[string]bool, b []registry.Tool, bAllowed map[string]bool) bool {
	i, j := 0, 0
	for {
		for i < len(a) && !visible(a[i], aAllowed) {
			i++
		}
		for j < len(b) && !visible(b[j], bAllowed) {
			j++
		}
		if i == len(a) || j == len(b) {
			return i == len(a) && j == len(b)
		}
		if !a[i].SameEntry(b[j]) {
			return false
		}
		i, j = i+1, j+1
	}
}

// maxConcurrentReviews bounds the per-server reviews one refresh asks at
// once.
const maxConcurrentReviews = 8

// allowedServers is nil when the identity may use the whole namespace, else
// which of the servers that own tools it may use.
func (v *view) allowedServers(ctx context.Context, tools []registry.Tool) (map[string]bool, error) {
	g, err := v.e.access.current(ctx, v.caller.Load(), v.e.ns)
	if err != nil || g.all {
		return nil, err
	}
	allowed := map[string]bool{}
	var servers []string // every owner once, to range over while the map is written
	for _, t := range tools {
		if s := serverOf(t); len(servers) == 0 || servers[len(servers)-1] != s {
			if _, seen := allowed[s]; !seen {
				allowed[s] = false
				servers = append(servers, s)
			}
		}
	}
	var mu sync.Mutex
	eg, ctx := errgroup.WithContext(ctx)
	eg.SetLimit(maxConcurrentReviews)
	for _, server := range servers {
		eg.Go(func() error {
			ok, err := v.e.access.mayUse(ctx, g, v.e.ns, server)
			mu.Lock()
			allowed[server] = ok
			mu.Unlock()
			return err
		})
	}
	return allowed, eg.Wait()
}

// serverOf is the name of the McpServer that publishes t (its owner is
// "namespace/name").
func serverOf(t registry.Tool) string {
	_, name, _ := strings.Cut(t.Owner, "/")
	return name
}

// errNoUpstream: the registry could not decode a tool's set again, which
// its publisher rules out (registry.Registry.SwapEncoded).
var errNoUpstream = errors.New("the registry holds no definition of the tool")

// addHeaded adds t to the SDK with its schemas, under its public name; the
// SDK panics on a schema it cannot serve, which must not take the manager
// down.
func (v *view) addHeaded(t registry.Tool) (err error) {
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("the SDK refused the tool: %v", r)
		}
	}()
	up := t.Upstream()
	if up == nil {
		return errNoUpstream
	}
	served := *up
	served.Name = t.Name
	v.server.AddTool(&served, v.call(t.Name))
	return nil
}

// call forwards a tools/call to the supervisor that owns the tool now: the
// lookup happens per call, so a reconnect or a hot swap is followed.
func (v *view) call(public string) mcp.ToolHandler {
	return func(ctx context.Context, req *mcp.CallToolRequest) (*mcp.CallToolResult, error) {
		tool, caller, ok := v.e.registry.Lookup(v.e.ns, public)
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
		if !countResult(ctx, res) {
			return nil, registry.ErrResultBudget // sdkCall answers with the budget's error
		}
		return res, nil
	}
}

// countResult takes res's size as JSON (what the SDK will write) from the
// call's share of the namespace's result bytes, if ctx carries one, and
// reports false when that would pass the budget. The upstream's session
// has read and decoded the result already; what the budget prevents is
// that the gateway goes on to hold and write it, as callToolAsJSON does for
// stdio results on the fast path. See docs/design.md, "Budgets".
func countResult(ctx context.Context, res *mcp.CallToolResult) bool {
	rb := registry.ResultBytesFrom(ctx)
	if rb == nil {
		return true
	}
	b, err := json.Marshal(res)
	if err != nil {
		return true // the SDK fails to encode it too, and says so
	}
	return rb.Take(int64(len(b)))
}

// receive is the view's receiving middleware: it refreshes the view before
// a tools/list (so that a changed permission shows within the cache's
// bounds), refuses a tools/call of a server the identity may no longer use
// exactly as the SDK refuses an unknown tool, and counts, times and audits.
func (v *view) receive(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (res mcp.Result, err error) {
		start := time.Now()
		if method == "tools/call" {
			return v.receiveCall(ctx, next, req, start)
		}
		ctx, span := v.startSDKMethod(ctx, method, "", req)
		if span.IsRecording() {
			defer func() { endMethod(span, sdkVersion(req), registry.Tool{}, outcomeOf(res, err), err) }()
		}
		if lr, ok := req.(*mcp.ListToolsRequest); ok && method == "tools/list" {
			res, err = v.listTools(ctx, next, lr)
		} else {
			res, err = next(ctx, method, req)
		}
		requests.WithLabelValues(method, outcomeOf(res, err)).Inc()
		return res, err
	}
}

func (v *view) receiveCall(ctx context.Context, next mcp.MethodHandler, req mcp.Request, start time.Time) (mcp.Result, error) {
	name := ""
	if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
		name = p.Name
	}
	ctx, span := v.startSDKMethod(ctx, "tools/call", name, req)
	tool, _, known := v.e.registry.Lookup(v.e.ns, name)
	var res mcp.Result
	var err error
	outcome := ""
	switch {
	case !known:
		res, err = next(ctx, "tools/call", req) // the SDK answers as it does
		outcome = outcomeOf(res, err)
		if err != nil {
			outcome = "unknown_tool"
		}
	default:
		g, gerr := v.e.access.current(ctx, v.caller.Load(), v.e.ns)
		allowed := gerr == nil
		if allowed {
			allowed, gerr = v.e.access.mayUse(ctx, g, v.e.ns, serverOf(tool))
		}
		switch {
		case gerr != nil:
			v.e.log.Error(gerr, "gateway authorization failed")
			err, outcome = &jsonrpc.Error{Code: jsonrpc.CodeInternalError, Message: "authorization is unavailable"}, "error"
		case !allowed:
			err, outcome = unknownTool(name), "denied"
		case !tool.ObjectInput:
			err, outcome = unknownTool(name), "unknown_tool" // not served: see registry.ObjectInput
		case tool.ParamHeaders:
			res, outcome, err = v.sdkCall(ctx, next, req) // the SDK's entry, which checked the headers
		default:
			res, outcome, err = v.sdkCall(ctx, v.callTool, req)
		}
	}
	d := time.Since(start)
	countCall(outcome, d)
	v.audit(name, tool, outcome, d)
	if span.IsRecording() {
		endMethod(span, sdkVersion(req), tool, outcome, err)
	}
	return res, err
}

// sdkCall serves a tools/call through the SDK within the identity's and
// the namespace's budgets: its calls in flight, and its bytes held as on the
// fast path (twice the arguments; the result, which the tool handler counts
// once the upstream's session has decoded it, see countResult). The bytes
// are given back when the SDK takes the result to write it.
func (v *view) sdkCall(ctx context.Context, next mcp.MethodHandler, req mcp.Request) (mcp.Result, string, error) {
	release, refusal := v.admitCall()
	if refusal != nil {
		return nil, "refused", refusal
	}
	defer release()
	held := &lease{pool: &v.e.results}
	defer held.close()
	var args int64
	if p, ok := req.GetParams().(*mcp.CallToolParamsRaw); ok {
		args = int64(len(p.Arguments))
	}
	if !held.Take(2 * args) {
		return nil, "refused", v.refuseResultBytes()
	}
	res, err := next(registry.WithResultBytes(ctx, held), "tools/call", req)
	if errors.Is(err, registry.ErrResultBudget) {
		return nil, "refused", v.refuseResultBytes()
	}
	return res, outcomeOf(res, err), err
}

// callTool is what the SDK does with a tools/call of a tool it holds, for
// the tools the view does not add to it: the tool handler's result, its
// content never null.
func (v *view) callTool(ctx context.Context, _ string, req mcp.Request) (mcp.Result, error) {
	cr, ok := req.(*mcp.CallToolRequest)
	if !ok || cr.Params == nil {
		return nil, errInvalidParams
	}
	res, err := v.call(cr.Params.Name)(ctx, cr)
	if err != nil {
		return nil, err
	}
	if res.Content == nil {
		r := *res
		r.Content = []mcp.Content{} // as the SDK writes it: never "null"
		res = &r
	}
	return res, nil
}

// unknownTool is the SDK's answer to a tools/call of a tool its server does
// not have, word for word: a tool of a server the caller may not use must
// not look any different.
func unknownTool(name string) error {
	return &jsonrpc.Error{Code: jsonrpc.CodeInvalidParams, Message: fmt.Sprintf("unknown tool %q", name)}
}

func outcomeOf(res mcp.Result, err error) string {
	switch r, _ := res.(*mcp.CallToolResult); {
	case err != nil:
		return "error"
	case r != nil && r.IsError:
		return "tool_error"
	}
	return "success"
}

// hasSession: sid is a live session of this view.
func (v *view) hasSession(sid string) bool {
	for ss := range v.server.Sessions() {
		if ss.ID() == sid {
			return true
		}
	}
	return false
}

func errorResult(msg string) *mcp.CallToolResult {
	return &mcp.CallToolResult{IsError: true, Content: []mcp.Content{&mcp.TextContent{Text: msg}}}
}
