package bridge

import "github.com/modelcontextprotocol/go-sdk/mcp"

// clientImpl is how the manager introduces itself to servers; the protocol
// versions it speaks are the SDK's and registry.SessionlessProtocol.
var clientImpl = &mcp.Implementation{Name: "mcp-bridge-operator", Version: "v1alpha1"}
