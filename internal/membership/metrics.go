package membership

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// liveReplicas is the size of the live set as this replica sees it. See
// docs/design.md, "Metrics".
var liveReplicas = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "mcpbridge_replicas_live", Help: "Replicas of the manager this replica sees live (their Leases renewed within their duration).",
})

// selfMember is 1 while this replica is in the live set as it sees it
// itself: its own Lease renewed within its duration. A replica at 0 runs
// but owns no McpServer (its Lease cannot be written, or another process
// took its name). See docs/design.md, "Metrics".
var selfMember = prometheus.NewGauge(prometheus.GaugeOpts{
	Name: "mcpbridge_replica_member", Help: "1 while this replica's own Lease is renewed within its duration, so that it is a member and may own McpServers; 0 otherwise.",
})

func init() { metrics.Registry.MustRegister(liveReplicas, selfMember) }

func gaugeBool(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
