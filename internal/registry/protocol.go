package registry

// SessionlessProtocol is the first MCP protocol version without sessions,
// initialize and ping: its requests carry the client's identity in _meta
// and the Mcp-Method and Mcp-Name headers. Protocol versions are dates, so
// they compare as strings. Both ends of a forwarded call depend on it: the
// gateway towards agents, a Caller towards its server.
const SessionlessProtocol = "2026-07-28"
