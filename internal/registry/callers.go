package registry

import (
	"context"
	"encoding/json"
	"errors"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Caller forwards a tools/call to the upstream that owns a tool. A tool set
// is published with the Caller that reaches its server: the registry knows
// nothing else about where a server runs.
type Caller interface {
	CallTool(ctx context.Context, rawName string, args any) (*mcp.CallToolResult, error)
}

// JSONCaller forwards a tools/call whose arguments and result stay JSON, so
// that a proxy (the gateway) never decodes what it only passes on. A Caller
// may implement it; the gateway's fast path then uses it.
//
// The tool must not declare x-mcp-header parameters: the Mcp-Param-* headers
// they need are set by the SDK only, so such tools go through CallTool.
type JSONCaller interface {
	CallToolJSON(ctx context.Context, rawName string, args json.RawMessage) (result json.RawMessage, isError bool, err error)
}

// ResultBytes counts the bytes of tool results the manager holds while it
// reads them, so that the gateway can bound them per namespace: a call's
// result is read into memory once (its body), and the body is what is
// counted. See docs/design.md, "Budgets".
type ResultBytes interface {
	// Take counts n more bytes held, or reports false (and counts
	// nothing) when that would pass the budget.
	Take(n int64) bool
	// Return gives back n bytes no longer held.
	Return(n int64)
}

// ErrNotServing fails a call that its Caller refused before making it: the
// server is being handed to another replica, and the call belongs where the
// server is served next. Only such a call may be sent again.
var ErrNotServing = errors.New("the McpServer is no longer served by this replica; the call was not made")

// ErrResultBudget fails a call whose result would pass its ResultBytes
// budget. It is the caller's budget, not the server's failure: the
// connection is left alone.
var ErrResultBudget = errors.New("the budget of result bytes held in memory is spent")

type resultBytesKey struct{}

// WithResultBytes makes a JSONCaller under ctx count the result it reads
// into rb.
func WithResultBytes(ctx context.Context, rb ResultBytes) context.Context {
	return context.WithValue(ctx, resultBytesKey{}, rb)
}

// ResultBytesFrom is the budget WithResultBytes put into ctx, or nil.
func ResultBytesFrom(ctx context.Context) ResultBytes {
	rb, _ := ctx.Value(resultBytesKey{}).(ResultBytes)
	return rb
}

// AfterAnswer holds work a JSONCaller leaves until its caller has passed
// the result on: the rest of an upstream's response is drained so that its
// connection is pooled before the next call, and the agent's answer need
// not wait for that. One call's AfterAnswer is used by one goroutine at a
// time; a caller that never runs it only loses the wait, not the work.
type AfterAnswer struct{ fns []func() }

// Defer adds fn to what Run does.
func (a *AfterAnswer) Defer(fn func()) { a.fns = append(a.fns, fn) }

// Run does the deferred work, in order, once.
func (a *AfterAnswer) Run() {
	fns := a.fns
	a.fns = nil
	for _, fn := range fns {
		fn()
	}
}

type afterAnswerKey struct{}

// WithAfterAnswer lets a JSONCaller under ctx defer work into a until its
// caller has written the result.
func WithAfterAnswer(ctx context.Context, a *AfterAnswer) context.Context {
	return context.WithValue(ctx, afterAnswerKey{}, a)
}

// AfterAnswerFrom is the AfterAnswer WithAfterAnswer put into ctx, or nil:
// then the JSONCaller does the work before it returns.
func AfterAnswerFrom(ctx context.Context) *AfterAnswer {
	a, _ := ctx.Value(afterAnswerKey{}).(*AfterAnswer)
	return a
}
