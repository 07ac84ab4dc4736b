package bridge

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/api/v1alpha1"
)

// Limits on what a server may list, so that a hostile server cannot make
// the manager hold unbounded data.
const (
	maxTools = 50_000
	maxPages = 10_000
)

// syncTools is the two-phase sync: fetch every page under ctx's
// deadline into a complete set, then swap it into the registry in one step.
// A failed fetch changes nothing; a refused swap keeps the previous set.
// See docs/design.md, "Tool sync".
func (s *Supervisor) syncTools(ctx context.Context, g *generation, stage *string) error {
	s.syncMu.Lock()
	defer s.syncMu.Unlock()
	start := time.Now()
	tools, err := fetchTools(ctx, g.sess, stage)
	s.observer.ToolSync(err == nil, time.Since(start))
	if err != nil {
		return err
	}
	g.fetched = tools
	s.publish(g, tools)
	return nil
}

func fetchTools(ctx context.Context, sess *mcp.ClientSession, stage *string) ([]*mcp.Tool, error) {
	var tools []*mcp.Tool
	seen := map[string]bool{}
	cursors := map[string]bool{}
	cursor := ""
	for page := 1; ; page++ {
		*stage = StageToolsList(page)
		if page > maxPages {
			return nil, fmt.Errorf("the server listed more than %d pages of tools", maxPages)
		}
		res, err := sess.ListTools(ctx, &mcp.ListToolsParams{Cursor: cursor})
		if err != nil {
			return nil, err
		}
		for _, t := range res.Tools {
			if err := checkTool(t, seen); err != nil {
				return nil, err
			}
		}
		if tools = append(tools, res.Tools...); len(tools) > maxTools {
			return nil, fmt.Errorf("the server listed more than %d tools", maxTools)
		}
		if res.NextCursor == "" {
			return tools, nil
		}
		if cursors[res.NextCursor] {
			return nil, fmt.Errorf("the server repeated the pagination cursor %q", res.NextCursor)
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
	schema, ok := t.InputSchema.(map[string]any)
	if !ok || schema["type"] != "object" {
		return fmt.Errorf("the tool %q has an input schema that is not a JSON object schema", t.Name)
	}
	return nil
}

// publish swaps a complete set in; the generation must still be current.
func (s *Supervisor) publish(g *generation, tools []*mcp.Tool) {
	if g.ctx.Err() != nil {
		return
	}
	before := s.registry.Owned(s.ns, s.owner)
	changed, err := s.registry.Swap(s.ns, s.owner, s.p.ServerName, tools, s)
	owned := s.registry.Owned(s.ns, s.owner)
	s.mu.Lock()
	s.snap.Tools, s.snap.SyncConflict = owned, ""
	if err != nil {
		s.snap.SyncConflict = err.Error()
	}
	live := s.live == g
	s.mu.Unlock()
	if live { // during a connect, connected() signals once for both
		s.signal()
	}
	if err != nil {
		s.log.Info("tool set not published: keeping the previous set", "error", err.Error())
		s.emit(true, v1alpha1.ReasonToolNameConflict, "Kept the previous tool set: "+err.Error())
		return
	}
	if changed && len(before) > 0 {
		added, removed := diffTools(before, owned)
		s.emit(false, v1alpha1.ReasonToolsChanged, fmt.Sprintf("Tools changed: %d added, %d removed, %d published", added, removed, len(owned)))
	}
}

// diffTools counts public names added and removed between two sorted sets.
func diffTools(before, after []Tool) (added, removed int) {
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

// resyncLoop re-syncs on list_changed, each time with a fresh budget. A
// failed re-sync keeps the last good set; a timed-out one is a loss.
// See docs/design.md, "Tool sync".
func (s *Supervisor) resyncLoop(g *generation) {
	for {
		select {
		case <-g.ctx.Done():
			return
		case <-g.retry:
			// A refused set may fit now that the registry changed.
			s.syncMu.Lock()
			s.publish(g, g.fetched)
			s.syncMu.Unlock()
			continue
		case <-g.resync:
		}
		ctx, cancel := context.WithTimeout(g.ctx, s.p.ConnectionTimeout)
		stage := StageToolsList(1)
		err := s.syncTools(ctx, g, &stage)
		if err != nil && g.ctx.Err() == nil {
			se := s.attemptError(g.ctx, ctx, stage, err).(*StageError)
			s.log.Info("tool re-sync failed: keeping the last good tools", "error", se.Error())
			s.update(func(sn *Snapshot) { sn.LastError = se })
			if IsDeadline(se) {
				g.lose(se.Stage, se.Err)
			} else if isTransportFailure(err) {
				kick(g.probe)
			}
		}
		cancel()
	}
}
