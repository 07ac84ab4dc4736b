package bridge

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// dialer starts the transport of one generation. onLost is called (from any
// goroutine, possibly more than once) when the transport itself learns that
// the connection is gone, e.g. an HTTP 404 for the session.
type dialer interface {
	dial(ctx context.Context, onLost func(error)) (link, error)
}

// link is one generation's transport, single use.
type link interface {
	// transport is what the MCP client connects over.
	transport() mcp.Transport
	// close starts closing; it returns at once.
	close()
	// closed is the close signal: closed once nothing of the generation
	// runs any more (for stdio: the child has been reaped).
	closed() <-chan struct{}
}
