package bridge

import (
	"context"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// The supervisor reaches a server through a dialer, which builds one link
// per generation. Everything above the link (the MCP session, the one
// connection budget, tool sync, health checks, calls, the close barrier) is
// the same for every transport; a new transport is a new dialer and link.
//
// Three exist: stdioDialer (stdio.go) starts a child process and speaks MCP
// on its pipes; tunnelDialer (pod.go) speaks MCP over a tunnel to the shim
// in the server's Pod, which starts the child there; httpDialer (http.go)
// speaks Streamable HTTP. The tunnel reuses the stdio shape: an
// mcp.IOTransport over the stream, closed() once the far side confirms the
// child was reaped, and exitReporter so that the child's exit is a loss
// like a local child's.

// dialer starts the transport of one generation. onLost may be called, from
// any goroutine and more than once, when the transport itself learns that the
// connection is gone (an HTTP 404 for the session); the first call counts.
// dial must honour ctx: it runs under the generation's connection budget.
type dialer interface {
	dial(ctx context.Context, onLost func(error)) (link, error)
}

// link is one generation's transport, used once.
type link interface {
	// transport is what the MCP client connects over.
	transport() mcp.Transport
	// close starts closing; it returns at once.
	close()
	// closed is the close signal: closed once nothing of the generation
	// runs any more (for stdio: the child has been reaped). The close
	// barrier waits for it.
	closed() <-chan struct{}
}

// exitReporter is a link whose closed signal can also come first, from the
// server's side: the server process exited by itself. The supervisor then
// treats closed() as a loss and reports exitError, which says how the process
// ended; it is valid once closed() is closed.
type exitReporter interface {
	link
	exitError() error
}

// awaiter is a dialer whose server may not be there yet: the Pod of a
// Pod-runtime server that is not Ready. Before a generation's connection
// budget starts, the supervisor calls await, which returns once the server
// can be dialled, and reports every new reason to wait through report.
// Waiting is not an attempt; await returns an error (the last reason) only
// when ctx ends, and the supervisor bounds ctx by connectionTimeoutMs.
type awaiter interface {
	dialer
	await(ctx context.Context, report func(PodWait)) error
}

// podLink is a link to a server in a Pod; the snapshot names the Pod.
type podLink interface {
	link
	podName() string
}

// refuser is a link that can refuse its destination (the egress policy of
// an HTTP link): refused is that refusal, or nil.
type refuser interface {
	refused() error
}

// startError is why a session over l failed to start: a refused destination
// is a failed transport start, whatever request first dialled it.
func startError(l link, err error) error {
	if r, ok := l.(refuser); ok {
		if rerr := r.refused(); rerr != nil {
			return newStageError(StageTransportStart, rerr)
		}
	}
	return err
}
