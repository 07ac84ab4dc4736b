// Package kubeauth answers two questions about a bearer token for the
// manager's HTTP endpoints, the MCP gateway and /metrics: whose token is it
// (a TokenReview, optionally bound to audiences) and may its user do
// something (a SubjectAccessReview).
//
// Answers are remembered briefly (an allow longer than a denial) in bounded
// LRU caches keyed by a SHA-256 of the token, so that a caller already known
// costs no apiserver round trip and the token itself is never kept.
// With audiences, a token that is not in the cache is first checked locally
// (jwt.go): one that is not a well-formed JWT for one of them, or has
// expired, is refused without a review. TokenReviews of the others are
// rate-limited per source address and in all, and SubjectAccessReviews per
// identity (keyedlimits.go): a flood of forged tokens gets 429 after its
// address's burst instead of reaching the apiserver, while callers whose
// answer is cached keep working. Concurrent requests that need the same
// review share one.
//
// It replaces controller-runtime's filters.WithAuthenticationAndAuthorization,
// which pulls k8s.io/apiserver (with gRPC and CEL) into the manager and
// answers a token the apiserver rejects with 500 and an error log per
// request. See docs/design.md, "Authentication and authorization" and
// "Metrics".
package kubeauth
