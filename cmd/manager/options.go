package main

import (
	"flag"
	"fmt"
	"net"
	"net/netip"
	"strings"

	"go.opentelemetry.io/otel/trace"
	"sigs.k8s.io/controller-runtime/pkg/client/config"
	"sigs.k8s.io/controller-runtime/pkg/log/zap"

	"github.com/mcpbridge/operator/internal/egress"
)

// Gateway authentication modes of --gateway-auth.
const (
	gatewayAuthToken = "token"
	gatewayAuthNone  = "none"
	// defaultGatewayAudience is the audience agents' tokens are made for.
	defaultGatewayAudience = "mcpbridge.dev"
)

type options struct {
	metricsAddr             string
	metricsSecure           bool
	metricsCertPath         string
	metricsCertName         string
	metricsCertKey          string
	enableHTTP2             bool
	probeAddr               string
	leaderElect             bool
	leaderElectionNamespace string
	gatewayAddr             string
	gatewayAuth             string
	gatewayAudiences        []string
	gatewayCertDir          string
	watchNamespaces         []string
	upstreamAllowCIDRs      []netip.Prefix
	zap                     zap.Options
	// tracerProvider comes from the OTEL_* environment, not from a flag.
	tracerProvider trace.TracerProvider
}

// parseOptions defines every flag on fs and parses args. The flags and
// their defaults follow a kubebuilder manager's where one exists, so that
// what users know from other operators works here; see docs/design.md,
// "Flags".
func parseOptions(fs *flag.FlagSet, args []string) (*options, error) {
	o := &options{}
	var namespaces, audiences, allowCIDRs string
	// --kubeconfig belongs to controller-runtime's config loader, which
	// reads it when it is registered on the FlagSet that is parsed.
	config.RegisterFlags(fs)
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", "0",
		"Address the Prometheus metrics endpoint binds to, e.g. :8443 for HTTPS or :8080 for HTTP; 0 disables it.")
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true,
		"Serve metrics over HTTPS to callers whose bearer token passes a TokenReview and a SubjectAccessReview "+
			"for GET /metrics (the ClusterRole metrics-reader grants it); --metrics-secure=false serves plain HTTP to anyone.")
	fs.StringVar(&o.metricsCertPath, "metrics-cert-path", "",
		"Directory with the metrics server's certificate and key, reloaded when they change; empty uses a self-signed certificate.")
	fs.StringVar(&o.metricsCertName, "metrics-cert-name", "tls.crt",
		"File name of the metrics server's certificate in --metrics-cert-path.")
	fs.StringVar(&o.metricsCertKey, "metrics-cert-key", "tls.key",
		"File name of the metrics server's private key in --metrics-cert-path.")
	fs.BoolVar(&o.enableHTTP2, "enable-http2", false,
		"Offer HTTP/2 on the metrics server's TLS listener; off by default because of the HTTP/2 "+
			"Stream Cancellation and Rapid Reset vulnerabilities (CVE-2023-44487, CVE-2023-39325).")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":8081",
		"Address the /healthz and /readyz probes bind to.")
	fs.BoolVar(&o.leaderElect, "leader-elect", false,
		"Elect a leader so that only one manager runs supervisors and the gateway.")
	fs.StringVar(&o.leaderElectionNamespace, "leader-election-namespace", "",
		"Namespace of the leader election Lease; empty is the manager's own namespace, which is only known in a cluster.")
	fs.StringVar(&o.gatewayAddr, "gateway-bind-address", ":8090",
		"Address the MCP gateway (/namespaces/{namespace}/mcp) binds to.")
	fs.StringVar(&o.gatewayAuth, "gateway-auth", gatewayAuthToken,
		"Gateway authentication: 'token' (TokenReview + SubjectAccessReview) or 'none' (loopback only).")
	fs.StringVar(&audiences, "gateway-token-audiences", defaultGatewayAudience,
		"Comma-separated audiences a gateway token must be valid for (kubectl create token SA --audience "+defaultGatewayAudience+
			"); a token made for the apiserver is refused, so that tokens that work against the apiserver do not work here and the other way round.")
	fs.StringVar(&o.gatewayCertDir, "gateway-cert-dir", "",
		"Directory with the gateway's tls.crt and tls.key (e.g. a cert-manager Secret), reloaded when they change; "+
			"empty serves plain HTTP.")
	fs.StringVar(&namespaces, "watch-namespaces", "",
		"Comma-separated namespaces to watch; empty watches all namespaces.")
	fs.StringVar(&allowCIDRs, strings.TrimPrefix(egress.AllowFlag, "--"), "",
		"Comma-separated CIDRs that Streamable HTTP upstreams may be reached at although they are loopback, link-local, "+
			"unspecified or multicast addresses, which are refused otherwise, e.g. 127.0.0.0/8,::1/128 for local development.")
	o.zap.BindFlags(fs)
	fs.Usage = func() {
		fmt.Fprintf(fs.Output(), "Usage: %s [flags]\n\nRuns the mcp-bridge operator: the McpServer controller, "+
			"its connection supervisors and the MCP gateway.\n\nFlags:\n", fs.Name())
		fs.PrintDefaults()
	}
	err := fs.Parse(args)
	if err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %q: every option is a --flag", fs.Args())
	}
	o.watchNamespaces = splitList(namespaces)
	o.gatewayAudiences = splitList(audiences)
	if o.upstreamAllowCIDRs, err = egress.ParseCIDRs(allowCIDRs); err != nil {
		return nil, fmt.Errorf("%s: %w", egress.AllowFlag, err)
	}
	return o, o.validate()
}

func (o *options) validate() error {
	switch o.gatewayAuth {
	case gatewayAuthToken:
	case gatewayAuthNone:
		if !isLoopback(o.gatewayAddr) {
			return fmt.Errorf("--gateway-auth=none is only allowed when --gateway-bind-address is a loopback address, not %q", o.gatewayAddr)
		}
	default:
		return fmt.Errorf("--gateway-auth must be %q or %q, not %q", gatewayAuthToken, gatewayAuthNone, o.gatewayAuth)
	}
	if o.gatewayAuth == gatewayAuthToken && len(o.gatewayAudiences) == 0 {
		return fmt.Errorf("--gateway-token-audiences must name at least one audience (default %q)", defaultGatewayAudience)
	}
	if o.metricsCertPath != "" && !o.metricsSecure {
		return fmt.Errorf("--metrics-cert-path=%s needs --metrics-secure: a plain HTTP metrics server has no certificate", o.metricsCertPath)
	}
	if o.leaderElectionNamespace != "" && !o.leaderElect {
		return fmt.Errorf("--leader-election-namespace=%s needs --leader-elect", o.leaderElectionNamespace)
	}
	return nil
}

// isLoopback is true only for an explicit loopback host: an empty host
// binds every interface.
func isLoopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}

func splitList(s string) []string {
	var out []string
	for _, part := range strings.Split(s, ",") {
		if part = strings.TrimSpace(part); part != "" {
			out = append(out, part)
		}
	}
	return out
}
