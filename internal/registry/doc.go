// Package registry owns the per-namespace tool registry, the public name
// of a tool, and the contract between the gateway and whatever serves a
// tool: the Caller (and the optional JSONCaller) a tool set is published
// with, the ResultBytes budget a call counts its result against, and the
// protocol version from which MCP has no sessions.
//
// # Usage
//
// A publisher swaps an owner's whole tool set into a namespace with Swap,
// naming the Caller that reaches the server; Remove takes it out. A
// publisher that holds the set encoded swaps it with SwapEncoded: the
// registry then keeps the names and the means to decode the set, and
// decodes it on the first read of a tool's Upstream. Readers
// (the gateway) list a namespace with Tools, find a tool and its Caller
// with Lookup, and follow changes through a Subscription, which coalesces
// them and never blocks the registry.
//
// Today the publishers are the connection supervisors of internal/bridge,
// one per McpServer, each passing itself as the Caller. The registry
// depends on none of them: any source that can name an owner and forward a
// tools/call can publish a set, so a tool served by another replica is
// published like a local one, with a Caller that forwards there.
//
// # Files
//
//   - registry.go: Registry, Tool, Swap and the readers, the namespace's
//     budget of tool bytes (ToolBudgetError), conflicts (ConflictError)
//     and subscriptions.
//   - encoded.go: a set published by SwapEncoded, decoded on first use.
//   - canonical.go: the canonical JSON a tool is copied and compared by.
//   - naming.go: PublicName, the pure function from a server's name and a
//     tool's raw name to the name agents see.
//   - callers.go: Caller, JSONCaller, and what a caller finds in its
//     context: the ResultBytes budget, and AfterAnswer for work that may
//     wait until the result is passed on.
//   - protocol.go: SessionlessProtocol.
//
// See docs/design.md, "Tool registry and names".
package registry
