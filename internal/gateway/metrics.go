package gateway

import (
	"sync"
	"time"

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

// Refusals by a budget or limit (docs/design.md, "Limits" and "Budgets"):
// the answer beyond a limit is immediate, and counted here by namespace and
// limit. The namespace is empty where the limit comes before the caller is
// known to use the namespace (TokenReviews), or when the namespace holds no
// McpServer, so that callers cannot grow the series with made-up names.
var refusals = prometheus.NewCounterVec(prometheus.CounterOpts{
	Name: "mcpbridge_gateway_refusals_total",
	Help: "Gateway requests refused by a budget or rate limit, by namespace and limit.",
}, []string{"namespace", "limit"})

// Values of the limit label of mcpbridge_gateway_refusals_total.
const (
	LimitTokenReviews             = "token_reviews"
	LimitTokenReviewsPerSource    = "token_reviews_per_source"
	LimitAccessReviewsPerIdentity = "access_reviews_per_identity"
	LimitAccessReviewsPerRequest  = "access_reviews_per_request"
)

func init() { metrics.Registry.MustRegister(refusals) }

// refusedBy counts a refusal by limit in namespace ns ("" when unknown).
func refusedBy(ns, limit string) { refusals.WithLabelValues(ns, limit).Inc() }

// callSeries holds, per outcome, the series a tools/call counts into,
// bound on first use: WithLabelValues hashes and looks up its labels every
// time, twice per call. A series appears when its first call ends, as with
// WithLabelValues.
var callSeries sync.Map // outcome -> *outcomeSeries

type outcomeSeries struct {
	requests prometheus.Counter
	duration prometheus.Observer
}

// countCall counts a tools/call that ended with outcome after d.
func countCall(outcome string, d time.Duration) {
	s, ok := callSeries.Load(outcome)
	if !ok {
		s, _ = callSeries.LoadOrStore(outcome, &outcomeSeries{
			requests: requests.WithLabelValues("tools/call", outcome), duration: callDuration.WithLabelValues(outcome)})
	}
	series := s.(*outcomeSeries)
	series.requests.Inc()
	series.duration.Observe(d.Seconds())
}
