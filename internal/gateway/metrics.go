package gateway

import (
	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

var (
	requests = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "mcpbridge_gateway_requests_total",
		Help: "Gateway requests by MCP method (or \"http\" for refused requests) and outcome.",
	}, []string{"method", "outcome"})
	callDuration = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "mcpbridge_gateway_call_duration_seconds",
		Help:    "Latency of tools/call through the gateway, upstream call included.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
	}, []string{"outcome"})
)

func init() { metrics.Registry.MustRegister(requests, callDuration) }

// Refusals by the budgets (budgets.go). The namespace is one the caller was
// authenticated and authorized for, so tenants cannot grow its values.
var refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "mcpbridge_gateway_refusals_total",
	Help: "Requests refused because a budget of the namespace or of the caller's identity was spent, by namespace and limit.",
}, []string{"namespace", "limit"})

func init() { metrics.Registry.MustRegister(refusals) }

// refused counts a request turned away before MCP saw it.
func refused(outcome string) { requests.WithLabelValues("http", outcome).Inc() }
