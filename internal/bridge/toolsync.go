package bridge

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	segjson "github.com/segmentio/encoding/json"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/jsonspan"
	"github.com/mcpbridge/operator/internal/policy"
	"github.com/mcpbridge/operator/internal/registry"
)

// Limits on what a server may list, so that a hostile server cannot make
// the manager hold unbounded data: a fetch that passes one is rejected like
// any other failed fetch. See docs/design.md, "Tool sync".
const (
	maxTools = 50_000
	maxPages = 10_000
	// maxToolBytes bounds the tools of one fetch, all pages together, as
	// JSON (each tool as the manager holds it, schemas included).
	maxToolBytes = 16 << 20
	// maxOneToolBytes bounds one tool as JSON: the registry, and the SDK's
	// server in every gateway view, decode a tool's schemas into maps
	// while publishing it, at about fifteen times its JSON.
	maxOneToolBytes = 1 << 20
)

// syncTools is the two-phase sync: fetch every page under ctx's
// deadline into a complete set, then swap it into the registry in one step.
// A failed fetch changes nothing and says the stage (the page) it failed
// in; a refused swap keeps the previous set.
// See docs/design.md, "Tool sync".
func (s *Supervisor) syncTools(ctx context.Context, g *generation) (stage string, err error) {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	ctx, span := s.startSync(ctx, g)
	var tools []*mcp.Tool
	defer func() { s.endSync(span, len(tools), stage, err) }()
	start := time.Now()
	tools, page, err := s.fetchTools(ctx, g)
	s.observer.ToolSync(err == nil, time.Since(start))
	if err != nil {
		return StageToolsList(page), err
	}
	g.fetched = tools // kept for a retried swap, its schemas as JSON (fetchPages)
	if s.publish(g, tools) {
		// All of it is published: the registry's copies are the fetch, and
		// the generation keeps those rather than a second set of its own
		// (docs/design.md, "Replicas and ownership": memory).
		g.fetched = s.ownedUpstream()
	}
	return "", nil
}

// ownedUpstream is the server's tools as this registry publishes them.
func (s *Supervisor) ownedUpstream() []*mcp.Tool {
	owned := s.registry.Owned(s.ns, s.owner)
	upstream := make([]*mcp.Tool, len(owned))
	for i, t := range owned {
		upstream[i] = t.Upstream()
	}
	return upstream
}

// fetchTools lists every page of g's server. Over Streamable HTTP it posts
// the requests itself (listPage), unless a tool binds a parameter to a
// header: the SDK's CallTool finds those bindings only in what its own
// ListTools listed (and checked), so such a server is listed again through
// the SDK. See docs/design.md, "Tool sync".
func (s *Supervisor) fetchTools(ctx context.Context, g *generation) (tools []*mcp.Tool, page int, err error) {
	if hl, ok := g.link.(*httpLink); ok {
		tools, page, err = fetchPages(ctx, func(ctx context.Context, cursor string) (*mcp.ListToolsResult, error) {
			return s.decodedPage(ctx, g, hl, cursor)
		})
		if !errors.Is(err, errBindsHeaders) {
			return tools, page, err
		}
	}
	return fetchPages(ctx, func(ctx context.Context, cursor string) (*mcp.ListToolsResult, error) {
		return g.sess.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
	})
}

// errBindsHeaders: a listed tool binds a parameter to a header.
var errBindsHeaders = errors.New("a tool binds a parameter to a header")

// decodedPage is listPage decoded as the SDK's ListTools would, null tools
// left out as it leaves them out, and read for the tools that require tasks
// (which the SDK's decoding drops). The page counts in the namespace's
// budget of bytes being read until it is decoded.
func (s *Supervisor) decodedPage(ctx context.Context, g *generation, hl *httpLink, cursor string) (res *mcp.ListToolsResult, err error) {
	err = hl.counted(ctx, func(ctx context.Context) error {
		raw, err := g.listPage(ctx, hl, cursor)
		if err != nil {
			return err
		}
		s.tasks.sniffList(raw)
		res, err = decodeToolsPage(raw)
		return err
	})
	if err != nil {
		return nil, err
	}
	res.Tools = slices.DeleteFunc(res.Tools, func(t *mcp.Tool) bool { return t == nil })
	if slices.ContainsFunc(res.Tools, registry.BindsParamHeaders) {
		return nil, errBindsHeaders
	}
	return res, nil
}

// rawToolsPage is a tools/list result whose tools keep their schemas as
// the JSON they came in (registry.ToolJSON).
type rawToolsPage struct {
	Tools      []*registry.ToolJSON `json:"tools"`
	NextCursor string               `json:"nextCursor,omitempty"`
}

// decodeToolsPage decodes a tools/list result as the SDK's client decodes
// one: member names matched case-sensitively, nested at most jsonspan.MaxDepth
// deep (a deeper schema is one the gateway's SDK server could not serve).
func decodeToolsPage(raw []byte) (*mcp.ListToolsResult, error) {
	if jsonspan.NestedDeeperThan(raw, jsonspan.MaxDepth) {
		return nil, fmt.Errorf("the tools/list result is nested deeper than %d levels", jsonspan.MaxDepth)
	}
	page := new(rawToolsPage)
	rest, err := segjson.Parse(raw, page, segjson.DontMatchCaseInsensitiveStructFields)
	if err == nil && len(rest) > 0 {
		err = errors.New("data after the result")
	}
	if err != nil {
		return nil, fmt.Errorf("the tools/list result cannot be decoded: %v", err)
	}
	tools, err := registry.DecodedTools(page.Tools)
	if err != nil {
		return nil, fmt.Errorf("the tools/list result cannot be decoded: %v", err)
	}
	return &mcp.ListToolsResult{NextCursor: page.NextCursor, Tools: tools}, nil
}

// fetchPages lists every page with list; page is the last one asked for,
// the one a failure happened on.
func fetchPages(ctx context.Context, list func(ctx context.Context, cursor string) (*mcp.ListToolsResult, error)) (tools []*mcp.Tool, page int, err error) {
	size := 0
	seen := map[string]bool{}
	cursors := map[string]bool{}
	cursor := ""
	for page = 1; ; page++ {
		if page > maxPages {
			return nil, page, fmt.Errorf("the server listed more than %d pages of tools", maxPages)
		}
		res, err := list(ctx, cursor)
		if err != nil {
			return nil, page, err
		}
		for _, t := range res.Tools {
			if err := checkTool(t, seen); err != nil {
				return nil, page, err
			}
			// As JSON, not as the SDK's decoded maps, from this page on:
			// those take many times the JSON (see rawToolsPage).
			if err := registry.CompactSchemas(t); err != nil {
				return nil, page, fmt.Errorf("the tool %q cannot be encoded as JSON: %w", t.Name, err)
			}
			// segmentio's Marshal, at about half encoding/json's cost: the
			// length alone is used, a bound on what the fetch holds.
			b, err := segjson.Marshal(t)
			if err != nil {
				return nil, page, fmt.Errorf("the tool %q cannot be encoded as JSON: %w", t.Name, err)
			}
			if len(b) > maxOneToolBytes {
				return nil, page, fmt.Errorf("the tool %q takes %d bytes as JSON, over the %d MiB one tool may take", t.Name, len(b), maxOneToolBytes>>20)
			}
			if size += len(b); size > maxToolBytes {
				return nil, page, fmt.Errorf("the server's tools exceed %d MiB of JSON", maxToolBytes>>20)
			}
		}
		if tools = append(tools, res.Tools...); len(tools) > maxTools {
			return nil, page, fmt.Errorf("the server listed more than %d tools", maxTools)
		}
		if res.NextCursor == "" {
			return tools, page, nil
		}
		if cursors[res.NextCursor] {
			return nil, page, fmt.Errorf("the server repeated the pagination cursor %q", res.NextCursor)
		}
		cursors[res.NextCursor], cursor = true, res.NextCursor
	}
}

// checkTool rejects a fetch over a tool that could not be published intact.
func checkTool(t *mcp.Tool, seen map[string]bool) error {
	if t.Name == "" {
		return errors.New("the server listed a tool without a name")
	}
	if seen[t.Name] {
		return fmt.Errorf("the server listed the tool %q twice", t.Name)
	}
	seen[t.Name] = true
	if len(t.Meta) > registry.MaxMetaMembers {
		return fmt.Errorf("the tool %q has more than %d _meta members", t.Name, registry.MaxMetaMembers)
	}
	if !objectSchema(t.InputSchema) {
		return fmt.Errorf("the tool %q has an input schema that is not a JSON object schema", t.Name)
	}
	return nil
}

// objectSchema: schema, decoded or as JSON, is an object whose "type" is
// "object".
func objectSchema(schema any) bool {
	switch schema := schema.(type) {
	case map[string]any:
		return schema["type"] == "object"
	case json.RawMessage:
		if i := jsonspan.SkipSpace(schema, 0); i >= len(schema) || schema[i] != '{' {
			return false
		}
		var typ any
		v := memberValue(schema, "type")
		return v != nil && json.Unmarshal(v, &typ) == nil && typ == "object"
	}
	return false
}

// publish swaps the tools of a complete fetch that pass the filter in; the
// generation must still be current. It reports whether every tool of
// fetched is published now (no filter, the swap done).
func (s *Supervisor) publish(g *generation, fetched []*mcp.Tool) (all bool) {
	if g.ctx.Err() != nil {
		return false
	}
	// One read of the filter: the refusal below names the filter its set
	// was counted under, while SetToolFilter may store another meanwhile.
	filter := s.filter.Load()
	tools := filtered(fetched, filter)
	before := s.registry.Owned(s.ns, s.owner)
	s.mu.Lock()
	opening := g.opening
	if opening {
		// A connect's tools can be called from the moment they are listed:
		// an agent told of them at once must not be told the server is not
		// connected yet. Nothing can fail between here and connected().
		s.live = g
	}
	s.mu.Unlock()
	changed, err := s.registry.Swap(s.ns, s.owner, s.p.ServerName, tools, s)
	err = boundError(err) // it may name a tool, which the upstream names
	owned := s.registry.Owned(s.ns, s.owner)
	reason := v1alpha1.ReasonToolNameConflict
	if errors.As(err, new(*registry.ToolBudgetError)) {
		reason = v1alpha1.ReasonToolBudgetExceeded
	}
	s.mu.Lock()
	s.snap.Tools, s.snap.SyncConflict, s.snap.SyncReason = owned, "", ""
	if err != nil {
		s.snap.SyncConflict, s.snap.SyncReason = err.Error(), reason
	}
	live := s.live == g && !opening
	s.mu.Unlock()
	if live { // during a connect, connected() signals once for both
		s.signal()
	}
	if err != nil {
		// Not kept for the retry, which fetches it again: held here, a
		// refused set of up to 16 MiB would be memory outside the
		// namespace's tool budget, per McpServer (docs/design.md, "Budgets").
		g.fetched, g.refused = nil, refusal{filter: filter}
		if be, ok := errors.AsType[*registry.ToolBudgetError](err); ok {
			g.refused.bytes = be.Bytes
		}
		if ce, ok := errors.AsType[*registry.ConflictError](err); ok {
			g.refused.conflict = ce
		}
		kick(s.conflicted)
		s.log.Info("tool set not published: keeping the previous set", "error", err.Error())
		s.emit(true, reason, "Kept the previous tool set: "+err.Error())
		return false
	}
	g.refused = refusal{}
	if changed && len(before) > 0 {
		added, removed := diffTools(before, owned)
		s.emit(false, v1alpha1.ReasonToolsChanged, fmt.Sprintf("Tools changed: %d added, %d removed, %d published", added, removed, len(owned)))
	}
	return filter.Empty()
}

// filtered is the part of a fetch that the filter f (spec.tools) publishes.
func filtered(fetched []*mcp.Tool, f *policy.ToolFilter) []*mcp.Tool {
	if f.Empty() {
		return fetched
	}
	out := make([]*mcp.Tool, 0, len(fetched))
	for _, t := range fetched {
		if f.Allows(t.Name) {
			out = append(out, t)
		}
	}
	return out
}

// SetToolFilter changes which of the server's tools are published without
// reconnecting: the live connection's last complete fetch is filtered again
// and swapped in by its sync goroutine, like any re-sync (an equal set
// changes nothing, a refused one keeps the previous set). It reports false,
// and changes nothing, while no connection is live; the caller then
// replaces the supervisor, whose next connection fetches afresh.
// See docs/design.md, "Tool sync".
func (s *Supervisor) SetToolFilter(f policy.ToolFilter) bool {
	s.mu.Lock()
	g := s.live
	s.mu.Unlock()
	if g == nil {
		return false
	}
	// Lost just now: the next connection publishes with the new filter.
	s.filter.Store(&f)
	g.wake(g.retry)
	return true
}

// diffTools counts public names added and removed between two sorted sets.
func diffTools(before, after []registry.Tool) (added, removed int) {
	old := make(map[string]bool, len(before))
	for _, t := range before {
		old[t.Name] = true
	}
	for _, t := range after {
		if !old[t.Name] {
			added++
		}
		delete(old, t.Name)
	}
	return added, len(old)
}

// refusal is what a retry needs to know of a refused set: the bytes the
// namespace's budget refused, or the name conflict that refused it, and
// the filter it was filtered with.
type refusal struct {
	bytes    int64
	conflict *registry.ConflictError
	filter   *policy.ToolFilter
}

// stillRefused: fetching again would only have the same set refused, with
// the same filter: the namespace has no room for its bytes yet, or the
// public name it conflicts on is still held by the same owner (itself, when
// two of its own tools take one name: only a list_changed can mend that).
// The caller holds syncMu.
func (s *Supervisor) stillRefused(g *generation) bool {
	r := g.refused
	switch {
	case r.filter != s.filter.Load():
		return false
	case r.bytes > 0:
		return !s.registry.Fits(s.ns, s.owner, r.bytes)
	case r.conflict != nil && r.conflict.HeldBy == s.owner:
		return true
	case r.conflict != nil:
		t, _, held := s.registry.Lookup(s.ns, r.conflict.PublicName)
		return held && t.Owner == r.conflict.HeldBy
	}
	return false
}

// narrow applies a new filter to what the registry holds of the server
// when no fetch is kept to filter again (its last one was refused): what
// the filter excludes leaves the registry at once, and the fetch that
// follows adds what it newly allows. Were that fetch to fail, the registry
// would otherwise go on listing tools the filter excludes until the next
// list_changed. A subset of its own set is never refused. The caller
// holds syncMu. See docs/design.md, "Tool sync".
func (s *Supervisor) narrow(g *generation) {
	upstream := s.ownedUpstream()
	if len(upstream) == 0 {
		return
	}
	refused := g.refused
	s.publish(g, upstream)
	// Still the last fetch's refusal: the fetch that follows decides anew.
	g.refused = refused
}

// DefaultResyncInterval: a server's list_changed re-syncs are at least
// this far apart; notifications in between are coalesced into the next one
// (docs/design.md, "Budgets" and "Limits"), so that a storm of them costs one fetch a second.
const DefaultResyncInterval = time.Second

// resyncLoop is g's syncer (generation.startSyncing): it runs while a
// wake is pending and returns when none is. It re-syncs on list_changed,
// each time with a fresh budget, at most one per s.resync (real time, like
// the deadlines of requests). A failed re-sync keeps the last good set and
// is tried again (resyncFailed); a timed-out one is a loss. See
// docs/design.md, "Tool sync".
func (s *Supervisor) resyncLoop(g *generation) {
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-g.retry:
			// A refused set may fit now that the registry changed, or the
			// filter changed what the last fetch publishes. A refused set
			// was not kept: it is fetched again, as a re-sync.
			s.syncMu.Lock()
			kept, futile := g.fetched != nil, s.stillRefused(g)
			switch {
			case kept:
				s.publish(g, g.fetched)
			case !futile && g.refused.filter != s.filter.Load():
				s.narrow(g)
			}
			s.syncMu.Unlock()
			if kept || futile {
				continue
			}
		case <-g.resync:
		default:
			if g.doneSyncing() {
				return
			}
			continue
		}
		if !g.lastResync.IsZero() && !sleepCtx(g.ctx, s.resync-time.Since(g.lastResync)) {
			return
		}
		g.lastResync = time.Now()
		ctx, cancel := context.WithTimeout(g.ctx, s.p.ConnectionTimeout)
		stage, err := s.syncTools(ctx, g)
		if err == nil {
			g.failedResyncs = 0
			g.stopResyncRetry()
		} else if g.ctx.Err() == nil {
			s.resyncFailed(ctx, g, stage, err)
		}
		cancel()
	}
}

// resyncFailed reports a failed re-sync and has it tried again after the
// server's reconnect backoff, at most once per s.resync: the list the
// server announced is not to be missed until its next list_changed. One
// that ran out of its budget is a loss instead. See docs/design.md,
// "Tool sync".
func (s *Supervisor) resyncFailed(ctx context.Context, g *generation, stage string, err error) {
	se := s.attemptError(g.ctx, ctx, stage, err)
	s.update(func(sn *Snapshot) { sn.LastError = se })
	if IsDeadline(se) {
		s.log.Info("tool re-sync failed: keeping the last good tools until the reconnect", "error", se.Error())
		g.lose(se.Stage, se.Err)
		return
	}
	if isTransportFailure(err) {
		g.askProbe()
	}
	g.failedResyncs++
	wait := max(s.resync, backoffDelay(s.p.Reconnect, g.failedResyncs))
	s.log.Info("tool re-sync failed: keeping the last good tools", "error", se.Error(), "retryIn", wait.String())
	g.resyncAfter(wait)
}

// sleepCtx waits d (nothing when d <= 0), or reports false when ctx ends
// first.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
