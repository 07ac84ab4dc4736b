package bridge

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/mcpbridge/operator/api/v1alpha1"
	"github.com/mcpbridge/operator/internal/registry"
	"github.com/mcpbridge/operator/internal/tracing"
)

// CallTool sends tools/call with the raw name upstream, bounded by
// toolCallTimeoutMs and by the caller's ctx. A server that is not connected
// fails at once with the reason; a sleeping one is woken first, within the
// same toolCallTimeoutMs.
// See docs/design.md, "Tool calls" and "Idle servers".
func (s *Supervisor) CallTool(ctx context.Context, rawName string, args any) (res *mcp.CallToolResult, err error) {
	start := time.Now()
	ctx, span := s.startCall(ctx, rawName)
	var g *generation
	defer func() {
		outcome := callOutcome(res, err)
		s.observer.ToolCall(outcome, time.Since(start))
		endCall(span, g, outcome, err)
	}()
	deadline := start.Add(s.p.ToolCallTimeout)
	if g, err = s.callable(ctx, rawName, deadline); err != nil {
		return nil, err
	}
	defer s.release()
	cctx, cancel := g.callContext(ctx, deadline)
	defer cancel()
	params := &mcp.CallToolParams{Name: rawName, Arguments: args}
	if s.tracer.On() {
		params.Meta = tracing.Meta(cctx) // MCP's way to pass the trace on, over any transport
	}
	cctx, refusal := withReadRefusal(cctx)
	res, err = g.sess.CallTool(cctx, params)
	if err != nil {
		return nil, s.callFailed(ctx, cctx, g, refusal.or(err))
	}
	return res, nil
}

// callable is the generation a call to rawName goes to, or why there is
// none. A sleeping server is woken first (acquire), unless the call is
// refused anyway. A nil error counts the call in flight: the caller must
// release it.
func (s *Supervisor) callable(ctx context.Context, rawName string, deadline time.Time) (*generation, error) {
	if !s.filter.Load().Allows(rawName) {
		return nil, newStageError(StageToolsCall, fmt.Errorf("tool %q is not published: spec.tools filters it out", rawName))
	}
	g, err := s.acquire(ctx, deadline)
	if err != nil {
		return nil, err
	}
	if s.tasks.required(rawName) {
		s.release()
		return nil, newStageError(StageToolsCall, fmt.Errorf(
			"tool %q requires task-based execution (execution.taskSupport: required), which the bridge does not support", rawName))
	}
	return g, nil
}

// callContext bounds one call by deadline, by ctx and by the generation: a
// closing generation ends its calls.
func (g *generation) callContext(ctx context.Context, deadline time.Time) (context.Context, context.CancelFunc) {
	cctx, cancel := context.WithDeadline(ctx, deadline)
	stop := context.AfterFunc(g.ctx, cancel)
	return cctx, func() { stop(); cancel() }
}

// callFailed says why a call failed and lets the generation react: a lost
// session ends it, a transport failure earns a probe.
func (s *Supervisor) callFailed(ctx, cctx context.Context, g *generation, err error) error {
	switch {
	case ctx.Err() != nil:
		return ctx.Err()
	case g.ctx.Err() != nil:
		err = fmt.Errorf("%w: the connection was closed during the call", ErrUnavailable)
	case errors.Is(cctx.Err(), context.DeadlineExceeded):
		err = errCallTimeout{timeout: s.p.ToolCallTimeout}
	case errors.Is(err, registry.ErrResultBudget):
		// The caller's budget, not the connection's failure.
	case isSessionLost(err):
		g.lose(StageToolsCall, err)
	case isTransportFailure(err):
		g.askProbe()
	}
	return newStageError(StageToolsCall, err)
}

// errCallTimeout is a call's toolCallTimeoutMs running out; it is a
// context.DeadlineExceeded for errors.Is.
type errCallTimeout struct{ timeout time.Duration }

func (e errCallTimeout) Error() string {
	return fmt.Sprintf("the tool call timed out after %dms", e.timeout.Milliseconds())
}

func (errCallTimeout) Is(target error) bool { return target == context.DeadlineExceeded }

// downReason says why no generation is live; the caller holds s.mu.
func (s *Supervisor) downReason() string {
	sn := &s.snap
	switch sn.Phase {
	case v1alpha1.PhaseReconnecting:
		if sn.Attempt > 0 {
			return fmt.Sprintf("server %q is reconnecting (attempt %d of %d)", s.p.ServerName, sn.Attempt, sn.MaxAttempts)
		}
		return fmt.Sprintf("server %q is reconnecting", s.p.ServerName)
	case v1alpha1.PhaseFailed:
		return fmt.Sprintf("server %q is down (%s): %s", s.p.ServerName, sn.Reason, sn.Message)
	default:
		return fmt.Sprintf("server %q is not connected yet", s.p.ServerName)
	}
}

// RenderText is the text rendering of a result: text blocks joined by
// newlines, every other block a short placeholder.
// See docs/design.md, "Tool calls".
func RenderText(res *mcp.CallToolResult) string {
	parts := make([]string, 0, len(res.Content))
	for _, c := range res.Content {
		parts = append(parts, renderBlock(c))
	}
	return strings.Join(parts, "\n")
}

func renderBlock(c mcp.Content) string {
	switch b := c.(type) {
	case *mcp.TextContent:
		return b.Text
	case *mcp.ImageContent:
		return fmt.Sprintf("[image: %s, content discarded]", b.MIMEType)
	case *mcp.AudioContent:
		return fmt.Sprintf("[audio: %s, content discarded]", b.MIMEType)
	case *mcp.EmbeddedResource:
		if b.Resource != nil {
			return fmt.Sprintf("[resource: %s, content discarded]", b.Resource.URI)
		}
		return "[resource, content discarded]"
	case *mcp.ResourceLink:
		return fmt.Sprintf("[resource link: %s]", b.URI)
	default:
		return fmt.Sprintf("[%T content discarded]", c)
	}
}

// ToolError is a result with isError set, as an error.
// See docs/design.md, "Tool calls".
type ToolError struct{ Result *mcp.CallToolResult }

func (e *ToolError) Error() string { return "the tool reported an error: " + RenderText(e.Result) }

// ResultError returns a *ToolError when the result has isError set.
func ResultError(res *mcp.CallToolResult) error {
	if res != nil && res.IsError {
		return &ToolError{Result: res}
	}
	return nil
}

func callOutcome(res *mcp.CallToolResult, err error) string {
	switch {
	case errors.Is(err, ErrUnavailable):
		return "unavailable"
	case err != nil:
		return "error"
	case res != nil && res.IsError:
		return "tool_error"
	default:
		return "success"
	}
}
