// Package e2e holds the end-to-end suite of `make test-e2e`: the operator's
// image (make image) deployed from config/default, through the overlay in
// config/ where the node lacks something, onto a real single-node cluster
// built from source (internal/testcluster), and driven as a user would:
// kubectl, McpServers, an agent with a ServiceAccount token at the gateway.
// The Helm chart (charts/mcp-bridge) is installed there too, with the Helm
// SDK in bin/chart-release (test/chart/cmd/chart-release).
//
// The suite runs only inside hack/e2e-sandbox.sh (make test-e2e), which keeps
// the machine unchanged; anywhere else it stops at once and says so. See
// docs/design.md, "How it is tested".
package e2e
