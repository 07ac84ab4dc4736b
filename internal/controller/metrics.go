package controller

import (
	"sync"
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
	// Idle servers; see docs/design.md, "Idle servers".
	idleServers = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcpbridge_idle_servers", Help: "McpServers asleep (phase Idle) in the namespace.",
	}, []string{"namespace"})
	wakes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpbridge_wakes_total", Help: "Wakes of sleeping McpServers by outcome (success, error, cancelled).",
	}, []string{"namespace", "name", "outcome"})
	wakeDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name: "mcpbridge_wake_duration_seconds", Help: "Time from the first tool call to a sleeping McpServer until it is connected again, or its wake failed.",
		Buckets: prometheus.ExponentialBuckets(0.05, 2, 12),
	}, []string{"namespace", "name"})
)

func init() {
	metrics.Registry.MustRegister(connectionUp, connectionGeneration, reconnectAttempts, publishedTools,
		toolCalls, toolCallDuration, toolSyncDuration, idleServers, wakes, wakeDuration)
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

func (o observer) Wake(outcome string, d time.Duration) {
	wakes.WithLabelValues(o.ns, o.name, outcome).Inc()
	if outcome != "cancelled" {
		wakeDuration.WithLabelValues(o.ns, o.name).Observe(d.Seconds())
	}
}

var (
	_ bridge.Observer     = observer{}
	_ bridge.WakeObserver = observer{}
)

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
	idle.set(ns, name, sn.Phase == bridge.PhaseIdle)
	connectionGeneration.WithLabelValues(ns, name).Set(float64(sn.Generation))
	publishedTools.WithLabelValues(ns, name).Set(float64(len(sn.Tools)))
}

func forgetMetrics(ns, name string) {
	idle.set(ns, name, false)
	labels := prometheus.Labels{"namespace": ns, "name": name}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		connectionUp, connectionGeneration, reconnectAttempts, publishedTools, toolCalls, toolCallDuration, toolSyncDuration,
		wakes, wakeDuration,
	} {
		v.DeletePartialMatch(labels)
	}
}

// idle counts the sleeping McpServers of each namespace for idleServers.
var idle = idleSet{byNS: map[string]map[string]bool{}}

type idleSet struct {
	mu   sync.Mutex
	byNS map[string]map[string]bool
}

// set records whether ns/name sleeps and updates the namespace's gauge; a
// namespace without sleeping servers loses its series.
func (s *idleSet) set(ns, name string, asleep bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	names := s.byNS[ns]
	if asleep == names[name] {
		return
	}
	if asleep {
		if names == nil {
			names = map[string]bool{}
			s.byNS[ns] = names
		}
		names[name] = true
	} else {
		delete(names, name)
	}
	if len(names) == 0 {
		delete(s.byNS, ns)
		idleServers.DeleteLabelValues(ns)
		return
	}
	idleServers.WithLabelValues(ns).Set(float64(len(names)))
}
