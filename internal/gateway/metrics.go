package gateway

import (
	"context"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
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

// refused counts a request turned away before MCP saw it.
func refused(outcome string) { requests.WithLabelValues("http", outcome).Inc() }

// observe is receiving middleware that counts every MCP request by method
// and outcome and times tools/call.
func observe(next mcp.MethodHandler) mcp.MethodHandler {
	return func(ctx context.Context, method string, req mcp.Request) (mcp.Result, error) {
		start := time.Now()
		res, err := next(ctx, method, req)
		outcome := "success"
		if err != nil {
			outcome = "error"
		} else if r, ok := res.(*mcp.CallToolResult); ok && r.IsError {
			outcome = "tool_error"
		}
		requests.WithLabelValues(method, outcome).Inc()
		if method == "tools/call" {
			callDuration.WithLabelValues(outcome).Observe(time.Since(start).Seconds())
		}
		return res, err
	}
}
