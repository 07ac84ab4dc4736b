// Package gateway owns the MCP endpoint agents talk to: one Streamable HTTP
// endpoint per namespace at /namespaces/{namespace}/mcp that lists the
// namespace's tool registry and forwards tools/call to the supervisor that
// owns each tool. It authenticates bearer tokens with a TokenReview and
// authorizes them with a SubjectAccessReview for verb "use" on
// mcpservers.mcpbridge.dev in the path's namespace.
//
// The go-sdk serves every MCP method, but a well-formed tools/call takes a
// fast path (call.go) that forwards its arguments and result as JSON bytes,
// because decoding and re-encoding them in the SDK on both sides cost more
// than the agent and the upstream together. The gateway also ends idle agent
// sessions itself (sessions.go), since the SDK does not see fast-path calls.
package gateway

// +kubebuilder:rbac:groups=authentication.k8s.io,resources=tokenreviews,verbs=create
// +kubebuilder:rbac:groups=authorization.k8s.io,resources=subjectaccessreviews,verbs=create
