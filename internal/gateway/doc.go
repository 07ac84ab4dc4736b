// Package gateway owns the MCP endpoint agents talk to: one Streamable HTTP
// endpoint per namespace at /namespaces/{namespace}/mcp that lists the
// namespace's tools in internal/registry and forwards tools/call to the
// Caller each tool was published with (a connection supervisor). It
// compiles against the registry only, never against internal/bridge.
//
// Access (access.go) authenticates bearer tokens with audience-bound
// TokenReviews and authorizes them for verb "use" on
// mcpservers.mcpbridge.dev: namespace-wide first, and only when that is
// denied, per McpServer (RBAC resourceNames), at most
// DefaultMaxServerReviewsPerRequest of them per request unless
// WithMaxServerReviewsPerRequest sets another bound. The reviews, their
// caches and rate limits are internal/kubeauth's; a refusal by a limit is
// counted in mcpbridge_gateway_refusals_total (metrics.go). Strings an agent
// chose reach logs and spans cut to 128 bytes (agentstrings.go).
//
// Each caller identity has a view per namespace (view.go): a go-sdk server
// for that identity's sessions, serving exactly the tools of the servers
// it may use. A view holds no entry per tool: it lists from the registry's
// snapshot (toollist.go), calls through the registry, and announces a
// change its identity can see as notifications/tools/list_changed, so that
// list_changed is per client and a view costs the same in a namespace of
// any size. Views follow the registry, refresh before every tools/list
// and, while they have sessions, periodically, so that a changed
// permission reaches idle agents too.
//
// The go-sdk serves every MCP method, but a well-formed tools/call takes a
// fast path (call.go) that forwards its arguments and result as JSON bytes,
// because decoding and re-encoding them in the SDK on both sides cost more
// than the agent and the upstream together; it reads the agent's message in
// one pass, in place (jsonscan.go), and writes the answer before it waits
// for what the upstream's caller left until then (registry.AfterAnswer). The gateway also ends idle agent
// sessions itself (sessions.go), since the SDK does not see fast-path calls.
// Every tools/call, on either path, writes one audit line (audit.go).
//
// A 2025-11-25 session's id carries its state, sealed with a key the
// replicas share (sealed.go, SessionKeys): a replica that does not hold the
// session takes it up from its id by replaying its handshake through the
// SDK's handler (restore.go), so that any replica serves any session.
//
// Budgets (budgets.go) bound what one identity and one namespace may hold:
// sessions, calls in flight, and the bytes of arguments and results, which
// the fast path reads once and writes from where it read them, and the SDK
// path counts once its tool handler has the result. Beyond a budget the
// request is refused at once, and the connection it came on is read again
// only a while later (pacing.go, Server), so that an agent that asks again
// without pause costs the gateway little.
//
// See docs/design.md, "The gateway" and "Sessions on every replica".
package gateway
