// Package bridge owns the live side of the operator: one connection
// supervisor per MCP server (generations, backoff with a per-outage attempt
// budget, one total connection deadline, two-phase tool sync, loss detection
// and health checks, tool calls), the per-namespace tool registry those
// supervisors publish into, and the public tool-name function.
//
// It never talks to the Kubernetes apiserver: the controller drives a
// Supervisor with a resolved policy and turns its change signal and
// snapshots into status.
package bridge
