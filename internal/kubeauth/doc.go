// Package kubeauth answers two questions about a bearer token for the
// manager's HTTP endpoints, the MCP gateway and /metrics: whose token is it
// (a TokenReview, optionally bound to audiences) and may its user do
// something (a SubjectAccessReview).
//
// Answers are remembered briefly (an allow longer than a denial) in bounded
// LRU caches keyed by a SHA-256 of the token, so that a caller already known
// costs no apiserver round trip and the token itself is never kept.
// TokenReviews of tokens that are not in the cache are rate-limited: a flood
// of random tokens gets 429 after the limit's burst instead of reaching the
// apiserver, while callers whose answer is cached keep working. Concurrent
// requests that need the same review share one.
//
// It replaces controller-runtime's filters.WithAuthenticationAndAuthorization,
// which pulls k8s.io/apiserver (with gRPC and CEL) into the manager and
// answers a token the apiserver rejects with 500 and an error log per
// request. See docs/design.md, "Authentication and authorization" and
// "Metrics".
package kubeauth
