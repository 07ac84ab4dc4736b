package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// How a generation learns that its connection is gone. Every loss goes
// through generation.lose; doc.go maps which goroutine raises which.
// See docs/design.md, "Detecting loss".

// waitSession records the end of the MCP session. Wait blocks, so it has a
// goroutine of its own (from the start, or only once the session ends: see
// sessionEnd); on a link that reports no exit (HTTP) that end is the loss,
// raised here, and watch runs only beside an exitReporter.
func (g *generation) waitSession() {
	g.sessErr = g.sess.Wait()
	close(g.sessDone)
	if _, ok := g.link.(exitReporter); !ok {
		g.sessionEnded()
	}
}

// sessionEnd decides when a generation starts waitSession. A Streamable
// HTTP session with a GET stream (2025-11-25) sends that GET, during
// Connect, with the context the SDK's connection lives in, which it cancels
// when the session ends, whatever the cause; the first GET that carries the
// sessionEnd of the Connect's context arms it, and waitSession then starts
// only when that context ends, so that an idle session keeps no goroutine
// for its end (docs/design.md, "Detecting loss"). Any other session
// (stdio, Pod, sessionless HTTP) starts waitSession once connected, as
// does one whose GET never came.
type sessionEnd struct {
	g     *generation
	ready chan struct{} // closed once Connect returned and g.sess is set (or not)
	mode  atomic.Int32  // sessionEndPending, then armed or waiting
}

const (
	sessionEndPending int32 = iota
	sessionEndArmed         // waitSession starts when the GET's context ends
	sessionEndWaiting       // waitSession runs from the connect on
)

type sessionEndKey struct{}

// withSessionEnd is ctx carrying se to the requests of the session
// connected under it.
func withSessionEnd(ctx context.Context, se *sessionEnd) context.Context {
	return context.WithValue(ctx, sessionEndKey{}, se)
}

// armSessionEnd arms the sessionEnd that ctx carries, if any and not yet
// decided, to start waitSession once ctx ends. The context of a GET the
// SDK sends lives no longer than its session; if it ends first, waitSession
// starts early and waits, as it would have from the connect on.
func armSessionEnd(ctx context.Context) {
	se, ok := ctx.Value(sessionEndKey{}).(*sessionEnd)
	if !ok || !se.mode.CompareAndSwap(sessionEndPending, sessionEndArmed) {
		return
	}
	context.AfterFunc(ctx, se.fire)
}

// fire runs on a goroutine of its own once the armed context ended.
func (se *sessionEnd) fire() {
	<-se.ready
	if se.g.sess != nil {
		se.g.waitSession()
	}
}

// connected is called once Connect returned (g.sess set if it succeeded):
// unless a GET armed it, waitSession starts now.
func (se *sessionEnd) connected() {
	close(se.ready)
	if se.g.sess != nil && se.mode.CompareAndSwap(sessionEndPending, sessionEndWaiting) {
		se.g.goFn(se.g.waitSession)
	}
}

// sessionEnded raises the end of the session as a loss (ignored when the
// supervisor closed it).
func (g *generation) sessionEnded() {
	err := g.sessErr
	if err == nil {
		err = errors.New("the server closed the connection")
	}
	g.lose(StageConnection, fmt.Errorf("connection closed: %w", err))
}

// watch raises the loss when the connection of an exitReporter link (a
// stdio child, local or in its Pod) ends by itself: the session ended (the server hung up, a
// stream failed for good), or the link reports that the server exited.
func (g *generation) watch() {
	ex := g.link.(exitReporter)
	exited := g.link.closed()
	select {
	case <-g.ctx.Done():
	case <-g.sessDone:
		select {
		case <-exited: // the exit says more than the end of its stream
			g.lose(StageConnection, ex.exitError())
			return
		default:
		}
		g.sessionEnded()
	case <-exited:
		g.lose(StageConnection, ex.exitError())
	}
}

// isSessionLost: the connection is certainly gone.
func isSessionLost(err error) bool {
	return errors.Is(err, mcp.ErrSessionMissing) || errors.Is(err, mcp.ErrConnectionClosed) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)
}

// isTransportFailure: the request may not have reached the server, so the
// connection deserves a probe. A JSON-RPC error came from the server itself.
func isTransportFailure(err error) bool {
	if isServerAnswer(err) {
		return false
	}
	return !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded)
}

// codeRejected is the JSON-RPC code the SDK gives a request that the
// transport rejected (connection refused, 5xx): not an answer of the server.
const codeRejected = -32005

// isServerAnswer: the error is a JSON-RPC error the server itself sent.
func isServerAnswer(err error) bool {
	var wire *jsonrpc.Error
	return errors.As(err, &wire) && wire.Code != codeRejected
}
