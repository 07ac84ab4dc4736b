package bridge

import (
	"context"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// clientImpl is how the manager introduces itself to servers; the protocol
// versions it speaks are the SDK's and registry.SessionlessProtocol.
var clientImpl = &mcp.Implementation{Name: "mcp-bridge-operator", Version: "v1alpha1"}

// sdkClient opens the session of every generation of every supervisor. An
// mcp.Client holds its options and a copy of the SDK's method table (about
// 4 KB), and only its list_changed handler would differ between
// generations: that handler finds the generation by its session instead.
// See docs/design.md, "Replicas and ownership" (memory).
var sdkClient = mcp.NewClient(clientImpl, &mcp.ClientOptions{
	Capabilities: &mcp.ClientCapabilities{},
	ToolListChangedHandler: func(_ context.Context, req *mcp.ToolListChangedRequest) {
		if v, ok := listening.Load(req.Session); ok {
			g := v.(*generation)
			// Never list from inside the handler: it runs on the reader.
			g.wake(g.resync)
		}
	},
})

// listening maps each open session to its generation, from its open until
// its close. A list_changed that comes before the session is in it (during
// the handshake) is not lost: the generation lists its tools after that.
var listening sync.Map // *mcp.ClientSession → *generation
