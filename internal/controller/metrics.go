package controller

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/mcpbridge/operator/internal/bridge"
)

// Metrics, labelled by namespace and name; never a secret.
// See docs/design.md, "Metrics".
var (
	connectionUp = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcpbridge_connection_up", Help: "1 while the McpServer is connected with its tools published.",
	}, []string{"namespace", "name"})
	connectionGeneration = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcpbridge_connection_generation", Help: "The latest connection generation of the McpServer.",
	}, []string{"namespace", "name"})
	reconnectAttempts = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpbridge_reconnect_attempts_total", Help: "Reconnect attempts scheduled.",
	}, []string{"namespace", "name"})
	publishedTools = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcpbridge_published_tools", Help: "Tools the McpServer has published in the registry.",
	}, []string{"namespace", "name"})
	toolCalls = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpbridge_tool_calls_total", Help: "tools/call requests by outcome (success, tool_error, error, unavailable).",
	}, []string{"namespace", "name", "outcome"})
	toolCallDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "mcpbridge_tool_call_duration_seconds", Help: "Duration of tools/call requests.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	}, []string{"namespace", "name"})
	toolSyncDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "mcpbridge_tool_sync_duration_seconds", Help: "Duration of complete tools/list fetches.",
		Buckets: prometheus.ExponentialBuckets(0.001, 4, 10),
	}, []string{"namespace", "name", "result"})
)

func init() {
	metrics.Registry.MustRegister(connectionUp, connectionGeneration, reconnectAttempts, publishedTools,
		toolCalls, toolCallDuration, toolSyncDuration)
}

// observer feeds one McpServer's calls and syncs into the metrics.
type observer struct{ ns, name string }

func (o observer) ToolCall(outcome string, d time.Duration) {
	toolCalls.WithLabelValues(o.ns, o.name, outcome).Inc()
	toolCallDuration.WithLabelValues(o.ns, o.name).Observe(d.Seconds())
}

func (o observer) ToolSync(ok bool, d time.Duration) {
	result := "success"
	if !ok {
		result = "error"
	}
	toolSyncDuration.WithLabelValues(o.ns, o.name, result).Observe(d.Seconds())
}

var _ bridge.Observer = observer{}

// recordGauges sets the per-server gauges from a snapshot, or clears them.
func recordGauges(ns, name string, sn *bridge.Snapshot) {
	if sn == nil {
		forgetMetrics(ns, name)
		return
	}
	up := 0.0
	if sn.Phase == bridge.PhaseReady {
		up = 1
	}
	connectionUp.WithLabelValues(ns, name).Set(up)
	connectionGeneration.WithLabelValues(ns, name).Set(float64(sn.Generation))
	publishedTools.WithLabelValues(ns, name).Set(float64(len(sn.Tools)))
}

func forgetMetrics(ns, name string) {
	labels := prometheus.Labels{"namespace": ns, "name": name}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		connectionUp, connectionGeneration, reconnectAttempts, publishedTools, toolCalls, toolCallDuration, toolSyncDuration,
	} {
		v.DeletePartialMatch(labels)
	}
}
