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
// goroutine of its own; watch turns its end into a loss.
func (g *generation) waitSession() {
	g.sessErr = g.sess.Wait()
	close(g.sessDone)
}

// watch raises the loss when the connection ends by itself: the session
// ended (the server hung up, a stream failed for good), or the link
// reports that the server exited (a stdio child).
func (g *generation) watch() {
	var exited <-chan struct{}
	ex, ok := g.link.(exitReporter)
	if ok {
		exited = g.link.closed()
	}
	select {
	case <-g.ctx.Done():
	case <-g.sessDone:
		select {
		case <-exited: // the exit says more than the end of its stream
			g.lose(StageConnection, ex.exitError())
			return
		default:
		}
		err := g.sessErr
		if err == nil {
			err = errors.New("the server closed the connection")
		}
		g.lose(StageConnection, fmt.Errorf("connection closed: %w", err))
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
