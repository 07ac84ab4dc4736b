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

func init() { metrics.Registry.MustRegister(liveReplicas) }
