package toolsets

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"k8s.io/apimachinery/pkg/types"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/registry"
)

// HandoffError fails a call that found no live holder of its server within
// the server's connectionTimeoutMs: the agent may retry it.
type HandoffError struct {
	Server string
	Waited time.Duration
}

func (e *HandoffError) Error() string {
	return fmt.Sprintf("the McpServer %s is being handed over between replicas and no replica served it within %s; the call was not made and may be retried",
		e.Server, e.Waited)
}

// defaultWait bounds the wait of a server whose McpToolSet names no timeout.
const defaultWait = 30 * time.Second

// route is the Caller of one mirrored McpToolSet.
type route struct {
	m   *Mirror
	key types.NamespacedName
}

// CallToolJSON calls the holder's supervisor here, or forwards to the
// holder, waiting while there is none.
func (rt *route) CallToolJSON(ctx context.Context, rawName string, args json.RawMessage) (json.RawMessage, bool, error) {
	return rt.call(ctx, rawName, args, false, func(c registry.Caller) (json.RawMessage, bool, error) {
		if jc, ok := c.(registry.JSONCaller); ok {
			return jc.CallToolJSON(ctx, rawName, args)
		}
		return callThroughSDK(ctx, c, rawName, args)
	})
}

// CallTool is CallToolJSON for the gateway's SDK path: the local
// supervisor gets the call as it came; a forward carries it as JSON.
func (rt *route) CallTool(ctx context.Context, rawName string, args any) (*mcp.CallToolResult, error) {
	raw, err := json.Marshal(args)
	if err != nil {
		return nil, err
	}
	var local *mcp.CallToolResult
	res, _, err := rt.call(ctx, rawName, raw, true, func(c registry.Caller) (json.RawMessage, bool, error) {
		r, err := c.CallTool(ctx, rawName, args)
		local = r
		return nil, false, err
	})
	if err != nil || local != nil {
		return local, err
	}
	out := &mcp.CallToolResult{}
	if err := json.Unmarshal(res, out); err != nil {
		return nil, fmt.Errorf("the holder's answer is not a tools/call result: %w", err)
	}
	return out, nil
}

// call runs callLocal with this replica's supervisor when it holds the
// server, forwards otherwise, and waits for a holder in between.
func (rt *route) call(ctx context.Context, rawName string, args json.RawMessage, sdk bool,
	callLocal func(registry.Caller) (json.RawMessage, bool, error)) (json.RawMessage, bool, error) {
	m := rt.m
	var deadline <-chan time.Time
	start := time.Now()
	poll := cmp.Or(m.PollInterval, 100*time.Millisecond)
	for {
		s, changed := m.current(rt.key)
		holder := ""
		if s != nil {
			holder = s.holder
		}
		if res, isErr, done, err := rt.try(ctx, holder, rawName, args, sdk, callLocal); done {
			return res, isErr, err
		}
		// The mirror stops with the manager's controllers, before a
		// draining replica has answered its last calls; the cache it reads
		// runs until then. See docs/design.md, "Replicas and ownership".
		if h := m.cachedHolder(ctx, rt.key); h != holder {
			if res, isErr, done, err := rt.try(ctx, h, rawName, args, sdk, callLocal); done {
				return res, isErr, err
			}
		}
		if deadline == nil {
			wait := defaultWait
			if s != nil && s.timeout > 0 {
				wait = s.timeout
			}
			t := time.NewTimer(wait)
			defer t.Stop()
			deadline = t.C
		}
		select {
		case <-changed:
		case <-time.After(poll):
		case <-deadline:
			return nil, false, &HandoffError{Server: rt.key.String(), Waited: time.Since(start).Round(time.Millisecond)}
		case <-ctx.Done():
			return nil, false, ctx.Err()
		}
	}
}

// try calls holder's supervisor, here or forwarded; done is false when
// there is no call to make yet (no holder, a holder not live or not
// serving it here, a supervisor here retired for a handoff, a forward the
// peer refused before calling).
func (rt *route) try(ctx context.Context, holder, rawName string, args json.RawMessage, sdk bool,
	callLocal func(registry.Caller) (json.RawMessage, bool, error)) (res json.RawMessage, isErr, done bool, err error) {
	m := rt.m
	owner := rt.key.Namespace + "/" + rt.key.Name
	if holder == "" {
		return nil, false, false, nil
	}
	if holder == m.Self {
		c, ok := m.Local(rt.key.Namespace, owner)
		if !ok {
			return nil, false, false, nil
		}
		res, isErr, err = callLocal(c)
		if errors.Is(err, registry.ErrNotServing) {
			return nil, false, false, nil // retired for a handoff: the call was not made
		}
		return res, isErr, true, err
	}
	p, ok := m.peer(holder)
	if !ok {
		return nil, false, false, nil
	}
	res, isErr, err = m.Forward(ctx, p, rt.key.Namespace, owner, rawName, args, sdk)
	if err != nil && m.Retryable != nil && m.Retryable(err) {
		return nil, false, false, nil
	}
	return res, isErr, true, err
}

// cachedHolder is the holder the McpToolSet names in the cache now, "" if
// it cannot be read.
func (m *Mirror) cachedHolder(ctx context.Context, key types.NamespacedName) string {
	if m.Reader == nil {
		return ""
	}
	ts := &v1alpha1.McpToolSet{}
	if err := m.Reader.Get(ctx, key, ts); err != nil {
		return ""
	}
	return ts.Spec.Holder
}

func (m *Mirror) peer(name string) (Peer, bool) {
	if name == "" || m.Peer == nil || m.Forward == nil {
		return Peer{}, false
	}
	return m.Peer(name)
}

// callThroughSDK serves a JSON call with a Caller that has no JSON path.
func callThroughSDK(ctx context.Context, c registry.Caller, rawName string, args json.RawMessage) (json.RawMessage, bool, error) {
	var a any
	if len(args) > 0 {
		if err := json.Unmarshal(args, &a); err != nil {
			return nil, false, err
		}
	}
	res, err := c.CallTool(ctx, rawName, a)
	if err != nil {
		return nil, false, err
	}
	raw, err := json.Marshal(res)
	return raw, res.IsError, err
}
