package chart_test

import (
	"strings"
	"testing"

	"helm.sh/helm/v4/pkg/chart/v2/lint"
	"helm.sh/helm/v4/pkg/chart/v2/lint/support"
)

// valueSets are the values every test renders the chart with: the defaults
// and two sets that change every value there is, between them.
var valueSets = map[string]map[string]any{
	"defaults": nil,
	"custom": {
		"image": map[string]any{"repository": "registry.example.com/mcpbridge/operator",
			"digest": "sha256:" + strings.Repeat("ab", 32), "pullPolicy": "Always"},
		"imagePullSecrets": []any{map[string]any{"name": "registry"}},
		"fullnameOverride": "bridge",
		"replicaCount":     2,
		"replica":          map[string]any{"leaseDuration": "30s", "port": 9091},
		"crds":             map[string]any{"keep": false},
		"serviceAccount":   map[string]any{"name": "bridge-sa", "annotations": map[string]any{"example.com/role": "mcp"}},
		"manager": map[string]any{
			"watchNamespaces": []any{"agents", "tools"},
			"probePort":       9081,
			"enableHTTP2":     true,
			"log": map[string]any{"level": "debug", "encoder": "console", "stacktraceLevel": "panic",
				"timeEncoding": "iso8601", "development": true},
			"extraArgs": []any{"--zap-log-level=2"},
			"extraEnv":  []any{map[string]any{"name": "OTEL_SERVICE_NAME", "value": "mcp-bridge"}},
		},
		"stdio": map[string]any{"localNamespaces": []any{"agents", "dev"}, "images": map[string]any{
			"shim": "registry.example.com/mcpbridge/operator:shim", "node": "registry.example.com/node:22",
			"python": "registry.example.com/uv:python3.13"}},
		"egress": map[string]any{"upstreamAllowCIDRs": []any{"127.0.0.1/32", "fe80::/10"}},
		"limits": map[string]any{"minReconnectDelay": "250ms", "minHealthCheckInterval": "0",
			"maxToolCallTimeout": "1h30m", "maxConnectionTimeout": "2m"},
		"budgets": map[string]any{"sessionsPerIdentity": 8, "sessionsPerNamespace": 100, "inflightCallsPerIdentity": 4, "inflightCallsPerNamespace": 40,
			"resultBytesPerNamespace": "128Mi", "toolBytesPerNamespace": "32Mi",
			"tokenReviews": map[string]any{"qps": 40, "burst": 80}, "tokenReviewsPerSource": map[string]any{"qps": 2.5, "burst": 4},
			"accessReviewsPerIdentity": map[string]any{"qps": 0.5, "burst": 20}, "accessReviewsPerRequest": 8},
		"gateway": map[string]any{"port": 9090, "tokenAudiences": []any{"mcpbridge.dev", "agents.example.com"},
			"tls": map[string]any{"secretName": "gateway-tls"},
			"service": map[string]any{"type": "NodePort", "port": 80,
				"annotations": map[string]any{"example.com/lb": "internal"}}},
		"metrics": map[string]any{"port": 9443, "certSecret": "metrics-tls",
			"service": map[string]any{"port": 443, "annotations": map[string]any{"example.com/scrape": "yes"}},
			"serviceMonitor": map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"},
				"interval": "15s", "scrapeTimeout": "10s",
				"tlsConfig": map[string]any{"serverName": "bridge-metrics.mcpbridge-system.svc",
					"ca": map[string]any{"secret": map[string]any{"name": "metrics-tls", "key": "ca.crt"}}}}},
		"resources":                 map[string]any{"requests": map[string]any{"cpu": "200m", "memory": "256Mi"}, "limits": map[string]any{"cpu": "2", "memory": "1Gi"}},
		"podAnnotations":            map[string]any{"example.com/team": "ai"},
		"podLabels":                 map[string]any{"team": "ai"},
		"nodeSelector":              map[string]any{"kubernetes.io/os": "linux"},
		"tolerations":               []any{map[string]any{"key": "dedicated", "operator": "Equal", "value": "ai", "effect": "NoSchedule"}},
		"affinity":                  map[string]any{"nodeAffinity": map[string]any{"preferredDuringSchedulingIgnoredDuringExecution": []any{map[string]any{"weight": 1, "preference": map[string]any{"matchExpressions": []any{map[string]any{"key": "pool", "operator": "In", "values": []any{"ai"}}}}}}}},
		"topologySpreadConstraints": []any{map[string]any{"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": map[string]any{"matchLabels": map[string]any{"app.kubernetes.io/name": "mcp-bridge"}}}},
		"grafanaDashboard": map[string]any{"enabled": true, "namespace": "default",
			"labels": map[string]any{"dashboards": "mcp"}, "annotations": map[string]any{"grafana_folder": "MCP"}},
		"prometheusRule": map[string]any{"enabled": true, "labels": map[string]any{"release": "prometheus"},
			"alertLabels": map[string]any{"team": "ai"}, "serverFailedFor": "15m",
			"reconnectStorm": map[string]any{"window": "30m", "attempts": 25},
			"gatewayErrors":  map[string]any{"ratio": 0.2, "for": "30m"}, "authRateLimitedFor": "1m", "replicaWithoutOwnershipFor": "2m"},
	},
	"minimal": {
		"admissionPolicies": map[string]any{"authorReferences": false, "managerWrites": false},
		"crds":              map[string]any{"install": false},
		"leaderElection":    map[string]any{"enabled": false},
		"replicaCount":      1,
		"serviceAccount":    map[string]any{"create": false, "name": "preexisting"},
		"gateway":           map[string]any{"auth": "none"},
		"metrics":           map[string]any{"enabled": false, "serviceMonitor": map[string]any{"enabled": true}},
	},
	"plain-metrics": {
		"metrics": map[string]any{"secure": false, "serviceMonitor": map[string]any{"enabled": true}},
	},
	"cert-manager": {
		"gateway": map[string]any{"tls": map[string]any{"certManager": map[string]any{"enabled": true,
			"issuerRef": map[string]any{"name": "cluster-ca", "kind": "ClusterIssuer"}, "duration": "720h", "renewBefore": "240h"},
			"extraDNSNames": []any{"mcp.example.com"}}},
	},
}

// TestLint runs `helm lint` on the chart with every value set: nothing
// worse than an informational message.
func TestLint(t *testing.T) {
	for name, vals := range valueSets {
		t.Run(name, func(t *testing.T) {
			l := lint.RunAll(chartDir(), vals, releaseNamespace)
			for _, m := range l.Messages {
				if m.Severity > support.InfoSev {
					t.Errorf("%s", m)
				} else {
					t.Logf("%s", m)
				}
			}
		})
	}
}

// TestBadValuesAreRefused checks that a mistake in the values fails the
// render with a message that names it, rather than a manager that crashes.
func TestBadValuesAreRefused(t *testing.T) {
	cases := []struct {
		name    string
		vals    map[string]any
		wantErr string
	}{
		{"typo", map[string]any{"replicas": 2}, "replicas"},
		{"unknown auth", map[string]any{"gateway": map[string]any{"auth": "basic"}}, "/gateway/auth"},
		{"no token audience", map[string]any{"gateway": map[string]any{"tokenAudiences": []any{}}}, "/gateway/tokenAudiences"},
		{"two audiences in one", map[string]any{"gateway": map[string]any{"tokenAudiences": []any{"a,b"}}}, "/gateway/tokenAudiences"},
		{"port out of range", map[string]any{"metrics": map[string]any{"port": 70000}}, "/metrics/port"},
		{"bad namespace", map[string]any{"manager": map[string]any{"watchNamespaces": []any{"Agents_1"}}}, "watchNamespaces"},
		{"extra arg without dashes", map[string]any{"manager": map[string]any{"extraArgs": []any{"leader-elect"}}}, "extraArgs"},
		{"bad local namespace", map[string]any{"stdio": map[string]any{"localNamespaces": []any{"Agents_1"}}}, "localNamespaces"},
		{"image with a space", map[string]any{"stdio": map[string]any{"images": map[string]any{"node": "node 22"}}}, "/stdio/images/node"},
		{"unknown image", map[string]any{"stdio": map[string]any{"images": map[string]any{"go": "golang:1"}}}, "go"},
		{"bad log level", map[string]any{"manager": map[string]any{"log": map[string]any{"level": "verbose"}}}, "/manager/log/level"},
		{"allowed upstream not a CIDR", map[string]any{"egress": map[string]any{"upstreamAllowCIDRs": []any{"localhost"}}},
			"/egress/upstreamAllowCIDRs"},
		{"limit not a duration", map[string]any{"limits": map[string]any{"maxToolCallTimeout": "10 minutes"}},
			"/limits/maxToolCallTimeout"},
		{"lease not whole seconds", map[string]any{"replica": map[string]any{"leaseDuration": "1500ms"}}, "/replica/leaseDuration"},
		{"replica port out of range", map[string]any{"replica": map[string]any{"port": 0}}, "/replica/port"},
		{"bad digest", map[string]any{"image": map[string]any{"digest": "latest"}}, "digest"},
		{"no session budget", map[string]any{"budgets": map[string]any{"sessionsPerIdentity": 0}}, "/budgets/sessionsPerIdentity"},
		{"result bytes not a quantity", map[string]any{"budgets": map[string]any{"resultBytesPerNamespace": "lots"}},
			"/budgets/resultBytesPerNamespace"},
		{"no token review rate", map[string]any{"budgets": map[string]any{"tokenReviews": map[string]any{"qps": 0, "burst": 50}}},
			"/budgets/tokenReviews/qps"},
		{"token review rate without burst", map[string]any{"budgets": map[string]any{"tokenReviewsPerSource": map[string]any{"qps": 5, "burst": nil}}},
			"/budgets/tokenReviewsPerSource"},
		{"fractional access review burst", map[string]any{"budgets": map[string]any{"accessReviewsPerIdentity": map[string]any{"qps": 10, "burst": 1.5}}},
			"/budgets/accessReviewsPerIdentity/burst"},
		{"no per-request reviews", map[string]any{"budgets": map[string]any{"accessReviewsPerRequest": 0}}, "/budgets/accessReviewsPerRequest"},
		{"tracing endpoint without scheme", map[string]any{"tracing": map[string]any{"endpoint": "collector:4317"}}, "/tracing/endpoint"},
		{"tracing protocol the manager lacks", map[string]any{"tracing": map[string]any{"protocol": "http/json"}}, "/tracing/protocol"},
		{"sampler ratio above 1", map[string]any{"tracing": map[string]any{"samplerRatio": "2"}}, "/tracing/samplerRatio"},
		{"no disruption allowed", map[string]any{"podDisruptionBudget": map[string]any{"maxUnavailable": 0}},
			"/podDisruptionBudget/maxUnavailable"},
		{"disruption budget not a percentage", map[string]any{"podDisruptionBudget": map[string]any{"maxUnavailable": "half"}},
			"/podDisruptionBudget/maxUnavailable"},
		{"certificate on plain HTTP", map[string]any{"metrics": map[string]any{"secure": false, "certSecret": "tls"}},
			"metrics.certSecret needs metrics.secure"},
		{"no ServiceAccount", map[string]any{"serviceAccount": map[string]any{"create": false}},
			"serviceAccount.name is required"},
		{"gateway certificate on plain HTTP", map[string]any{"gateway": map[string]any{"tls": map[string]any{"enabled": false, "secretName": "tls"}}},
			"need gateway.tls.enabled"},
		{"cert-manager on plain HTTP", map[string]any{"gateway": map[string]any{"tls": map[string]any{"enabled": false,
			"certManager": map[string]any{"enabled": true, "issuerRef": map[string]any{"name": "ca"}}}}}, "need gateway.tls.enabled"},
		{"cert-manager without an issuer", map[string]any{"gateway": map[string]any{"tls": map[string]any{
			"certManager": map[string]any{"enabled": true}}}}, "needs gateway.tls.certManager.issuerRef.name"},
		{"unknown TLS value", map[string]any{"gateway": map[string]any{"tls": map[string]any{"selfSigned": true}}}, "selfSigned"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, err := renderRelease(t, tc.vals)
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
			}
		})
	}
}
