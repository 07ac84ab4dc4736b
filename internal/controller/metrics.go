package controller

import (
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"

	"github.com/mcpbridge/operator/api/v1alpha1"
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
	// One series per McpServer, for the phase its status shows (value 1),
	// so that dashboards count servers by phase and alerts can say "Failed
	// for 5 minutes" without kube-state-metrics.
	serverPhase = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mcpbridge_server_phase", Help: "1 for the phase the McpServer's status shows (label phase).",
	}, []string{"namespace", "name", "phase"})
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

// lastPhase remembers the phase series of each McpServer ("ns/name"), so
// that a new phase replaces it, whatever phases the API adds.
var lastPhase sync.Map

func init() {
	metrics.Registry.MustRegister(connectionUp, connectionGeneration, reconnectAttempts, publishedTools,
		toolCalls, toolCallDuration, toolSyncDuration, serverPhase, idleServers, wakes, wakeDuration)
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

// recordPhase sets the McpServer's phase series, replacing the previous one.
func recordPhase(ns, name string, phase v1alpha1.Phase) {
	serverPhase.WithLabelValues(ns, name, string(phase)).Set(1)
	if prev, ok := lastPhase.Swap(ns+"/"+name, phase); ok && prev != phase {
		serverPhase.DeleteLabelValues(ns, name, string(prev.(v1alpha1.Phase)))
	}
}

// recordGauges sets the per-server gauges from a snapshot, or clears them.
func recordGauges(ns, name string, sn *bridge.Snapshot) {
	if sn == nil {
		forgetConnection(ns, name)
		return
	}
	up := 0.0
	if sn.Phase == v1alpha1.PhaseReady {
		up = 1
	}
	connectionUp.WithLabelValues(ns, name).Set(up)
	idle.set(ns, name, sn.Phase == v1alpha1.PhaseIdle)
	connectionGeneration.WithLabelValues(ns, name).Set(float64(sn.Generation))
	publishedTools.WithLabelValues(ns, name).Set(float64(len(sn.Tools)))
}

// forgetConnection clears the series of a server that runs no supervisor;
// its phase series stays.
func forgetConnection(ns, name string) {
	idle.set(ns, name, false)
	labels := prometheus.Labels{"namespace": ns, "name": name}
	for _, v := range []interface{ DeletePartialMatch(prometheus.Labels) int }{
		connectionUp, connectionGeneration, reconnectAttempts, publishedTools, toolCalls, toolCallDuration, toolSyncDuration,
		wakes, wakeDuration,
	} {
		v.DeletePartialMatch(labels)
	}
}

// forgetMetrics clears every series of a deleted McpServer.
func forgetMetrics(ns, name string) {
	forgetConnection(ns, name)
	lastPhase.Delete(ns + "/" + name)
	serverPhase.DeletePartialMatch(prometheus.Labels{"namespace": ns, "name": name})
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
