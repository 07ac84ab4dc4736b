package bridge

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// How a generation learns that its connection is gone. Every loss goes
// through generation.lose; doc.go maps which goroutine raises which.
// See docs/design.md, "Detecting loss".

// waitSession records the end of the MCP session. Wait blocks, so it has a
// goroutine of its own; on a link that reports no exit (HTTP) that end is
// the loss, raised here, and watch runs only beside an exitReporter.
func (g *generation) waitSession() {
	g.sessErr = g.sess.Wait()
	close(g.sessDone)
	if _, ok := g.link.(exitReporter); !ok {
		g.sessionEnded()
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
