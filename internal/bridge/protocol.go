package bridge

import "github.com/modelcontextprotocol/go-sdk/mcp"

// clientImpl is how the manager introduces itself to servers.
var clientImpl = &mcp.Implementation{Name: "mcp-bridge-operator", Version: "v1alpha1"}

// SessionlessProtocol is the first MCP protocol version without sessions,
// initialize and ping: its requests carry the client's identity in _meta
// and the Mcp-Method and Mcp-Name headers. Protocol versions are dates, so
// they compare as strings.
const SessionlessProtocol = "2026-07-28"
