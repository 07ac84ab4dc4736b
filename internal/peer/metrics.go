package peer

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// Outcomes of a forward, as mcpbridge_replica_forwards_total counts them.
const (
	outcomeSuccess     = "success"
	outcomeToolError   = "tool_error"
	outcomeNotOwner    = "not_owner"
	outcomeCallError   = "error"
	outcomeUnreachable = "unreachable"
	outcomeCancelled   = "cancelled"
)

// forwards counts the calls this replica forwarded, by how they ended.
// See docs/design.md, "Forwarding between replicas".
var forwards = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "mcpbridge_replica_forwards_total",
	Help: "Tool calls this replica forwarded to the replica owning their McpServer, by outcome: success, tool_error, " +
		"not_owner (the replica called did not serve it), error (its caller failed), unreachable (no answer), cancelled.",
}, []string{"outcome"})

// unreachable is 1 for a peer while this replica's last forward to it got
// no answer, 0 once one did. See docs/design.md, "Forwarding between
// replicas".
var unreachable = prometheus.NewGaugeVec(prometheus.GaugeOpts{
	Name: "mcpbridge_replica_peer_unreachable",
	Help: "1 while the last call this replica forwarded to the peer replica got no answer (no connection, a refused " +
		"handshake, a connection lost), 0 after one that did.",
}, []string{"peer"})

// sessionEndsDropped counts the ended agent sessions this replica could
// not keep for replicas that join later (beyond maxKnownEnds): such a
// replica may take them up again. See docs/design.md, "Sessions on every
// replica".
var sessionEndsDropped = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "mcpbridge_replica_session_ends_dropped_total",
	Help: "Ended agent sessions this replica could not keep to tell replicas that join later, beyond its bound of 262,144.",
})

func init() { metrics.Registry.MustRegister(forwards, unreachable, sessionEndsDropped) }
